"""A windowed search's compiled loops built in a second process on a machine's first run.

A first search compiles Numba's loops into the disk cache (about 12 s on the 2-core
development machine, 30-65 s while the loops were ``parallel=True``; later runs load them in
well under a second). A process compiles one
function at a time on one core, so while a windowed search compiles and runs the flush
search it starts with, a second process (``python -m tidgap.optimize.background_compile
BACKEND``) compiles the windowed loops (ordered-plan evaluation, breeding, the annealing's
mutation, the repair: the backend record's ``cached_loops``) on a tiny problem, with the
types every problem gives them; the search waits for it and loads them from the cache.
Numba writes a cache entry to a temporary file and renames it, so the two processes never
see half an entry; if the helper fails, the search compiles the loops itself, as without
it.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

from tidgap.backends import BACKENDS, Backend, load
from tidgap.module_command import module_command

#: The problem the helper compiles on (types do not depend on the problem).
EXAMPLE = "example:tiny-2"


def cached(loops: tuple[str, ...]) -> bool:
    """Whether every loop (``"module:function"``, a Numba dispatcher) has an up-to-date
    entry in Numba's disk cache.

    Reads Numba's cache index through its private attributes; where that fails (another
    Numba version), says ``True`` so that nothing is started."""
    try:
        return all(load(loop)._cache._cache_file._load_index() for loop in loops)
    except Exception:  # noqa: BLE001 (a private API: any failure means "do not start")
        return True


def start(record: Backend) -> subprocess.Popen[bytes] | None:
    """The helper process compiling ``record``'s :attr:`~Backend.cached_loops`, where it
    saves time: the backend has such loops, the machine two cores or more, and the loops
    are not in the cache; else ``None``."""
    from tidgap.runtime.worker import watched_environment

    loops = record.cached_loops
    if not loops or (os.cpu_count() or 1) < 2 or cached(loops):
        return None
    return subprocess.Popen(
        module_command(__name__, record.name),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=watched_environment(),  # its watchdog's search
    )


def finish(helper: subprocess.Popen[bytes] | None) -> None:
    """Wait for ``helper`` to end (its loops are then in the cache, unless it failed)."""
    if helper is not None:
        helper.wait()


def stop(helper: subprocess.Popen[bytes] | None) -> None:
    """End ``helper`` if it still runs (the search stopped early; what it has cached stays)."""
    if helper is not None and helper.poll() is None:
        helper.kill()
        helper.wait()


def main(backend: str) -> None:
    """Compile the windowed loops of ``backend`` on :data:`EXAMPLE` (the helper's work),
    ending at once if the search that started it is gone (stopped at once by a second
    signal, it left the helper compiling)."""
    from tidgap.model.problem import load_problem
    from tidgap.optimize.windowed_driver import compiled_loops
    from tidgap.runtime.worker import start_watchdog

    start_watchdog(math.inf, "tidgap's compile helper")
    compiled_loops(load_problem(EXAMPLE), BACKENDS[backend])


if __name__ == "__main__":
    main(sys.argv[1])
