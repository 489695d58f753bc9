"""The windowed loops compiled in a second process on a first run
(:mod:`tidgap.optimize.background_compile`): started only where it saves time, fills the
disk cache the search then loads, and never outlives a search that stops early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tidgap
from tests.support.processes import ends_within
from tidgap.backends import BACKENDS
from tidgap.module_command import module_command
from tidgap.optimize import background_compile, windowed_driver
from tidgap.optimize.windowed_driver import compiled_loops

TINY = "example:tiny-2"


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def test_the_loops_are_cached_once_compiled() -> None:
    numba = BACKENDS["numba"]
    compiled_loops(tidgap.load_problem(TINY), numba)
    assert numba.cached_loops and background_compile.cached(numba.cached_loops)


def test_a_numba_version_without_the_private_cache_api_starts_nothing() -> None:
    assert background_compile.cached(("tidgap.fallback_cpu.breed_numba:numba_breed",))


@pytest.mark.parametrize(
    ("backend", "cores", "cached", "starts"),
    [
        ("numba", 2, False, True),
        ("numba", 2, True, False),
        ("numba", 1, False, False),
        ("numpy", 2, False, False),
        ("cuda", 2, False, False),
    ],
)
def test_the_helper_starts_only_where_it_saves_time(
    monkeypatch: pytest.MonkeyPatch, backend: str, cores: int, cached: bool, starts: bool
) -> None:
    started: list[list[str]] = []
    monkeypatch.setattr(background_compile, "cached", lambda loops: cached)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(subprocess, "Popen", lambda command, **_: started.append(command))
    background_compile.start(BACKENDS[backend])
    expected = [module_command("tidgap.optimize.background_compile", backend)]
    assert started == (expected if starts else [])


def test_stop_ends_a_running_helper_and_finish_waits() -> None:
    helper = _sleeper()
    background_compile.stop(helper)
    assert helper.poll() is not None
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    background_compile.finish(quick)
    assert quick.returncode == 0
    background_compile.stop(None)  # no helper: nothing to do
    background_compile.finish(None)


def test_a_search_that_fails_before_the_compile_ends_its_helper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    helpers: list[subprocess.Popen[bytes]] = []

    def start(record: object) -> subprocess.Popen[bytes]:
        helpers.append(_sleeper())
        return helpers[-1]

    def failing_flush_search(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the flush search failed")

    monkeypatch.setattr(background_compile, "start", start)
    monkeypatch.setattr(windowed_driver, "flush_search", failing_flush_search)
    with pytest.raises(RuntimeError, match="flush search failed"):
        tidgap.search(tidgap.load_problem(TINY), generations=1, population=8, backend="numba")
    assert len(helpers) == 1 and helpers[0].poll() is not None


def test_the_helper_fills_an_empty_cache_that_the_search_then_reads(tmp_path: Path) -> None:
    """In processes with their own, empty Numba cache (about 30 s: the helper compiles)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    script = (
        "from tidgap.backends import BACKENDS\n"
        "from tidgap.optimize.background_compile import cached\n"
        "print(cached(BACKENDS['numba'].cached_loops))"
    )
    ask = [sys.executable, "-c", script]

    def cached() -> str:
        return subprocess.run(ask, env=env, capture_output=True, text=True, check=True).stdout

    assert cached() == "False\n"
    helper = module_command("tidgap.optimize.background_compile", "numba")
    subprocess.run(helper, env=env, check=True, timeout=600)
    assert cached() == "True\n"


def test_the_helper_ends_once_the_search_that_started_it_is_gone(tmp_path: Path) -> None:
    """A search stopped at once (a second signal) left its helper compiling; it now ends
    within its watchdog's period (an empty Numba cache, so it would compile for seconds)."""

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    script = (
        "import os\n"
        "from tidgap.backends import BACKENDS\n"
        "from tidgap.optimize.background_compile import start\n"
        "print(start(BACKENDS['numba']).pid, flush=True)\n"
        "os._exit(0)\n"  # at once, as a second signal ends the search
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    helper = int(done.stdout.split()[0])
    # compiling the loops from nothing takes 12 s here
    assert ends_within(helper, 8), f"the helper {helper} outlived its search"
