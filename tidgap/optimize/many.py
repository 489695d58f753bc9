"""``tidgap.search_many``: many searches at once, one executor task per problem.

Any :class:`concurrent.futures.Executor` runs them: a local process pool by default, a Dask
``distributed.Client``'s ``get_executor()`` for a cluster. Problems, options and results
travel pickled (:class:`~tidgap.optimize.results.SearchResult` pickles, with its problem).
"""

from __future__ import annotations

import ctypes
import inspect
import math
import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import fields
from typing import Any

from tidgap.held_signals import signals_blocked
from tidgap.host import usable_cores
from tidgap.model.errors import InputError
from tidgap.model.numbers import copied_list
from tidgap.model.problem import Problem, require_problem
from tidgap.optimize.cluster import ClusterPool
from tidgap.optimize.driver import search
from tidgap.optimize.interrupts import STOP_SIGNALS, StopSignals, also_stopped_by
from tidgap.optimize.optimizer import Stopping, at_least, callable_or_none, checked_search
from tidgap.optimize.results import SearchResult

__all__ = ["LocalPool", "SearchFailed", "WorkerKilled", "default_pool", "local_pool", "search_many"]

#: :func:`tidgap.search` options naming one search's state file, refused by :func:`search_many`.
PER_SEARCH_ONLY = ("checkpoint", "resume")
#: The options of :func:`tidgap.search` that :func:`checked_search` checks.
CHECKED_OPTIONS = frozenset(inspect.signature(checked_search).parameters) - {"problem", "seed"}
#: The options :class:`~tidgap.optimize.optimizer.Stopping` checks (its callbacks too).
STOPPING_OPTIONS = frozenset(field.name for field in fields(Stopping))


class SearchFailed(RuntimeError):
    """Some searches of :func:`search_many` raised; the others finished.

    ``errors`` maps each failed problem's index (input order) to its exception; ``results``
    holds every problem's result in input order, ``None`` where it failed. The message
    names the first failed problem (index and name); ``__cause__`` is its exception.
    """

    def __init__(
        self,
        problems: Sequence[Problem],
        results: list[SearchResult | None],
        errors: dict[int, BaseException],
    ):
        first = min(errors)
        name = problems[first].name
        others = ", the others finished" if len(errors) < len(problems) else ""
        super().__init__(
            f"problem {first} ({name}): {errors[first]} ({len(errors)} of {len(problems)} "
            f"searches failed{others})"
        )
        self.results = results
        self.errors = errors
        self.first = first
        self._problems = list(problems)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (a host's process pool, ``copy``) from the arguments it was made of: its
        own ``args`` are the message alone."""
        return type(self), (self._problems, self.results, self.errors)


#: Seconds between :func:`search_many`'s looks at its tasks, so that the main thread runs
#: Python's signal handlers within that time even where another thread of the process
#: took the signal (the kernel picks a thread; a wait without end in the main thread is
#: woken only by a signal it takes itself).
WAKE = 0.2

#: In a :func:`local_pool` worker, the SIGINT / SIGTERM it received; ``None`` elsewhere.
_worker_signals: StopSignals | None = None
#: In a :func:`local_pool` worker, the number of the signal its launcher stopped the pool
#: for (:meth:`LocalPool.stop`), 0 before; ``None`` elsewhere.
_launcher_signal: ctypes.c_int | None = None


#: In a :func:`local_pool` worker, its pools' count of searches begun; ``None`` elsewhere.
_begun: ctypes.c_int | None = None


def _start_worker(
    threads: int, launcher: int, launcher_signal: ctypes.c_int, begun: ctypes.c_int
) -> None:
    """:func:`local_pool`'s initializer: Numba's threads per worker (unless the user set
    them), SIGINT / SIGTERM recorded, to stop the worker's searches (:func:`_search`), as
    does the launcher's stop (``launcher_signal``, a shared integer), and a watchdog that
    ends the worker once its launcher is gone (a launcher stopped at once by a second
    signal, or killed, left its workers searching): the process ``launcher``, even if it
    ended before this worker started."""
    from tidgap.runtime.worker import start_watchdog

    global _worker_signals, _launcher_signal, _begun
    start_watchdog(math.inf, "tidgap search worker", parent=launcher)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(threads))
    _worker_signals = StopSignals()
    _launcher_signal, _begun = launcher_signal, begun
    for signum in STOP_SIGNALS:
        signal.signal(signum, _worker_signals.handle)
    if hasattr(signal, "pthread_sigmask"):  # held back since the launcher started us
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _stop_received() -> str | None:
    """In a :func:`local_pool` worker, the stop signal it received, or else the one its
    launcher stopped the pool for (``"SIGINT"``, ``"SIGTERM"``); ``None`` if neither."""
    assert _worker_signals is not None
    received = _worker_signals.received()
    if received is None and _launcher_signal is not None and _launcher_signal.value:
        received = STOP_SIGNALS[signal.Signals(_launcher_signal.value)]
    return received


class LocalPool(ProcessPoolExecutor):
    """:func:`local_pool`'s executor: a process pool whose launcher can stop its workers'
    searches (:meth:`stop`), as a signal to each worker would."""

    def __init__(
        self,
        workers: int,
        threads: int | None = None,
        shared: tuple[ctypes.c_int, ctypes.c_int] | None = None,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        if shared is None:
            shared = (context.Value("i", 0, lock=False), context.Value("i", 0, lock=False))
        #: the signal number :meth:`stop` was given, 0 before, and how many searches workers
        #: began (0 while none has: workers that fail to start), both shared with the workers
        #: and with the :meth:`fresh` pools
        self.stopped_by, self.begun = shared
        #: the number of worker processes, and each one's Numba threads
        self.workers, self.threads = workers, threads or max(1, usable_cores() // workers)
        super().__init__(
            max_workers=workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(self.threads, os.getpid(), self.stopped_by, self.begun),
        )

    def fresh(self, workers: int, threads: int | None = None) -> LocalPool:
        """A new pool (:func:`local_pool`'s arguments) that this one's :meth:`stop` stops too."""
        return LocalPool(workers, threads, (self.stopped_by, self.begun))

    def stop(self, signum: int) -> None:
        """Stop every worker's search at its next generation and skip the searches not
        started, as if each worker had received ``signum`` (SIGINT or SIGTERM): for a
        signal sent to the launcher alone (``kill PID``), not to its process group."""
        self.stopped_by.value = int(signum)


#: The executors whose ``stop(signum)`` stops their searches at the next generation and
#: skips those not started.
STOPPABLE = (LocalPool, ClusterPool)


def local_pool(workers: int, threads: int | None = None) -> LocalPool:
    """A pool of ``workers`` processes started by ``spawn`` (Numba's OpenMP threads do not
    survive a fork), each with ``threads`` Numba threads (by default the cores shared out
    among the workers), unless the user set ``NUMBA_NUM_THREADS``. Ctrl-C
    (SIGINT to the terminal's process group) or SIGTERM stops each worker's search at its
    next generation and skips the searches it has not started; so does
    :meth:`LocalPool.stop` from the launcher."""
    return LocalPool(workers, threads)


def default_pool(count: int) -> LocalPool:
    """The :func:`local_pool` for ``count`` searches: one worker per core, at most ``count``."""
    return local_pool(min(usable_cores(), count))


def _search(problem: Problem, seed: int, options: dict[str, Any]) -> SearchResult:
    """One task: :func:`tidgap.search`; in a :func:`local_pool` worker that has received a
    stop signal, it stops at the next generation, or raises ``KeyboardInterrupt`` before
    starting."""
    if _worker_signals is not None:
        if _begun is not None:  # a lost increment between workers leaves it above 0 all the same
            _begun.value += 1
        received = _stop_received()
        if received is not None:
            raise KeyboardInterrupt(f"{received} before the search started")
        options = also_stopped_by(options, _stop_received)  # the caller's own, if any, too
    return search(problem, seed=seed, **options)


def _seed_list(seeds: int | Sequence[int], count: int) -> list[int]:
    """One seed per problem: ``seeds`` for every one, or the sequence (its length
    ``count``); :class:`InputError` on ``seeds`` otherwise."""
    listed = copied_list(seeds)  # NumPy's integers as Python's
    if isinstance(listed, int):
        listed = [listed] * count
    elif not isinstance(listed, list):
        raise InputError(f"must be an int or one int per problem (got {seeds!r})", source="seeds")
    at_least(*((f"seeds[{i}]", seed, None) for i, seed in enumerate(listed)))
    if len(listed) != count:
        raise InputError(f"{len(listed)} seeds for {count} problems", source="seeds")
    return [int(seed) for seed in listed]


def search_many(
    problems: Sequence[Problem],
    *,
    executor: Executor | None = None,
    seeds: int | Sequence[int] = 0,
    on_result: OnResult = None,
    **search_options: Any,
) -> list[SearchResult]:
    """Search every problem with :func:`tidgap.search` (``search_options``: its keyword
    arguments but ``seed``), each in one task of ``executor``; the results in input order.

    ``seeds``: one seed for every problem, or one per problem. ``on_result(i, result)`` is
    called in this process as each search ends with a plan (``i``: its problem's index),
    in the order they end, while the others go on: to save each plan at once. What it
    raises stops the searches, as a Ctrl-C does, and is raised. Each result is the plan
    ``tidgap.search(problem, seed=..., **search_options)`` gives one by one, wherever it
    ran, when the search stops on ``generations`` or ``stagnation``; a ``time_limit``
    makes the plans depend on the load (each search gets fewer generations on busy cores).

    Without ``executor``, a :func:`default_pool` (as many workers as cores, at most one per
    problem) is made and shut down; a given one is left open. With a process pool or a
    cluster, the options must pickle (no lambdas for ``on_progress``) and a script that
    calls this must guard its top level with ``if __name__ == "__main__":`` (spawned
    workers import it).

    A failing search does not stop the others: once all have finished, :class:`SearchFailed`
    is raised, naming the first failed problem and carrying every result that was found (a
    search its executor cancelled fails with ``concurrent.futures.CancelledError``; so does
    one a :class:`~tidgap.optimize.cluster.ClusterPool` lost with its scheduler where its
    client did not reconnect: one restarted at its address runs it again, at most
    :data:`~tidgap.optimize.cluster.RERUNS` times). On a :class:`LocalPool` (the default),
    searches lost to a worker killed from outside (out of memory, ``kill -9``) run again
    from their start in fresh pools; one killed again in a pool of its own fails with
    :class:`WorkerKilled`.

    An ``interrupted`` of the options is polled beside the pool's own stop (a
    :class:`LocalPool`'s signals, a :class:`~tidgap.optimize.cluster.ClusterPool`'s
    :meth:`~tidgap.optimize.cluster.ClusterPool.stop`): either stops a search.

    ``checkpoint`` and ``resume`` are refused (``TypeError``): one state file given to every
    task would be written by all the searches at once, and resume only one of the problems.
    """
    if "seed" in search_options:
        raise TypeError("search_many takes seeds=, one seed or one per problem, not seed=")
    for option in PER_SEARCH_ONLY:
        if search_options.get(option) is not None:
            raise TypeError(
                f"search_many does not take {option}=: one state file would be shared by "
                "every search; checkpoint or resume each problem with tidgap.search"
            )
    if isinstance(problems, Problem):
        raise TypeError("problems must be a list of tidgap.Problem (one problem: tidgap.search)")
    callable_or_none(("on_result", on_result))
    if executor is not None and not isinstance(executor, Executor):
        raise TypeError(f"executor must be a concurrent.futures.Executor (got {executor!r})")
    problems = [require_problem(p, f"problems[{i}]") for i, p in enumerate(problems)]
    seed_list = _seed_list(seeds, len(problems))
    # before any task starts: every option known and of the right kind, for every problem
    inspect.signature(search).bind(None, **search_options)
    Stopping(**{k: v for k, v in search_options.items() if k in STOPPING_OPTIONS})
    checked = {k: v for k, v in search_options.items() if k in CHECKED_OPTIONS}
    for problem, seed in zip(problems, seed_list, strict=True):
        checked_search(problem, seed=seed, **checked)
    if not problems:
        return []
    if isinstance(executor, ClusterPool):  # its workers poll its stop (the caller's, too)
        search_options = also_stopped_by(search_options, executor.interrupted)
    owned: AbstractContextManager[Executor] = (
        default_pool(len(problems)) if executor is None else nullcontext(executor)
    )
    tasks = [(p, seed, search_options) for p, seed in zip(problems, seed_list, strict=True)]
    with owned as pool:
        outcomes = _outcomes(pool, tasks, on_result)
    errors = {i: error for i, error in enumerate(outcomes) if isinstance(error, BaseException)}
    if errors:
        results = [None if i in errors else outcome for i, outcome in enumerate(outcomes)]
        raise SearchFailed(problems, results, errors) from errors[min(errors)]
    return [outcome for outcome in outcomes if isinstance(outcome, SearchResult)]


#: One search's arguments to :func:`_search`: problem, seed, options.
Task = tuple[Problem, int, dict[str, Any]]
#: A finished search: its result, or what it raised.
Outcome = SearchResult | BaseException


class WorkerKilled(RuntimeError):
    """A search's worker process ended abruptly in a shared pool, then again in a pool of
    its own: killed from outside (the out-of-memory killer, ``kill -9``) or crashed.
    ``__cause__`` is the last ``BrokenProcessPool``."""


def _outcome(future: Future[SearchResult]) -> Outcome:
    """``future``'s result, or what it raised: a cancelled one (its executor stopped it
    before it finished, or a cluster lost its scheduler) a ``CancelledError``."""
    if future.cancelled():
        return CancelledError(
            "cancelled before it finished (stopped, or the executor lost it: a cluster's "
            "scheduler gone?)"
        )
    error = future.exception()
    return future.result() if error is None else error


#: Called with a task's index and result as it ends with one (:func:`search_many`).
OnResult = Callable[[int, SearchResult], None] | None


def _submitted(
    assignments: list[tuple[Executor, int]], tasks: list[Task], on_result: OnResult = None
) -> tuple[dict[int, Future[SearchResult]], set[int]]:
    """Run task ``i`` on its executor for every ``(executor, i)`` and wait for them all
    (``on_result`` told of each result as it comes): the futures by task, and the tasks
    seen running (given to a worker) meanwhile. A Ctrl-C (or any exception, ``on_result``'s
    too) while submitting or waiting cancels the searches not started, stops the running
    ones of every :class:`LocalPool` and is raised."""
    futures: dict[int, Future[SearchResult]] = {}
    seen: set[int] = set()
    told: set[int] = set()
    try:  # a Ctrl-C while submitting (or held back to the end of it) stops them too
        # held in the workers too until their initializer handles them (_start_worker): a
        # Ctrl-C while a worker imports its modules printed that worker's traceback
        with signals_blocked():  # a local pool starts its workers as tasks come
            for pool, i in assignments:
                futures[i] = pool.submit(_search, *tasks[i])
        while True:
            seen.update(i for i, future in futures.items() if future.running())
            waiting = wait(futures.values(), timeout=WAKE).not_done  # see WAKE
            if on_result is not None:
                for i, future in futures.items():
                    outcome = None if i in told else _outcome_if_done(future)
                    if isinstance(outcome, SearchResult):
                        told.add(i)
                        on_result(i, outcome)
            if not waiting:
                break
    except BaseException:  # Ctrl-C: run no search that has not started
        for future in futures.values():
            future.cancel()
        for pool, _ in assignments:  # the running ones stop too, if only we heard it
            if isinstance(pool, STOPPABLE):
                pool.stop(signal.SIGINT)
        raise
    return futures, seen


def _outcome_if_done(future: Future[SearchResult]) -> Outcome | None:
    """:func:`_outcome` of ``future`` once it is done, else ``None``."""
    return _outcome(future) if future.done() else None


def _outcomes(pool: Executor, tasks: list[Task], on_result: OnResult = None) -> list[Outcome]:
    """Every task's outcome on ``pool``, in order (``on_result`` told of each result as it
    comes). A worker of a :class:`LocalPool` killed
    from outside breaks it: every search not finished fails with ``BrokenProcessPool``.
    Those run again in fresh pools (:meth:`LocalPool.fresh`), as many processes at once as
    ``pool`` has: first the ones seen running when it broke (the killed one among them),
    each in a pool of its own, where a second loss is final (:class:`WorkerKilled`); then
    the others together; until none is lost. A pool whose workers began no search (they
    failed to start: a script without its ``__main__`` guard) is not tried again."""
    futures, seen = _submitted([(pool, i) for i in range(len(tasks))], tasks, on_result)
    outcomes = {i: _outcome(future) for i, future in futures.items()}
    lost = [i for i, outcome in outcomes.items() if isinstance(outcome, BrokenProcessPool)]
    while isinstance(pool, LocalPool) and lost and seen and pool.begun.value:
        alone = [i for i in lost if i in seen]
        for start in range(0, len(alone), pool.workers):
            with ExitStack() as pools:
                batch = alone[start : start + pool.workers]
                solo = [(pools.enter_context(pool.fresh(1, pool.threads)), i) for i in batch]
                futures, _ = _submitted(solo, tasks, on_result)
            for i, future in futures.items():
                outcome = _outcome(future)
                if isinstance(outcome, BrokenProcessPool):
                    killed = WorkerKilled(
                        "its worker process ended abruptly twice, the second time in a pool "
                        "of its own (killed from outside: out of memory? kill -9? or crashed)"
                    )
                    killed.__cause__, outcome = outcome, killed
                outcomes[i] = outcome
        together = [i for i in lost if i not in seen]
        seen = set()
        if together:
            with pool.fresh(min(pool.workers, len(together))) as shared:
                futures, seen = _submitted([(shared, i) for i in together], tasks, on_result)
            outcomes.update((i, _outcome(future)) for i, future in futures.items())
        lost = [i for i in together if isinstance(outcomes[i], BrokenProcessPool)]
    return [outcomes[i] for i in range(len(tasks))]
