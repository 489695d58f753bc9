"""The reference event simulator (plain Python) on ordered plans: how long one evaluation of
an order takes, against the flush recurrences on the same partitions.

Workloads: the built-in examples' best 1F1B written as an ordered plan (``vgg16``, 5 stages,
3 microbatches; ``hetero-8``, 8 stages, 9), and ``tidgap synth --seed 0`` with 16 stages and
256 units in 64 equal microbatches. The simulator is the reference, not a search backend
(fast ordered evaluators come with the windowed search); the target is to stay within a few
times the flush recurrences, so ``evaluate``, ``compare`` and the tests stay quick.

Run: ``pytest bench/bench_simulate.py --benchmark-only``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem, load_problem
from tidgap.profiling.synth import synth_problem
from tidgap.schedules.baselines import best_baselines, gpipe_plan, one_f_one_b_plan
from tidgap.schedules.families import evaluate


def _examples() -> list[tuple[str, Problem, int]]:
    cases = []
    for name in ("vgg16", "hetero-8"):
        problem = load_problem(f"example:{name}")
        cases.append((name, problem, best_baselines(problem)["1f1b"].microbatches))
    synthetic = Problem.from_dict(synth_problem(0, 16, 256))
    cases.append(("synth S=16 U=256", synthetic, 64))
    return cases


CASES = _examples()


@pytest.mark.parametrize(("name", "problem", "m"), CASES, ids=[case[0] for case in CASES])
@pytest.mark.parametrize("kind", ["1F1B order (simulator)", "flush (recurrences)"])
def test_one_evaluation(benchmark: Any, name: str, problem: Problem, m: int, kind: str) -> None:
    plan: Plan = one_f_one_b_plan(problem, m) if kind.startswith("1F1B") else gpipe_plan(problem, m)
    benchmark.group = f"evaluate {name}, m={m}"
    evaluation = benchmark(evaluate, problem, plan)
    assert evaluation.iteration_time > 0
