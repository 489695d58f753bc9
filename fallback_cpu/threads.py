"""Compiled loops run over shares of their rows in plain threads, one per Numba thread.

A loop compiled with Numba's ``parallel=True`` costs about 3 s more to compile than the
same loop without it (the ordered-plan kernel 8.1 s against 1.9 s on the 2-core development
machine), and a first search compiled seven. The loops here are compiled without it and
release the GIL (``nogil``), so threads of this process run their shares at once: the
README's first command with an empty Numba cache took 14.5 s instead of 30.4-31.0 s (12.0-12.2
s with :mod:`tidgap.fallback_cpu.rows` too). The
price is a few tens of microseconds a call (two Numba calls and a pool thread instead of
one parallel call): ``tidgap search example:vgg16 --generations 200``, 2176 calls, took
about 3% longer. The shares are claimed in turn, so on a busy machine the calling thread
takes those a pool thread the system has not yet run, instead of waiting for it.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

import numba

Share = TypeVar("Share")
Result = TypeVar("Result")

#: The fewest rows (individuals) worth a thread of their own, for the loops over ordered
#: plans (a few microseconds an individual on 8 stages).
LEAST_SHARE = 32
#: The same for the flush evaluation and breeding (under a microsecond an individual on 4
#: stages: ``tidgap search example:gpt1-14 --schedule flush --generations 300`` took
#: 0.55-0.57 s with this, 0.64-0.68 s with :data:`LEAST_SHARE`).
LEAST_CHEAP_SHARE = 256

#: Shares per thread (claimed in turn, so a thread the system runs late takes fewer).
SHARES_PER_THREAD = 2

_pool: tuple[int, ThreadPoolExecutor] | None = None
#: Guards :data:`_pool`'s making: host threads calling their first loops at once shared
#: none (each made a pool, all but one leaked).
_making = threading.Lock()


def _fresh_lock() -> None:
    """A forked child's own :data:`_making` (another thread may have held it at the fork)."""
    global _making
    _making = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock)


def thread_count() -> int:
    """Numba's thread count (``NUMBA_NUM_THREADS``, else the CPUs), without starting its
    threading layer."""
    return max(1, int(numba.config.NUMBA_NUM_THREADS))


def _workers() -> ThreadPoolExecutor:
    """This process's pool of ``thread_count() - 1`` threads (a new one after a fork)."""
    global _pool
    with _making:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(max(thread_count() - 1, 1)))
        return _pool[1]


def in_threads(run: Callable[[Share], Result], shares: Sequence[Share]) -> list[Result]:
    """``run(share)`` for every share, in order of the shares. The calling thread and up to
    ``thread_count() - 1`` of the pool's claim the shares one at a time; a pool thread that
    has not started when the caller runs out of shares is called off, so on a busy machine
    the caller never waits for a thread the system has not yet scheduled."""
    if len(shares) <= 1:
        return [run(share) for share in shares]
    results: list[Result | None] = [None] * len(shares)
    claims = itertools.count()  # next() on a count is atomic under the GIL

    def work() -> None:
        while (index := next(claims)) < len(shares):
            results[index] = run(shares[index])

    helpers = [_workers().submit(work) for _ in range(min(thread_count(), len(shares)) - 1)]
    try:
        work()
    finally:
        for helper in helpers:
            if not helper.cancel():
                helper.result()
    return cast(list[Result], results)


def over_rows(
    loop: Callable[..., Result], rows: int, *arguments: Any, cheap: bool = False
) -> list[Result]:
    """``loop(*arguments, first, end)`` for each share of :func:`row_shares` ``(rows,
    cheap)``, in threads (:func:`in_threads`): its results, one per share, in order."""
    return in_threads(lambda share: loop(*arguments, *share), row_shares(rows, cheap))


def row_shares(rows: int, cheap: bool = False) -> list[tuple[int, int]]:
    """``range(rows)`` cut into contiguous ``(first, end)`` shares, :data:`SHARES_PER_THREAD`
    per thread, each of :data:`LEAST_SHARE` rows or more (:data:`LEAST_CHEAP_SHARE` for
    ``cheap`` rows; one share where there are fewer)."""
    least = LEAST_CHEAP_SHARE if cheap else LEAST_SHARE
    count = max(1, min(SHARES_PER_THREAD * thread_count(), rows // least))
    bounds = [rows * t // count for t in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))
