"""Start one worker process per stage on this machine and wait for them all.

Each worker (:mod:`tidgap.runtime.worker`) runs in its own session (process group) with
``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` (loopback) and a free ``MASTER_PORT`` in its
environment, its output going to ``rank<R>.log`` in the log folder. When a worker fails or
the timeout passes, every worker's process group is killed and :class:`WorkerError` names
the rank and the last line it printed; no worker is left behind on any exit from
:func:`launch`, an interrupt included.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from tidgap.held_signals import handling
from tidgap.module_command import module_command
from tidgap.optimize.interrupts import exit_status, stopped_line
from tidgap.runtime.worker import watched_environment

#: Seconds between looks at the workers.
POLL_PERIOD = 0.05
#: Seconds the others may take to exit once a worker failed, before the first to fail is
#: chosen: a peer's connection error can end a rank before the one that caused it exits.
FAILURE_GRACE = 2.0
#: The longest last line a :class:`WorkerError` quotes, in characters.
QUOTED = 300


class WorkerError(RuntimeError):
    """A worker failed, or the workers did not finish in time."""


def free_port() -> int:
    """A TCP port on the loopback interface that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def last_line(log: Path) -> str:
    """The last non-blank line of ``log`` (at most :data:`QUOTED` characters), or a note
    that it printed nothing."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    text = next((line.strip() for line in reversed(lines) if line.strip()), "")
    if not text:
        return "(printed nothing)"
    return text if len(text) <= QUOTED else text[: QUOTED - 3] + "..."


def worker_environment(rank: int, world_size: int, port: int, threads: int) -> dict[str, str]:
    """This process's environment plus what rank ``rank``'s worker needs."""
    environment = watched_environment()
    environment.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
    )
    return environment


def _kill(process: subprocess.Popen) -> None:
    """Kill ``process``'s whole process group (it leads one) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _modified(path: Path) -> float:
    """When ``path`` was last written (``inf`` if it cannot be read)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return float("inf")


def _settled(processes: list[subprocess.Popen], statuses: list[int | None]) -> list[int | None]:
    """The processes' statuses once every one has exited, or :data:`FAILURE_GRACE` seconds
    from now (``statuses``: what they were)."""
    end = time.monotonic() + FAILURE_GRACE
    while any(status is None for status in statuses) and time.monotonic() < end:
        time.sleep(POLL_PERIOD)
        statuses = [process.poll() for process in processes]
    return statuses


def ended(status: int) -> str:
    """How a worker that ended with ``status`` (``Popen.returncode``: ``-N`` where signal
    ``N`` killed it) ended: ``exited with status 1``, ``was killed by SIGKILL``."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    return f"was killed by {name}"


def _wait(processes: list[subprocess.Popen], logs: list[Path], timeout: float) -> None:
    """Return when every worker exited 0; raise :class:`WorkerError` when one failed
    (naming, of those that failed by :func:`_settled`, the one whose log was written first:
    the others may have failed because of it) or when ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = [process.poll() for process in processes]
        failed = [rank for rank, status in enumerate(statuses) if status not in (None, 0)]
        if failed:
            statuses = _settled(processes, statuses)
            failed = [rank for rank, status in enumerate(statuses) if status not in (None, 0)]
            rank = min(failed, key=lambda r: _modified(logs[r]))  # the first to fail
            others = [r for r in failed if r != rank]
            also = f" (then rank {', '.join(map(str, others))} too)" if others else ""
            raise WorkerError(f"rank {rank} {ended(statuses[rank])}{also}: {last_line(logs[rank])}")
        if all(status == 0 for status in statuses):
            return
        if time.monotonic() > deadline:
            running = [rank for rank, status in enumerate(statuses) if status is None]
            lasts = "; ".join(f"rank {rank}: {last_line(logs[rank])}" for rank in running)
            raise WorkerError(
                f"workers did not finish within {timeout:g} s (--timeout); still running, "
                f"with the last line each printed: {lasts}"
            )
        time.sleep(POLL_PERIOD)


@contextmanager
def terminated_as_exit() -> Iterator[None]:
    """SIGTERM, and SIGHUP (a closed terminal) unless ignored (``nohup``), in the block, as
    ``SystemExit`` (status 143, 129) after a line on stderr, so the ``finally`` clauses
    kill the workers and remove the run's folder (their default ended the launcher at
    once: its workers' watchdogs ended them, its folder stayed). Outside the main thread
    nothing is installed."""

    def handle(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # a hung-up terminal takes no line
            sys.stderr.write(stopped_line(signum))
        raise SystemExit(exit_status(signum))

    hangup = [signal.SIGHUP] if signal.getsignal(signal.SIGHUP) == signal.SIG_DFL else []
    with handling([signal.SIGTERM, *hangup], handle):
        yield


def launch(
    job: str | os.PathLike[str],
    world_size: int,
    threads: int,
    timeout: float,
    logs: str | os.PathLike[str],
    module: str = "tidgap.runtime.worker",
) -> None:
    """Run ``python -m MODULE job`` (the stage worker by default) as ranks
    ``0..world_size-1`` (``threads`` OpenMP threads each, each in its own session) with
    their output in ``logs/rank<R>.log``; wait at most ``timeout`` seconds. Raises
    :class:`WorkerError`; kills every worker before it returns or raises."""
    port = free_port()
    folder = Path(logs)
    paths = [folder / f"rank{rank}.log" for rank in range(world_size)]
    processes: list[subprocess.Popen] = []
    with terminated_as_exit():
        try:
            for rank, path in enumerate(paths):
                with open(path, "wb") as log:
                    processes.append(
                        subprocess.Popen(
                            module_command(module, os.fspath(job)),
                            env=worker_environment(rank, world_size, port, threads),
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
                    )
            _wait(processes, paths, timeout)
        finally:
            for process in processes:
                _kill(process)
