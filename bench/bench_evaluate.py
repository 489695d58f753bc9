"""Fitness evaluation throughput: the project's target workload, per backend.

Workload: ``S = 8`` stages, ``B = 256`` samples in units of 1, a population of ``P = 4096``
dual chromosomes with 12..20 microbatches per stage and direction (about 16), width
``K = 32``; one evaluation is ``forward_end`` plus ``backward_span`` of one individual. The
time functions are affine and deterministic (``tidgap.analysis.workload``, which
``tidgap bench`` shares). The pure-Python
oracle runs on a slice of 64 individuals, decoded to plans outside the timed part.

Run: ``pytest bench --benchmark-only`` (the summary prints evaluations/s and the ratio to
the oracle; ``benchmark.extra_info`` holds them in ``--benchmark-json`` output).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tidgap import Problem, evaluate
from tidgap.analysis.workload import (  # noqa: F401 (the other benchmarks import them here)
    BASE,
    BATCH,
    STAGES,
    WIDTH,
    default_population,
    random_chromosomes,
    synthetic_problem,
)
from tidgap.backends.evaluator import SeparableEvaluator, create_evaluator
from tidgap.backends.ticks import TickedProblem, tick_problem
from tidgap.optimize.genome import Population, decode_plan

POPULATION, ORACLE_SLICE = BASE, 64


@pytest.fixture(scope="module")
def workload() -> tuple[Problem, TickedProblem, Population]:
    problem = synthetic_problem()
    return problem, tick_problem(problem), default_population("flush", POPULATION)


def evaluate_population(evaluator: SeparableEvaluator, population: Population) -> tuple[Any, Any]:
    return evaluator.forward_end(population.forward), evaluator.backward_span(population.backward)


@pytest.fixture(scope="module")
def reference(workload: tuple[Problem, TickedProblem, Population]) -> tuple[Any, Any]:
    """NumPy's results, to check every backend's output outside the timed part."""
    _, ticked, population = workload
    return evaluate_population(create_evaluator(ticked, "flush", "numpy"), population)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_backend(
    benchmark: Any, throughput: Any, workload: Any, reference: Any, backend: str
) -> None:
    _, ticked, population = workload
    evaluator = create_evaluator(ticked, "flush", backend)
    evaluate_population(evaluator, population)  # warm-up: Numba compiles (or loads its cache)
    benchmark.group = "evaluate S=8 B=256 P=4096"
    if backend == "numba":
        from tidgap.fallback_cpu.threads import thread_count

        benchmark.extra_info["threads"] = thread_count()
    forward, backward = benchmark(evaluate_population, evaluator, population)
    assert np.array_equal(forward, reference[0]) and np.array_equal(backward, reference[1])
    throughput(backend, benchmark, population.size)


def test_oracle(benchmark: Any, throughput: Any, workload: Any, reference: Any) -> None:
    problem, ticked, population = workload
    plans = [
        decode_plan(population.forward[p], population.backward[p], problem)
        for p in range(ORACLE_SLICE)
    ]
    benchmark.group = "evaluate S=8 B=256 P=4096"

    def run() -> list[float]:
        return [evaluate(problem, plan).iteration_time for plan in plans]

    times = benchmark(run)
    expected = ticked.to_time(reference[0][:ORACLE_SLICE] + reference[1][:ORACLE_SLICE])
    assert np.allclose(times, expected, rtol=1e-9)
    throughput("oracle", benchmark, ORACLE_SLICE)
