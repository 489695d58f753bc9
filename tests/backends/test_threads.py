"""The Numba loops' rows shared out among threads (``fallback_cpu/threads.py``): shares that
cover the rows, run at once, errors that reach the caller, and searches whose plans do not
depend on how the rows were cut."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from typing import Any

import pytest

from tests.support.shares import many_uneven_shares
from tidgap import search
from tidgap.model.problem import load_problem

pytest.importorskip("numba")
from tidgap.fallback_cpu import threads  # noqa: E402  (after the skip: it imports Numba)


@pytest.mark.parametrize("count", [1, 2, 3, 16])
@pytest.mark.parametrize("rows", [0, 1, 31, 32, 64, 65, 1000])
def test_shares_cover_the_rows_in_order(
    rows: int, count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(threads, "thread_count", lambda: count)
    for cheap, least in ((False, threads.LEAST_SHARE), (True, threads.LEAST_CHEAP_SHARE)):
        shares = threads.row_shares(rows, cheap)
        assert shares[0][0] == 0 and shares[-1][1] == rows
        assert all(a[1] == b[0] for a, b in zip(shares, shares[1:], strict=False))
        assert len(shares) == max(1, min(threads.SHARES_PER_THREAD * count, rows // least))
        if len(shares) > 1:
            assert min(end - first for first, end in shares) >= least


def test_a_loop_over_rows_gets_its_arguments_then_each_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(threads, "thread_count", lambda: 3)
    results = threads.over_rows(lambda tag, first, end: (tag, first, end), 200, "x")
    assert results == [("x", *share) for share in threads.row_shares(200)]
    assert len(results) == 6


def test_shares_run_here_and_in_the_pool_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads' shares (with ``NUMBA_NUM_THREADS=1`` none ran in the pool and the
    barrier broke): the caller's and a pool thread's, at once."""
    monkeypatch.setattr(threads, "thread_count", lambda: 2)
    started = threading.Barrier(2, timeout=30)  # each share waits for the other

    def run(share: int) -> tuple[int, int]:
        started.wait()
        return share, threading.get_ident()

    results = threads.in_threads(run, [10, 11])
    assert [share for share, _ in results] == [10, 11]
    assert threading.get_ident() in {ident for _, ident in results}
    assert len({ident for _, ident in results}) == 2


def test_the_caller_runs_the_shares_no_pool_thread_started() -> None:
    """A busy machine: the pool's threads are not running yet (here: all held by other
    work), so the caller runs every share and does not wait for them."""
    pool = threads._workers()
    release = threading.Event()
    held = [pool.submit(release.wait, 30) for _ in range(pool._max_workers)]
    try:
        results = threads.in_threads(lambda share: (share, threading.get_ident()), [1, 2, 3])
    finally:
        release.set()
    assert results == [(share, threading.get_ident()) for share in (1, 2, 3)]
    assert all(future.result() for future in held)


def test_an_error_in_a_share_reaches_the_caller() -> None:
    def run(share: int) -> int:
        if share == 2:
            raise ValueError("share 2")
        return share

    with pytest.raises(ValueError, match="share 2"):
        threads.in_threads(run, [1, 2, 3])
    assert threads.in_threads(run, [1, 3]) == [1, 3]  # the pool still works


def test_a_forked_process_starts_its_own_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads do not survive a fork: a process with another id makes a new pool."""
    first = threads._workers()
    assert threads._workers() is first
    monkeypatch.setattr(os, "getpid", lambda: -1)
    assert threads._workers() is not first


@pytest.mark.parametrize("schedule", ["windowed", "flush"])
def test_a_search_gives_the_same_plan_however_its_rows_are_cut(
    schedule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The evaluation, breeding, mutation and repair loops, run on one thread (its two
    shares, both by the caller) or cut into fourteen uneven shares: the same plan, time and
    evaluations."""
    problem = load_problem("example:hetero-8")
    options = dict(seed=3, generations=6, backend="numba", schedule=schedule)
    monkeypatch.setattr(threads, "thread_count", lambda: 1)
    alone = search(problem, **options)
    many_uneven_shares(monkeypatch)
    shared = search(problem, **options)
    assert shared.plan == alone.plan
    assert shared.evaluation == alone.evaluation
    assert shared.evaluations == alone.evaluations


def test_threads_calling_their_first_loops_at_once_share_one_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Host threads making the first call at once: one pool for all (each made its own,
    all but one leaked); the pool's making slowed to widen the window."""
    made = []

    class SlowPool(threads.ThreadPoolExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            time.sleep(0.05)
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(threads, "_pool", None)
    monkeypatch.setattr(threads, "ThreadPoolExecutor", SlowPool)
    start = threading.Barrier(6)

    def first_call() -> Any:
        start.wait()
        return threads._workers()

    with concurrent.futures.ThreadPoolExecutor(6) as host:
        pools = list(host.map(lambda _: first_call(), range(6)))
    assert len(made) == 1 and all(pool is made[0] for pool in pools)
    made[0].shutdown()
