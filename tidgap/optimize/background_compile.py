"""The windowed search's Numba loops compiled in a second process on a machine's first run.

A first search compiles Numba's loops into the disk cache (about 35-50 s on the 2-core
development machine; later runs load them in well under a second). A process compiles one
function at a time on one core, so while a windowed search compiles and runs the flush
search it starts with, a second process (``python -m tidgap.optimize.background_compile``)
compiles the windowed loops (ordered-plan evaluation, breeding, the annealing's mutation,
the repair) on a tiny problem, with the types every problem gives them; the search waits
for it and loads them from the cache. Numba writes a cache entry to a temporary file and
renames it, so the two processes never see half an entry; if the helper fails, the search
compiles the loops itself, as without it.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

#: The windowed search's compiled loops on the ``numba`` backend, ``(module, function)``.
LOOPS = (
    ("tidgap.fallback_cpu.windowed_numba", "_ordered_kernel"),
    ("tidgap.fallback_cpu.breed_numba", "_joint_breed"),
    ("tidgap.fallback_cpu.breed_numba", "_joint_mutate"),
    ("tidgap.fallback_cpu.repair_numba", "_canonical"),
)
#: The problem the helper compiles on (types do not depend on the problem).
EXAMPLE = "example:tiny-2"


def cached() -> bool:
    """Whether every loop of :data:`LOOPS` has an up-to-date entry in Numba's disk cache.

    Reads Numba's cache index through its private attributes; where that fails (another
    Numba version), says ``True`` so that nothing is started."""
    try:
        for module, name in LOOPS:
            dispatcher = getattr(importlib.import_module(module), name)
            if not dispatcher._cache._cache_file._load_index():
                return False
    except Exception:  # noqa: BLE001 (a private API: any failure means "do not start")
        return True
    return True


def start(backend: str) -> subprocess.Popen[bytes] | None:
    """The helper process compiling :data:`LOOPS`, where it saves time: on the ``numba``
    backend, with two cores or more, when the loops are not in the cache; else ``None``."""
    if backend != "numba" or (os.cpu_count() or 1) < 2 or cached():
        return None
    return subprocess.Popen(
        [sys.executable, "-m", __name__],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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


def main() -> None:
    """Compile :data:`LOOPS` on :data:`EXAMPLE` (the helper's work)."""
    from tidgap.backends import BACKENDS
    from tidgap.model.problem import load_problem
    from tidgap.optimize.windowed_driver import compiled_loops

    compiled_loops(load_problem(EXAMPLE), BACKENDS["numba"])


if __name__ == "__main__":
    main()
