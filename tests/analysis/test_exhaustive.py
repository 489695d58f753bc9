"""The flush optimum by enumeration: every composition, and the fastest flush plan."""

from __future__ import annotations

import pytest

from tidgap import Plan, best_baselines, evaluate
from tidgap.analysis.exhaustive import compositions, flush_optimum
from tidgap.model.problem import Problem
from tidgap.profiling.synth import synth_problem


@pytest.mark.parametrize(("units", "largest"), [(1, 1), (5, 5), (6, 2), (7, 3), (8, 8)])
def test_compositions_are_every_ordered_partition_within_the_cap(units, largest) -> None:
    found = compositions(units, largest)
    assert len({tuple(c) for c in found}) == len(found)
    assert all(sum(c) == units and min(c) >= 1 and max(c) <= largest for c in found)
    if largest >= units:
        assert len(found) == 2 ** (units - 1)
    # parts of 1..largest: the count follows the recurrence c(n) = c(n-1) + ... + c(n-largest)
    counts = [1]
    for n in range(1, units + 1):
        counts.append(sum(counts[max(0, n - largest) : n]))
    assert len(found) == counts[units]


@pytest.mark.parametrize("seed", [3, 4])
def test_the_optimum_is_its_plans_time_and_beats_the_flush_plans_around_it(seed: int) -> None:
    problem = Problem.from_dict(synth_problem(seed, stages=2, batch_size=5, heterogeneity=0.8))
    plan, time = flush_optimum(problem, "numpy")
    assert evaluate(problem, plan).iteration_time == pytest.approx(time, rel=1e-12)
    assert time <= best_baselines(problem)["gpipe"].iteration_time * (1 + 1e-12)
    for forward in compositions(5, 5):  # stage 0's forwards with stage 1's backwards,
        for backward in compositions(5, 5):  # then both stages sharing their partitions
            for other in (
                Plan.of([forward, [5]], [[5], backward]),
                Plan.of([forward] * 2, [backward] * 2),
            ):
                assert time <= evaluate(problem, other).iteration_time * (1 + 1e-12)
    assert flush_optimum(problem, "numba")[1] == time
