"""``Timeline.held``: the samples a stage holds over time, the curve that pictures and traces
draw. Its maximum is the model's ``peak_held`` (model.md, Memory)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.cli_helpers import case_named, case_names
from tests.support.golden_ordered import ordered_entry, ordered_params, ordered_plan
from tests.support.strategies import ordered_plans, plans, problems
from tidgap import Problem, evaluate
from tidgap.schedules.baselines import equal_partition, feasible_microbatch_counts
from tidgap.schedules.families import baseline_evaluation, baseline_timeline, plan_timeline
from tidgap.schedules.timeline import Timeline

PROPERTY = settings(max_examples=100, deadline=None, derandomize=True, database=None)


def _check_curve(timeline: Timeline, s: int, batch: int) -> list[tuple[float, int]]:
    """The curve's shape: from (0, 0), times in order, within 0..batch, back to 0."""
    points = timeline.held(s)
    assert points[0] == (0.0, 0)
    times = [time for time, _ in points]
    assert times == sorted(times)
    assert all(0 <= held <= batch for _, held in points)
    assert points[-1][1] == 0  # every sample's backward has run
    steps = [step for step in timeline.stages[s] if step.kind in ("F", "B")]
    assert len(points) == len(steps) + 1
    return points


@pytest.mark.parametrize(("name", "index"), ordered_params())
def test_peak_of_the_curve_is_peak_held_on_golden_ordered_plans(name: str, index: int) -> None:
    entry = ordered_entry(name, index)
    problem = Problem.from_dict(case_named(name)["problem"])
    timeline = plan_timeline(problem, ordered_plan(entry))
    for s in range(problem.num_stages):
        points = _check_curve(timeline, s, problem.batch_size)
        assert max(held for _, held in points) == entry["expected"]["peak_held"][s]


@pytest.mark.parametrize("name", case_names())
def test_peak_of_the_curve_is_peak_held_for_one_f_one_b(name: str) -> None:
    """1F1B(m) for a few m: the evaluation's peak_held, which model.md also writes as the
    sum of the first ``min(S-s, m)`` microbatches."""
    problem = Problem.from_dict(case_named(name)["problem"])
    counts = feasible_microbatch_counts(problem)
    for m in sorted({counts[0], counts[len(counts) // 2], counts[-1]}):
        timeline = baseline_timeline(problem, "1f1b", m)
        peaks = baseline_evaluation(problem, "1f1b", m).peak_held
        sizes = equal_partition(problem, m)
        for s in range(problem.num_stages):
            points = _check_curve(timeline, s, problem.batch_size)
            peak = max(held for _, held in points)
            assert peak == peaks[s] == sum(sizes[: min(problem.num_stages - s, m)]), (m, s)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_peak_of_the_curve_is_peak_held_on_any_ordered_plan(
    problem: Problem, data: st.DataObject
) -> None:
    plan = data.draw(ordered_plans(problem))
    timeline = plan_timeline(problem, plan)
    peaks = evaluate(problem, plan).peak_held
    for s in range(problem.num_stages):
        points = _check_curve(timeline, s, problem.batch_size)
        assert max(held for _, held in points) == peaks[s]


@PROPERTY
@given(problem=problems(), data=st.data())
def test_a_flush_plan_holds_the_batch_until_its_first_backward(
    problem: Problem, data: st.DataObject
) -> None:
    """Under the flush the curve climbs to ``B`` at the last forward's end and falls from the
    first backward's end."""
    plan = data.draw(plans(problem))
    timeline = plan_timeline(problem, plan)
    for s in range(problem.num_stages):
        points = _check_curve(timeline, s, problem.batch_size)
        forwards = len(plan.forward[s])
        assert [held for _, held in points[1 : forwards + 1]] == [
            sum(plan.forward[s][: k + 1]) for k in range(forwards)
        ]
        assert points[forwards] == (timeline.stages[s][forwards - 1].end, problem.batch_size)
