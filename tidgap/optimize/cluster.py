"""Searches on a Dask cluster that the launcher can stop as it stops a :class:`LocalPool`'s.

:class:`ClusterPool` runs :func:`~tidgap.optimize.many.search_many`'s tasks through a Dask
``distributed.Client``. Its :meth:`ClusterPool.stop` skips the searches no worker has
started (a cluster without workers, or with workers that cannot run tidgap, would hold
them for good) and asks the running ones to stop at their next generation, keeping their
plans so far: each search polls a cluster-wide ``distributed.Event`` through its
:class:`ClusterStop` (``interrupted``). ``distributed`` is imported only here, when used.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

#: Seconds between a running search's looks at its :class:`ClusterStop` event (each one is
#: a message to the scheduler).
POLL = 0.5
#: Seconds to wait for a Dask scheduler to answer (``distributed.Client``'s own timeout does
#: not bound a handshake with a port that accepts and never answers).
CONNECT_TIMEOUT = 10.0


class ClusterStop:
    """A search's ``interrupted`` on a Dask worker: true once the launcher set the
    ``distributed.Event`` named ``name`` (looked up at most every :data:`POLL` seconds)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._set = False
        self._next = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        if not self._set and now >= self._next:
            from distributed import Event

            self._set, self._next = Event(self.name).is_set(), now + POLL
        return self._set


class Skipped(RuntimeError):
    """A cluster's task that began after :meth:`ClusterPool.stop`: not run."""


def _unless_stopped(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """On a worker: ``fn(*args, **kwargs)``, unless the ``distributed.Event`` ``name`` is
    set (:class:`Skipped`)."""
    from distributed import Event

    if Event(name).is_set():
        raise Skipped("stopped before it started")
    return fn(*args, **kwargs)


def connected_client(scheduler: str, timeout: float | None = None) -> Any:
    """A ``distributed.Client`` of ``scheduler``; ``TimeoutError`` where none answers within
    ``timeout`` seconds (default :data:`CONNECT_TIMEOUT`; the connecting thread is left
    behind: it is a daemon), and the client's own ``OSError`` / ``ValueError`` /
    ``TypeError`` for a bad address."""
    from distributed import Client

    timeout = CONNECT_TIMEOUT if timeout is None else timeout

    made: dict[str, Any] = {}

    def connect() -> None:
        try:
            made["client"] = Client(scheduler, timeout=timeout)
        except BaseException as error:  # raised again in the caller's thread
            made["error"] = error

    thread = threading.Thread(target=connect, name="tidgap-dask-connect", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    if "error" in made:
        raise made["error"]
    if "client" not in made:
        raise TimeoutError(f"no Dask scheduler answered within {timeout:g} s")
    return made["client"]


class ClusterPool(Executor):
    """A ``concurrent.futures`` executor on the Dask ``client``'s cluster whose
    :meth:`stop` skips the tasks not started and sets the event of :attr:`interrupted`."""

    def __init__(self, client: Any) -> None:
        self.client = client
        #: the searches' ``interrupted`` (give it to each one's options)
        self.interrupted = ClusterStop(f"tidgap-stop-{uuid.uuid4().hex}")
        self._tasks: list[tuple[Any, Future[Any]]] = []
        self._lock = threading.Lock()
        self._stopped = False

    def workers(self) -> int:
        """The workers the scheduler has now."""
        return len(self.client.scheduler_info().get("workers", {}))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """``fn(*args, **kwargs)`` as a task of the cluster (not cached: ``pure=False``),
        :class:`Skipped` where it starts after :meth:`stop` (a worker may hold tasks
        queued, which the scheduler counts as running); a future cancelled at once after
        :meth:`stop`."""
        done: Future[Any] = Future()
        with self._lock:
            if self._stopped:
                _cancel(done)
                return done
            name = self.interrupted.name
            task = self.client.submit(_unless_stopped, name, fn, *args, pure=False, **kwargs)
            self._tasks.append((task, done))
        task.add_done_callback(lambda finished: _settle(finished, done))
        return done

    def stop(self, signum: int) -> None:
        """Skip the tasks no worker has started and ask the running searches to stop (a
        thread does it: this may run in a signal handler, and it talks to the scheduler)."""
        with self._lock:
            self._stopped = True
        threading.Thread(target=self._stop_tasks, name="tidgap-dask-stop", daemon=True).start()

    def _stop_tasks(self) -> None:
        from distributed import Event

        Event(self.interrupted.name, client=self.client).set()
        running = {key for keys in self.client.processing().values() for key in keys}
        with self._lock:
            tasks = list(self._tasks)
        for task, _ in tasks:
            if task.key not in running:
                task.cancel()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Cancel the tasks not finished where ``cancel_futures``; the client stays open
        (its owner closes it)."""
        if cancel_futures:
            with self._lock:
                self._stopped = True
                tasks = list(self._tasks)
            for task, _ in tasks:
                task.cancel()


def _cancel(future: Future[Any]) -> None:
    """Cancel a pending ``future`` and wake those waiting on it (``wait``, ``as_completed``)."""
    future.cancel()
    future.set_running_or_notify_cancel()


def _settle(task: Any, future: Future[Any]) -> None:
    """Give ``future`` the finished Dask ``task``'s outcome: its result, its exception, or
    cancelled (the task was cancelled, or the scheduler was lost)."""
    if task.status == "finished":
        future.set_result(task.result())
    elif task.status == "cancelled":
        _cancel(future)
    else:
        try:
            error = task.exception()
        except BaseException as lost:  # its outcome lost with the scheduler
            error = lost
        future.set_exception(error)
