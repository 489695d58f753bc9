"""The prediction of a run prices a recomputing stage's forwards again."""

from __future__ import annotations

import pytest

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.profiling.synth import synth_problem
from tidgap.runtime.lowering import recomputes
from tidgap.runtime.pricing import priced_for_run, recompute_priced
from tidgap.schedules.families import evaluate

#: Stage 0's backward boundary 3 is no forward boundary (it recomputes); stage 1's are.
PLAN = Plan.of([[4, 4], [2, 2, 4]], [[3, 5], [4, 4]])


@pytest.fixture
def problem() -> Problem:
    return Problem.from_dict(synth_problem(0, 2, 8, 1, 0.5, "table", "tiny"))


def test_a_recomputing_stage_pays_its_forward_in_each_backward(problem: Problem) -> None:
    assert recomputes(PLAN) == [True, False]
    priced = priced_for_run(problem, PLAN)
    again, stored = priced.stages
    for size in range(1, 9):
        want = problem.stages[0].forward(size) + problem.stages[0].backward(size)
        assert again.backward(size) == pytest.approx(want, rel=1e-12)
        assert stored.backward(size) == problem.stages[1].backward(size)
    assert again.forward == problem.stages[0].forward
    plain = evaluate(problem, PLAN).iteration_time
    assert evaluate(priced, PLAN).iteration_time > plain


def test_nothing_changes_without_recomputation(problem: Problem) -> None:
    aligned = Plan.of([[4, 4], [2, 2, 4]], [[8], [4, 4]])
    assert priced_for_run(problem, aligned) is problem
    assert recompute_priced(problem, [False, False]) is problem


def test_a_recompute_profile_is_priced_already(problem: Problem) -> None:
    profiled = problem.model_copy(update={"source": {"timing": {"recompute": True}}})
    assert priced_for_run(profiled, PLAN) is profiled
