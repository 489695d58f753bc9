"""Ordered-plan evaluation throughput (issue 11): the windowed evaluators per CPU backend.

Workload: the flush benchmark's problem and chromosomes (``S = 8``, ``B = 256``, unit 1,
``K = 32``, ``P = 4096``, 12..20 microbatches per stage and direction), each individual
with an explicit order: per stage the order of a random window (1..B samples), repaired
to validity (``tidgap.schedules.ir.repair``), built outside the timed part. One
evaluation is ``score`` of one individual. The pure-Python reference simulator runs on a
slice of 64 individuals.

Run: ``pytest bench/bench_windowed.py --benchmark-only`` (targets: Numba >= 3e5/s, NumPy
>= 2e4/s, Numba >= 50x the reference).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from bench_evaluate import BATCH, POPULATION, WIDTH, random_chromosomes, synthetic_problem

from tidgap import Plan, Problem
from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.ticks import TickedProblem, tick_problem
from tidgap.optimize.genome import Population, decode_plan, encode_order
from tidgap.schedules.families import SCHEDULES
from tidgap.schedules.ir import repair, window_order

ORACLE_SLICE = 64
GROUP = "windowed S=8 B=256 P=4096"


def ordered_population(rng: np.random.Generator, problem: Problem) -> Population:
    """Random chromosomes and, per individual, repaired random-window orders."""
    forward, backward = random_chromosomes(rng, POPULATION), random_chromosomes(rng, POPULATION)
    orders = np.empty((POPULATION, forward.shape[1], 2 * WIDTH), dtype=np.int8)
    for p in range(POPULATION):
        plan = decode_plan(forward[p], backward[p], problem)
        windows = rng.integers(1, BATCH + 1, size=problem.num_stages).tolist()
        order = repair(
            window_order(plan.forward, plan.backward, windows), plan.forward, plan.backward
        )
        orders[p] = encode_order(
            Plan.of(plan.forward, plan.backward, order=list(order.stages)), WIDTH
        )
    return Population(forward, backward, orders)


@pytest.fixture(scope="module")
def workload() -> tuple[Problem, TickedProblem, Population]:
    rng = np.random.default_rng(20261201)
    problem = synthetic_problem()
    return problem, tick_problem(problem), ordered_population(rng, problem)


@pytest.fixture(scope="module")
def reference(workload: tuple[Problem, TickedProblem, Population]) -> np.ndarray:
    """NumPy's scores, to check every backend's output outside the timed part."""
    _, ticked, population = workload
    return create_evaluator(ticked, "windowed", "numpy").score(population)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_windowed_backend(
    benchmark: Any, throughput: Any, workload: Any, reference: np.ndarray, backend: str
) -> None:
    _, ticked, population = workload
    evaluator = create_evaluator(ticked, "windowed", backend)
    evaluator.score(population)  # warm-up: Numba compiles (or loads its cache)
    benchmark.group = GROUP
    if backend == "numba":
        import numba

        benchmark.extra_info["threads"] = numba.get_num_threads()
    scores = benchmark(evaluator.score, population)
    assert np.array_equal(scores, reference)
    throughput(f"windowed-{backend}", benchmark, population.size)


def test_windowed_oracle(benchmark: Any, throughput: Any, workload: Any, reference: Any) -> None:
    problem, ticked, population = workload
    plans = [
        decode_plan(population.forward[p], population.backward[p], problem, population.order[p])
        for p in range(ORACLE_SLICE)
    ]
    evaluate = SCHEDULES["windowed"].evaluate
    benchmark.group = GROUP

    def run() -> list[float]:
        return [evaluate(problem, plan).iteration_time for plan in plans]

    times = benchmark(run)
    assert np.allclose(times, ticked.to_time(reference[:ORACLE_SLICE]), rtol=1e-6)
    throughput("windowed-oracle", benchmark, ORACLE_SLICE)
