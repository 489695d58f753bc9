"""Searches on a Dask cluster that the launcher can stop as it stops a :class:`LocalPool`'s.

:class:`ClusterPool` runs :func:`~tidgap.optimize.many.search_many`'s tasks through a Dask
``distributed.Client``. Its :meth:`ClusterPool.stop` skips the searches no worker has
started (a cluster without workers, or with workers that cannot run tidgap, would hold
them for good) and asks the running ones to stop at their next generation, keeping their
plans so far: each search polls a cluster-wide ``distributed.Event`` per stop signal
through its :class:`ClusterStop` (``interrupted``). A search the cluster loses with its
scheduler runs again from its start on the scheduler the client reconnects to (one
restarted on its address within the client's timeout), at most :data:`RERUNS` times;
where the client gives up, it fails. ``distributed`` is imported only here, when used.
"""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import CancelledError, Executor, Future, InvalidStateError
from concurrent.futures import wait as wait_for
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from tidgap.model.errors import joined_message
from tidgap.optimize.interrupts import STOP_SIGNALS

#: Seconds between a running search's looks at its :class:`ClusterStop` events (each look
#: is a message to the scheduler per signal).
POLL = 0.5
#: Seconds to wait for a Dask scheduler to answer (``distributed.Client``'s own timeout does
#: not bound a handshake with a port that accepts and never answers).
CONNECT_TIMEOUT = 10.0
#: How many times a search lost with its scheduler is sent again (it then runs from its
#: start) before it fails.
RERUNS = 2
#: The Dask client's states in which a task it is given reaches a scheduler: sent at once,
#: or (reconnecting) held until the client has reconnected.
SENDING = ("running", "connecting", "newly-created")


def _event_name(base: str, signal_name: str) -> str:
    """The ``distributed.Event`` a stop by ``signal_name`` (``"SIGINT"``) sets."""
    return f"{base}-{signal_name}"


def _signal_set(base: str) -> str | None:
    """On a worker: the name of the stop signal whose event of ``base`` is set, if any."""
    from distributed import Event

    for name in STOP_SIGNALS.values():
        if Event(_event_name(base, name)).is_set():
            return name
    return None


class ClusterStop:
    """A search's ``interrupted`` on a Dask worker: the name of the signal the launcher
    stopped with (``"SIGINT"``, ``"SIGTERM"``), once it set that signal's event of
    ``name``; ``None`` before (looked up at most every :data:`POLL` seconds)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._signal: str | None = None
        self._next = 0.0

    def __call__(self) -> str | None:
        now = time.monotonic()
        if self._signal is None and now >= self._next:
            self._signal, self._next = _signal_set(self.name), now + POLL
        return self._signal


class Skipped(RuntimeError):
    """A cluster's task that began after :meth:`ClusterPool.stop`: not run."""


def _unless_stopped(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """On a worker: ``fn(*args, **kwargs)``, unless a stop event of ``name`` is set
    (:class:`Skipped`)."""
    if _signal_set(name) is not None:
        raise Skipped("stopped before it started")
    return fn(*args, **kwargs)


def connected_client(scheduler: str, timeout: float | None = None) -> Any:
    """A ``distributed.Client`` of ``scheduler``; ``TimeoutError`` where none answers within
    ``timeout`` seconds (default :data:`CONNECT_TIMEOUT`; the connecting thread, a daemon,
    closes a client it makes after that), and the client's own ``OSError`` /
    ``ValueError`` / ``TypeError`` for a bad address."""
    from distributed import Client

    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    made: dict[str, Any] = {}
    lock = threading.Lock()

    def connect() -> None:
        try:
            client = Client(scheduler, timeout=timeout)
        except BaseException as error:  # raised again in the caller's thread
            made["error"] = error
            return
        with lock:
            late = "gave up" in made
            made["client"] = client
        if late:
            client.close()

    thread = threading.Thread(target=connect, name="tidgap-dask-connect", daemon=True)
    thread.start()
    thread.join(timeout)
    with lock:
        if "client" not in made and "error" not in made:
            made["gave up"] = True
    if "error" in made:
        raise made["error"]
    if "client" not in made:
        raise TimeoutError(f"no Dask scheduler answered within {timeout:g} s")
    return made["client"]


@dataclass(eq=False)
class _Call:
    """A task of :meth:`ClusterPool.submit`: what it runs, the future its caller holds, the
    Dask task now running it and how many times the cluster lost it."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    done: Future[Any]
    task: Any = None
    losses: int = 0


class ClusterPool(Executor):
    """A ``concurrent.futures`` executor on the Dask ``client``'s cluster whose
    :meth:`stop` skips the tasks not started and sets the event of :attr:`interrupted`.
    A future cancelled here cancels its task; a finished task is let go of (its result no
    longer held on the cluster). A task the cluster lost with its scheduler (Dask cancels
    every task of a client that lost its scheduler) is sent again, to the scheduler the
    client reconnects to, at most :data:`RERUNS` times; where the client closed instead
    (no scheduler answered within its timeout), it fails with ``CancelledError``."""

    def __init__(self, client: Any) -> None:
        self.client = client
        #: the searches' ``interrupted`` (:func:`~tidgap.optimize.many.search_many` gives it
        #: to each one's options; give it to those of a task submitted otherwise)
        self.interrupted = ClusterStop(f"tidgap-stop-{uuid.uuid4().hex}")
        self._calls: dict[Future[Any], _Call] = {}  # not settled yet, by the caller's future
        self._lock = threading.Lock()
        self._stopped: str | None = None  # the signal's name, once stopped

    def workers(self) -> int:
        """The workers the scheduler has now."""
        return len(self.client.scheduler_info().get("workers", {}))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """``fn(*args, **kwargs)`` as a task of the cluster (not cached: ``pure=False``),
        :class:`Skipped` where it starts after :meth:`stop` (a worker may hold tasks
        queued, which the scheduler counts as running); a future cancelled at once after
        :meth:`stop`."""
        done: Future[Any] = Future()
        if self._stopped is not None:
            _cancel(done)
            return done
        call = _Call(fn, args, kwargs, done)
        with self._lock:
            self._calls[done] = call
        done.add_done_callback(lambda settled: settled.cancelled() and _cancel_task(call.task))
        self._send(call)
        return done

    def _send(self, call: _Call) -> None:
        """Give ``call`` to the cluster as a new Dask task; ``CancelledError`` where the client
        has closed (its scheduler lost for good). The client is given it in its own event
        loop's thread: a task submitted from another thread while the client began to
        reconnect (after a scheduler lost) broke the reconnect for good (Dask cancels every
        task it holds, and adding one amid that fails it), and every task stayed pending.
        Its status is read in that loop too: a task given to a client closing (no scheduler
        came back) after it cancelled the tasks it held stayed pending for ever."""
        name = self.interrupted.name

        async def submitted() -> Any:  # in the client's event loop
            if self.client.status not in SENDING:  # closing: it would cancel it no more
                raise RuntimeError(f"the Dask client is {self.client.status}")
            return self.client.submit(
                _unless_stopped, name, call.fn, *call.args, pure=False, **call.kwargs
            )

        try:
            task = self.client.sync(submitted)
        except Exception as error:  # a closed client's
            self._fail(call, f"the cluster's scheduler was lost ({joined_message(error)})")
            return
        call.task = task
        task.add_done_callback(lambda finished: self._settle(finished, call))
        if self._stopped is not None:  # stopped while it was sent: it may have missed it
            _cancel(call.done)

    def stop(self, signum: int) -> None:
        """Skip the tasks no worker has started and ask the running searches to stop. It
        may run in a signal handler, amid :meth:`submit`: it takes no lock, and a thread
        talks to the scheduler."""
        self._stopped = STOP_SIGNALS.get(signum, "SIGINT")
        threading.Thread(target=self._stop_tasks, name="tidgap-dask-stop", daemon=True).start()

    def _stop_tasks(self) -> None:
        from distributed import Event

        with self._lock:
            calls = list(self._calls.values())
        try:
            assert self._stopped is not None
            Event(_event_name(self.interrupted.name, self._stopped), client=self.client).set()
            running = {key for keys in self.client.processing().values() for key in keys}
        except Exception:  # the scheduler is gone (or the client broken): settle them here
            running = set()
        for call in calls:  # settled here: the client may never call back
            if call.task is None or call.task.key not in running:
                _cancel(call.done)

    def _settle(self, task: Any, call: _Call) -> None:
        """Give ``call``'s future the finished Dask ``task``'s outcome (in the client's
        callback thread): its result or exception; sent again where the cluster lost it or
        its result with its scheduler (:meth:`_lost`); then let the task go."""
        future = call.done
        if future.done():  # cancelled by its caller or a stop
            self._forget(future)
            return
        try:
            if task.status == "cancelled":
                if self._stopped is not None:
                    _cancel(future)
                    self._forget(future)
                else:  # Dask cancels the tasks of a client that lost its scheduler
                    self._lost(call)
                return
            if task.status == "finished":
                _settled(future, result=task.result())
                self._forget(future)
                return
            error = task.exception() if task.status == "error" else None
        except BaseException as lost:  # its outcome lost with the scheduler
            if isinstance(lost, (OSError, CancelledError)):
                self._lost(call)
                return
            error = lost
        if error is None:
            error = CancelledError(f"the cluster lost it (task {task.status})")
        _settled(future, error=error)
        self._forget(future)

    def _lost(self, call: _Call) -> None:
        """``call``'s task was lost with the cluster's scheduler: sent again (held by the
        client until it has reconnected), unless the pool was stopped, the client closed
        (no scheduler came back within its timeout) or it was lost :data:`RERUNS` times
        already."""
        call.losses += 1
        status = getattr(self.client, "status", None)
        if self._stopped is not None:
            _cancel(call.done)
            self._forget(call.done)
        elif status not in SENDING:
            self._fail(call, "the cluster's scheduler was lost and none came back at its address")
        elif call.losses > RERUNS:
            self._fail(call, f"the cluster lost it with its scheduler {call.losses} times")
        else:
            self._send(call)

    def _fail(self, call: _Call, reason: str) -> None:
        """Settle ``call``'s future with ``CancelledError(reason)``."""
        _settled(call.done, error=CancelledError(reason))
        self._forget(call.done)

    def _forget(self, future: Future[Any]) -> None:
        """Let go of the call of ``future``, settled, and of its task (and so of its result
        on the cluster)."""
        with self._lock:
            call = self._calls.pop(future, None)
        if call is not None:
            call.task = None

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Cancel the tasks not finished where ``cancel_futures``; then, with ``wait``,
        wait for every task to settle. The client stays open (its owner closes it)."""
        with self._lock:
            pending = list(self._calls)
        if cancel_futures:
            self._stopped = self._stopped or "SIGINT"
            for done in pending:
                _cancel(done)
        if wait:
            wait_for(pending)


def _cancel_task(task: Any) -> None:
    """Cancel the Dask ``task``, if its client still can (best effort)."""
    with suppress(Exception):
        task.cancel()


#: The futures :func:`_cancel` has woken the waiters of (under :data:`_WAKING`).
_WOKEN: weakref.WeakSet[Future[Any]] = weakref.WeakSet()
_WAKING = threading.Lock()


def _cancel(future: Future[Any]) -> None:
    """Cancel a pending ``future`` and wake those waiting on it (``wait``, ``as_completed``),
    once: waking them again logged ``Future ... in unexpected state`` (a stop, then the
    task's own callback); nothing where it is settled already."""
    with _WAKING:
        if future.cancel() and future not in _WOKEN:
            _WOKEN.add(future)
            with suppress(RuntimeError):  # woken already
                future.set_running_or_notify_cancel()


def _settled(future: Future[Any], result: Any = None, error: BaseException | None = None) -> None:
    """Set ``future``'s ``error``, else its ``result``; nothing where it is settled already
    (cancelled by its caller: a Ctrl-C in ``search_many``)."""
    with suppress(InvalidStateError):
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
