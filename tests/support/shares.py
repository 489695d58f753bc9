"""Compiled loops cut into many uneven shares (:mod:`tidgap.fallback_cpu.threads`)."""

from __future__ import annotations

import pytest

#: Threads the loops believe they have: two shares each, so 300 rows make 14 shares of 21
#: or 22 rows.
MANY_THREADS = 7


def many_uneven_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row-shared loop cuts its rows into two shares for each of :data:`MANY_THREADS`
    threads, one row or more each (the pool runs them on however many threads it has)."""
    from tidgap.fallback_cpu import threads

    monkeypatch.setattr(threads, "thread_count", lambda: MANY_THREADS)
    monkeypatch.setattr(threads, "LEAST_SHARE", 1)
    monkeypatch.setattr(threads, "LEAST_CHEAP_SHARE", 1)
