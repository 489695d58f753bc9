"""Searches on a Dask cluster (:mod:`tidgap.optimize.cluster`): the launcher's stop skips
the tasks no worker started and stops the running ones at their next look; a cluster
without workers is stopped too; a scheduler lost fails the searches it held, not the
caller; a port that accepts and never answers is a timeout, not a hang; a scheduler
restarted on its port gets again the tasks its predecessor lost."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Executor, Future, wait
from typing import Any

import pytest

from tidgap.model.problem import load_problem
from tidgap.optimize.cluster import ClusterPool, Skipped, _Call, connected_client
from tidgap.optimize.many import SearchFailed, search_many

distributed = pytest.importorskip("distributed")


def _until_stopped(interrupted: Callable[[], str | None], limit: float) -> tuple[float, Any]:
    """A task that polls ``interrupted`` as a search does, for at most ``limit`` seconds;
    the seconds it ran and what ``interrupted`` said last."""
    started = time.monotonic()
    while not interrupted() and time.monotonic() - started < limit:
        time.sleep(0.02)
    return time.monotonic() - started, interrupted()


def _cluster(workers: int) -> distributed.LocalCluster:
    return distributed.LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=False, dashboard_address=None
    )


def test_a_stop_ends_the_running_search_and_skips_the_queued_one() -> None:
    with _cluster(1) as cluster, distributed.Client(cluster) as client:
        pool = ClusterPool(client)
        running = pool.submit(_until_stopped, pool.interrupted, 60.0)
        queued = pool.submit(_until_stopped, pool.interrupted, 60.0)
        deadline = time.monotonic() + 30
        while not any(client.processing().values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        pool.stop(signal.SIGTERM)
        seconds, stopped_by = running.result(timeout=30)
        assert seconds < 20 and stopped_by == "SIGTERM"  # at its next look, not at 60 s
        with pytest.raises((CancelledError, Skipped)):
            queued.result(timeout=30)
        assert pool.submit(_until_stopped, pool.interrupted, 60.0).cancelled()
        deadline = time.monotonic() + 10
        while pool._calls and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pool._calls  # settled tasks let go of: their results freed on the cluster


def test_a_stop_amid_a_submit_does_not_wait_for_it() -> None:
    """A signal handled in the main thread while it submitted (its lock held) waited for
    that lock for good: the sweep hung, a second signal too."""
    with _cluster(0) as cluster, distributed.Client(cluster) as client:
        pool = ClusterPool(client)

        def stop_amid_submit() -> None:
            with pool._lock:
                pool.stop(signal.SIGTERM)

        handler = threading.Thread(target=stop_amid_submit, daemon=True)
        handler.start()
        handler.join(10)
        assert not handler.is_alive()


class _Task:
    """A finished Dask task as ``ClusterPool`` sees it: its status, and a result that
    raises ``error`` where given (its scheduler gone as it was fetched)."""

    def __init__(self, status: str, error: BaseException | None = None) -> None:
        self.status, self.key, self._error = status, "k", error

    def result(self) -> object:
        if self._error is not None:
            raise self._error
        return "plan"

    def exception(self) -> BaseException | None:
        return self._error


def _call(future: Future, task: _Task | None = None) -> _Call:
    """A pool's record of a submitted task whose caller holds ``future``."""
    return _Call(print, (), {}, future, task)


@pytest.mark.parametrize(
    ("task", "raised"),
    [
        (_Task("finished", OSError("comm closed")), CancelledError),
        (_Task("lost"), CancelledError),
        (_Task("error", ValueError("bad")), ValueError),
    ],
)
def test_every_outcome_settles_the_future(task: _Task, raised: type) -> None:
    """A result lost with the scheduler as it was fetched left the future pending for good
    (a sweep waited for ever; here the client, ``None``, cannot send it again, so it
    fails); a lost task settled it with ``None``, a result dropped."""
    future: Future = Future()
    ClusterPool(client=None)._settle(task, _call(future))
    with pytest.raises(raised):
        future.result(timeout=1)
    ClusterPool(client=None)._settle(_Task("finished"), _call(future))  # settled: no error
    cancelled: Future = Future()
    cancelled.cancel()  # by its caller (a Ctrl-C in search_many)
    ClusterPool(client=None)._settle(_Task("finished"), _call(cancelled))
    assert cancelled.cancelled()


def _never() -> None:
    return None


@pytest.mark.parametrize("own", [None, _never])
def test_search_many_on_a_cluster_stops_on_the_pools_stop(own: Any) -> None:
    """``search_many`` given a :class:`ClusterPool` (and no ``interrupted``, or one of the
    caller's own) polls the pool's stop: a search with a minute to run ends at its next
    generation (it ran the minute: only the sweep passed the pool's stop)."""
    problem = load_problem("example:hetero-8")
    with _cluster(1) as cluster, distributed.Client(cluster) as client:
        pool = ClusterPool(client)

        def stop_once_running() -> None:
            deadline = time.monotonic() + 60
            while not any(client.processing().values()) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)
            pool.stop(signal.SIGINT)

        stopper = threading.Thread(target=stop_once_running, daemon=True)
        stopper.start()
        started = time.monotonic()
        (result,) = search_many([problem], executor=pool, time_limit=60, interrupted=own)
        assert time.monotonic() - started < 45
        assert result.stop_reason == "SIGINT"


def test_a_stop_skips_the_searches_of_a_cluster_without_workers() -> None:
    """They waited for a worker for good: a sweep's first Ctrl-C did nothing."""
    with _cluster(0) as cluster, distributed.Client(cluster) as client:
        pool = ClusterPool(client)
        assert pool.workers() == 0
        waiting = pool.submit(_until_stopped, pool.interrupted, 60.0)
        time.sleep(0.2)
        pool.stop(signal.SIGINT)
        with pytest.raises(CancelledError):
            waiting.result(timeout=20)


def test_a_stop_wakes_a_skipped_search_once(caplog: pytest.LogCaptureFixture) -> None:
    """The stop, then the task's own callback, each woke the waiters of a skipped search:
    the second logged ``Future ... in unexpected state: CANCELLED_AND_NOTIFIED`` (a line
    per search on a sweep's Ctrl-C)."""
    with _cluster(0) as cluster, distributed.Client(cluster) as client:
        pool = ClusterPool(client)
        waiting = [pool.submit(_until_stopped, pool.interrupted, 60.0) for _ in range(2)]
        time.sleep(0.2)
        with caplog.at_level(logging.CRITICAL, logger="concurrent.futures"):
            pool.stop(signal.SIGINT)
            assert not wait(waiting, timeout=20).not_done
            pool.shutdown(wait=True)
    assert all(future.cancelled() for future in waiting)
    assert "unexpected state" not in caplog.text


class _Cancelling(Executor):
    """An executor whose tasks are all cancelled before they finish (as a Dask cluster's
    are when its scheduler is lost)."""

    def submit(self, fn: Callable[..., object], /, *args: object, **kwargs: object) -> Future:
        future: Future = Future()
        future.cancel()
        future.set_running_or_notify_cancel()
        return future


def test_searches_cancelled_by_their_executor_fail_as_search_failed() -> None:
    """A lost Dask scheduler cancels every task: ``search_many`` raised a bare
    ``CancelledError`` (a sweep: a traceback, the plans found lost)."""
    problem = load_problem("example:tiny-2")
    with pytest.raises(SearchFailed) as caught:
        search_many([problem, problem], executor=_Cancelling(), generations=1)
    assert caught.value.results == [None, None]
    assert all(isinstance(e, CancelledError) for e in caught.value.errors.values())
    assert "cancelled before it finished" in str(caught.value)


def test_a_lost_scheduler_cancels_the_tasks_it_held() -> None:
    cluster = _cluster(0)
    client = distributed.Client(cluster)
    try:
        pool = ClusterPool(client)
        waiting = pool.submit(_until_stopped, pool.interrupted, 60.0)
        cluster.close()  # the scheduler with it
        with pytest.raises((CancelledError, OSError)):
            waiting.result(timeout=60)
    finally:
        client.close()


def test_a_port_that_never_answers_times_out() -> None:
    """``distributed.Client(timeout=10)`` waited for good on a port that accepts a
    connection and never answers (an HTTP server's, say): 11 minutes seen."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"tcp://127.0.0.1:{listening.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="no Dask scheduler answered within 1 s"):
            connected_client(address, timeout=1.0)
        assert time.monotonic() - started < 10


def test_a_stop_with_the_scheduler_gone_settles_every_search_itself() -> None:
    """The stop's ``Event.set`` failing (the scheduler lost, the client broken by it) left
    the searches not started pending for good: only a second signal ended the sweep."""
    pool = ClusterPool(client=object())  # any call to it fails, as a broken client's
    waiting: list[Future] = [Future(), Future()]
    pool._calls = {future: _call(future, _Task("pending")) for future in waiting}
    pool._stopped = "SIGINT"
    pool._stop_tasks()
    assert all(future.cancelled() for future in waiting)


def _dask_process(*arguments: str) -> subprocess.Popen:
    """``dask scheduler`` / ``dask worker`` (``arguments``) as a process of its own, quiet,
    on this test's core(s)."""
    return subprocess.Popen(
        [sys.executable, "-m", *arguments, "--dashboard-address", ":0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _scheduler_on(port: int) -> subprocess.Popen:
    """A ``dask scheduler`` on ``port`` that answers (within 60 s)."""
    scheduler = _dask_process("distributed.cli.dask_scheduler", "--port", str(port))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return scheduler
        time.sleep(0.05)
    scheduler.kill()
    raise AssertionError(f"no Dask scheduler on port {port} within 60 s")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_scheduler_restarted_on_its_port_amid_submits_reruns_what_it_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scheduler killed while the pool submitted, then restarted on its port: Dask's
    reconnect cancels every task its client holds, and a task submitted from another
    thread meanwhile broke that reconnect for good (``dictionary changed size during
    iteration``): the client never reconnected and the tasks it held stayed pending for
    ever (a sweep waited until Ctrl-C). Here Dask's cancelling is slowed so that the
    submits always meet it. Now the pool submits in the client's own thread and sends
    the tasks the scheduler lost again: each one's result comes from the scheduler
    restarted, once a worker joins it."""
    cancel = distributed.client.FutureState.cancel

    def slow_cancel(state: Any, *args: Any, **kwargs: Any) -> None:
        time.sleep(0.002)  # 300 tasks: the reconnect's cancelling lasts 0.6 s
        cancel(state, *args, **kwargs)

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    processes = [_scheduler_on(port)]
    client = connected_client(address)
    futures: list[Future] = []
    try:
        pool = ClusterPool(client)
        futures += [pool.submit(abs, -i) for i in range(300)]  # no worker yet: all pending
        monkeypatch.setattr(distributed.client.FutureState, "cancel", slow_cancel)
        processes[0].kill()  # kill -9: the client finds its connection closed
        killed = time.monotonic()
        while time.monotonic() - killed < 1.5:  # submitting while Dask cancels the others
            futures.append(pool.submit(abs, -len(futures)))
        processes[0].wait()
        processes[0] = _scheduler_on(port)  # on its port again, within the client's timeout
        processes.append(_dask_process("distributed.cli.dask_worker", address, "--nthreads", "2"))
        pending = wait(futures, timeout=45).not_done
        assert not pending, f"{len(pending)} of {len(futures)} searches wait for ever"
        assert [future.result() for future in futures] == list(range(len(futures)))
    finally:
        for process in processes:
            process.kill()
            process.wait()
        closing = threading.Thread(target=client.close, kwargs={"timeout": 5}, daemon=True)
        closing.start()  # a client that never reconnected may not close: let it be
        closing.join(10)


def test_a_search_sent_while_the_client_closes_fails_and_does_not_wait_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scheduler lost for good: the client, reconnecting in vain, closes, cancelling the
    tasks it holds; one given to it after that cancelling, before it is closed, stayed
    pending for ever (1 of ~450 submits in one run of two). Here the client's closing is
    slowed after its cancelling so that the submits always meet it: each one fails."""
    close = distributed.core.ConnectionPool.close

    async def slow_close(pool: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(1.0)  # after the client cancelled its tasks, before "closed"
        return await close(pool, *args, **kwargs)

    monkeypatch.setattr(distributed.core.ConnectionPool, "close", slow_close)
    port = _free_port()
    scheduler = _scheduler_on(port)
    client = distributed.Client(f"tcp://127.0.0.1:{port}", timeout=2)
    futures: list[Future] = []
    try:
        pool = ClusterPool(client)
        futures.append(pool.submit(abs, -1))
        scheduler.kill()
        scheduler.wait()
        killed = time.monotonic()
        while time.monotonic() - killed < 5:  # through the reconnect (2 s) and the closing
            futures.append(pool.submit(abs, -1))
            time.sleep(0.01)
        pending = wait(futures, timeout=10).not_done
        assert not pending, f"{len(pending)} of {len(futures)} searches wait for ever"
        for future in futures:
            with pytest.raises(CancelledError):
                future.result()
    finally:
        scheduler.kill()
        scheduler.wait()
        client.close(timeout=5)
