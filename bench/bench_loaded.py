"""The Numba backend on a loaded machine: 0, 1 or 2 other processes keep a core busy.

Busy processes are ``python -c`` loops started by the ``busy`` fixture, always stopped after
the test, and each stops itself after :data:`BUSY_LIMIT_S` seconds anyway.

- ``test_evaluate_loaded``: ``bench_evaluate``'s Numba case (``S = 8``, ``B = 256``, ``P =
  4096``) in this process, its loops in tidgap's threads (``tidgap.fallback_cpu.threads``);
  the summary table lists it as ``numba+Nbusy``.
- ``test_search_loaded``: wall time of ``tidgap search example:vgg16 --seed 0 --generations
  200 --cpu --quiet`` in a fresh process (startup included).

Run: ``pytest bench/bench_loaded.py --benchmark-only`` (about a minute on 2 cores).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from bench_evaluate import POPULATION, evaluate_population, random_chromosomes, synthetic_problem

from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.ticks import tick_problem
from tidgap.fallback_cpu.threads import thread_count
from tidgap.optimize.genome import Population

#: Seconds after which a busy process stops itself, should the fixture never stop it.
BUSY_LIMIT_S = 600

#: Seconds one search may take before the test fails.
SEARCH_LIMIT_S = 120

#: The timed command, run with this interpreter.
SEARCH = [sys.executable, "-m", "tidgap", "search", "example:vgg16", "--seed", "0"]
SEARCH += ["--generations", "200", "--cpu", "--quiet"]


@pytest.fixture(params=[0, 1, 2], ids=lambda count: f"{count}busy")
def busy(request: pytest.FixtureRequest) -> Iterator[int]:
    """Start ``request.param`` processes that each keep one core busy; stop them after."""
    loop = f"import time\nend = time.monotonic() + {BUSY_LIMIT_S}\n"
    loop += "while time.monotonic() < end: pass"
    processes = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(request.param)]
    try:
        time.sleep(0.2)  # let them reach their loop
        yield request.param
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()


@pytest.fixture(scope="module")
def workload() -> tuple[Any, Population]:
    """``bench_evaluate``'s Numba evaluator and population, compiled (or loaded) once."""
    rng = np.random.default_rng(20240601)
    population = Population(
        random_chromosomes(rng, POPULATION), random_chromosomes(rng, POPULATION)
    )
    evaluator = create_evaluator(tick_problem(synthetic_problem()), "flush", "numba")
    evaluate_population(evaluator, population)
    return evaluator, population


def test_evaluate_loaded(benchmark: Any, throughput: Any, workload: Any, busy: int) -> None:
    evaluator, population = workload
    benchmark.group = "evaluate S=8 B=256 P=4096, loaded"
    benchmark.extra_info.update(busy=busy, threads=thread_count())
    forward, backward = benchmark(evaluate_population, evaluator, population)
    assert forward.shape == backward.shape == (population.size,)
    throughput(f"numba+{busy}busy", benchmark, population.size)


@pytest.fixture(scope="module")
def compiled() -> None:
    """One unloaded search first, so that no timed one compiles Numba's cache."""
    subprocess.run(SEARCH, capture_output=True, timeout=600, check=True)


def test_search_loaded(benchmark: Any, compiled: None, busy: int) -> None:
    benchmark.group = "tidgap search vgg16 200 generations, loaded"
    benchmark.extra_info.update(busy=busy)

    def search() -> str:
        return subprocess.run(
            SEARCH, capture_output=True, text=True, timeout=SEARCH_LIMIT_S, check=True
        ).stdout

    output = benchmark.pedantic(search, rounds=3, iterations=1)
    assert "200 generations" in output
