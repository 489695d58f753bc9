"""Compiled loops cut into many uneven shares (:mod:`tidgap.fallback_cpu.threads`)."""

from __future__ import annotations

import pytest

#: Threads the loops believe they have: 7 shares of 300 rows are 42 or 43 rows each.
MANY_THREADS = 7


def many_uneven_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row-shared loop cuts its rows into :data:`MANY_THREADS` shares, one row or
    more each (the pool runs them on however many threads it has)."""
    from tidgap.fallback_cpu import threads

    monkeypatch.setattr(threads, "thread_count", lambda: MANY_THREADS)
    monkeypatch.setattr(threads, "LEAST_SHARE", 1)
    monkeypatch.setattr(threads, "LEAST_CHEAP_SHARE", 1)
