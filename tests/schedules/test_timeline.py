"""Timelines: every step's start and end, read off the model's recurrences and the 1F1B
simulation, agree with the iteration times and respect the model's rules."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import golden_cases
from tests.support.strategies import plans, problems
from tidgap import Link, Plan, Problem, Stage, affine, evaluate, gpipe, one_f_one_b
from tidgap.schedules.baselines import feasible_microbatch_counts
from tidgap.schedules.families import baseline_timeline, plan_timeline
from tidgap.schedules.ir import one_f_one_b_order, prefix_sums
from tidgap.schedules.timeline import Step, Timeline

PROPERTY = settings(max_examples=120, deadline=None, derandomize=True, database=None)


def worked_problem() -> Problem:
    """docs/model.md's worked example: ``Tf(b) = b``, ``Tb(b) = 2b``, free links."""
    stage = Stage(forward=affine(0, 1), backward=affine(0, 2))
    link = Link(forward=affine(0, 0), backward=affine(0, 0))
    return Problem(batch_size=2, stages=[stage, stage], links=[link])


def spans(steps: list[Step]) -> list[tuple[str, float, float]]:
    return [(step.kind, step.start, step.end) for step in steps]


def test_worked_example_steps() -> None:
    """model.md: stage 0 forwards 0-1, 1-2; stage 1 forward 2-4; backwards 4-6, 6-8 on
    stage 1; stage 0's one backward waits for the second gradient (8) and ends at 12."""
    timeline = plan_timeline(worked_problem(), Plan.of([[1, 1], [2]], [[2], [1, 1]]))
    assert spans(timeline.stages[0]) == [("F", 0, 1), ("F", 1, 2), ("B", 8, 12)]
    assert spans(timeline.stages[1]) == [("F", 2, 4), ("B", 4, 6), ("B", 6, 8)]
    assert spans(timeline.links[0]) == [("F", 1, 1), ("F", 2, 2), ("B", 6, 6), ("B", 8, 8)]
    assert [step.samples for step in timeline.stages[1]] == [(1, 2), (1, 1), (2, 2)]
    assert timeline.iteration_time == 12
    assert timeline.busy(0) == 6


def test_tail_is_a_step_after_the_last_backward() -> None:
    stage = Stage(forward=affine(0, 1), backward=affine(0, 1), tail=10)
    timeline = plan_timeline(Problem(batch_size=1, stages=[stage]), Plan.of([[1]], [[1]]))
    assert spans(timeline.stages[0]) == [("F", 0, 1), ("B", 1, 2), ("T", 2, 12)]
    assert timeline.stages[0][-1].samples is None
    assert timeline.iteration_time == 12


@pytest.mark.parametrize("case", golden_cases(), ids=lambda case: case["problem"]["name"])
def test_plan_timeline_ends_are_the_oracle_ends(case: dict[str, Any]) -> None:
    """Exactly the oracle's numbers: the same recurrences, not a re-implementation."""
    problem = Problem.from_dict(case["problem"])
    for entry in case["plans"]:
        plan = Plan.of(entry["forward"], entry["backward"])
        timeline = plan_timeline(problem, plan)
        result = evaluate(problem, plan)
        assert timeline.iteration_time == result.iteration_time
        for s, steps in enumerate(timeline.stages):
            forwards = [step for step in steps if step.kind == "F"]
            backwards = [step for step in steps if step.kind == "B"]
            assert forwards[-1].end == result.forward_ends[s]
            assert backwards[-1].end == result.backward_ends[s]
            assert [step.size for step in forwards] == plan.forward[s]
            assert [step.size for step in backwards] == plan.backward[s]


@pytest.mark.parametrize("case", golden_cases(), ids=lambda case: case["problem"]["name"])
def test_baseline_timelines_give_the_golden_times(case: dict[str, Any]) -> None:
    """GPipe(m) and 1F1B(m) timelines end at the golden baseline times, for every ``m``."""
    problem = Problem.from_dict(case["problem"])
    for m, values in case["baselines"].items():
        for schedule in ("gpipe", "1f1b"):
            timeline = baseline_timeline(problem, schedule, int(m))
            assert timeline.iteration_time == pytest.approx(values[schedule], rel=1e-9)


def test_pipedream_has_no_timeline() -> None:
    with pytest.raises(ValueError, match="no timeline"):
        baseline_timeline(worked_problem(), "pipedream", 2)


def assert_well_formed(problem: Problem, timeline: Timeline) -> None:
    """Steps are serial per stage, samples cover the batch per direction, durations are the
    time functions' values, and the iteration ends with the last step plus its tail."""
    for s, steps in enumerate(timeline.stages):
        stage = problem.stages[s]
        for before, after in zip(steps, steps[1:], strict=False):
            assert after.start >= before.end
        for kind, compute in (("F", stage.forward), ("B", stage.backward)):
            chosen = sorted((step for step in steps if step.kind == kind), key=lambda x: x.samples)
            covered = [
                sample for step in chosen for sample in range(step.samples[0], step.samples[1] + 1)
            ]
            assert covered == list(range(1, problem.batch_size + 1))
            for step in chosen:
                assert math.isclose(step.duration, compute(step.size), rel_tol=1e-9, abs_tol=1e-9)
    for link, steps in enumerate(timeline.links):
        for kind, transfer in (
            ("F", problem.links[link].forward),
            ("B", problem.links[link].backward),
        ):
            chosen = [step for step in steps if step.kind == kind]
            for before, after in zip(chosen, chosen[1:], strict=False):
                assert after.start >= before.end  # one transfer at a time per direction
            for step in chosen:
                assert math.isclose(step.duration, transfer(step.size), rel_tol=1e-9, abs_tol=1e-9)
    last = max(steps[-1].end for steps in timeline.stages)
    assert timeline.iteration_time >= last or math.isclose(timeline.iteration_time, last)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_plan_timeline_is_well_formed(problem: Problem, data: st.DataObject) -> None:
    plan = data.draw(plans(problem))
    timeline = plan_timeline(problem, plan)
    assert timeline.iteration_time == evaluate(problem, plan).iteration_time
    assert_well_formed(problem, timeline)
    # a forward waits for the upstream transfer that holds its last sample
    for s in range(1, problem.num_stages):
        arrivals = [step for step in timeline.links[s - 1] if step.kind == "F"]
        upstream = prefix_sums(plan.forward[s - 1])
        for step in (x for x in timeline.stages[s] if x.kind == "F"):
            holder = next(i for i, p in enumerate(upstream) if p >= step.samples[1]) - 1
            assert step.start >= arrivals[holder].end


@PROPERTY
@given(problem=problems(binding_caps=False), data=st.data())
def test_one_f_one_b_timeline_is_the_simulation(problem: Problem, data: st.DataObject) -> None:
    """Its end is :func:`one_f_one_b` exactly; each stage runs 1F1B's order."""
    m = data.draw(st.sampled_from(feasible_microbatch_counts(problem)))
    timeline = baseline_timeline(problem, "1f1b", m)
    assert timeline.iteration_time == one_f_one_b(problem, m)
    assert_well_formed(problem, timeline)
    for s, steps in enumerate(timeline.stages):
        letters = "".join(step.kind for step in steps if step.kind != "T")
        assert letters == one_f_one_b_order(problem.num_stages, m).stages[s]
    assert baseline_timeline(problem, "gpipe", m).iteration_time == gpipe(problem, m)
