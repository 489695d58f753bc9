"""``tidgap.search``: find per-stage forward and backward partitions with the least
iteration time, and put the answer beside the baselines people use today."""

from __future__ import annotations

from tidgap.optimize.flush_driver import flush_search
from tidgap.optimize.preparation import chromosome_width, equal_seed_counts
from tidgap.optimize.results import SearchProgress, SearchResult

#: The search of flush plans (its home is :mod:`tidgap.optimize.flush_driver`).
search = flush_search

__all__ = ["SearchProgress", "SearchResult", "chromosome_width", "equal_seed_counts", "search"]
