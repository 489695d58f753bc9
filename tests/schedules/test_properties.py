"""Properties of the cost model and the baselines on random small problems (docs/model.md)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.strategies import plans, problems, raised
from tidgap import (
    Plan,
    Problem,
    check_plan,
    evaluate,
    feasible_microbatch_counts,
    gpipe,
    gpipe_plan,
    one_f_one_b,
    pipedream,
)
from tidgap.schedules.flush import backward_recurrence

#: Deterministic runs: the same examples every time, no example database.
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None)


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    """``a == b`` up to ``rel`` (and 1e-12 absolute, for values at or near zero)."""
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def at_least(value: float, bound: float) -> bool:
    """``value >= bound`` up to rounding."""
    return value >= bound or close(value, bound)


def equal_sizes(problem: Problem, m: int) -> list[int]:
    """GPipe's equal partition into ``m`` microbatches, in samples, via ``numpy.array_split``."""
    chunks = np.array_split(np.arange(problem.num_units), m)
    return [len(chunk) * problem.unit for chunk in chunks]


def common_cap(problem: Problem) -> int:
    """The largest size every stage accepts both ways, read from the caps as model.md states."""
    batch, caps = problem.batch_size, []
    for stage in problem.stages:
        fcap = batch if stage.max_microbatch is None else min(stage.max_microbatch, batch)
        bcap = fcap if stage.max_microbatch_backward is None else stage.max_microbatch_backward
        caps.append(min(fcap, bcap, batch))
    return min(caps)


def resource_busy(problem: Problem, forward: list[list[int]], backward: list[list[int]]) -> float:
    """The busiest resource: a stage's compute plus tail, or a link's transfers one way."""
    stages = [
        sum(map(stage.forward, forward[s])) + sum(map(stage.backward, backward[s])) + stage.tail
        for s, stage in enumerate(problem.stages)
    ]
    links = [
        max(sum(map(link.forward, forward[s])), sum(map(link.backward, backward[s + 1])))
        for s, link in enumerate(problem.links)
    ]
    return max(stages + links)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_generated_inputs_are_valid(problem: Problem, data: st.DataObject) -> None:
    """The strategies make feasible plans, and problems survive the dict round trip."""
    check_plan(data.draw(plans(problem)), problem)
    assert Problem.from_dict(problem.model_dump(exclude_none=True)) == problem


@PROPERTY
@given(problem=problems(), data=st.data())
def test_forward_and_backward_separate(problem: Problem, data: st.DataObject) -> None:
    """``iteration_time = forward_end + backward_span``; the span ignores the forward chromosome."""
    plan = data.draw(plans(problem))
    result = evaluate(problem, plan)
    G = backward_recurrence(problem, plan.backward, 0.0).ends
    span = max(g[-1] + stage.tail for g, stage in zip(G, problem.stages, strict=True))
    assert close(result.iteration_time, result.forward_end + span)

    other = Plan.of(data.draw(plans(problem)).forward, plan.backward)
    moved = evaluate(problem, other)
    backward_span = result.iteration_time - result.forward_end
    assert close(moved.iteration_time, moved.forward_end + backward_span)


@PROPERTY
@given(problem=problems())
def test_gpipe_is_the_equal_partition_plan(problem: Problem) -> None:
    """GPipe(m) is the flush model on ``array_split``'s partition, for every feasible ``m``."""
    counts = [
        m
        for m in range(1, problem.num_units + 1)
        if max(equal_sizes(problem, m)) <= common_cap(problem)
    ]
    assert feasible_microbatch_counts(problem) == counts
    stages = problem.num_stages
    for m in counts:
        sizes = equal_sizes(problem, m)
        plan = Plan.of([sizes] * stages, [sizes] * stages)
        check_plan(plan, problem)
        expected = evaluate(problem, plan).iteration_time
        assert close(gpipe(problem, m), expected, rel=1e-12)
        assert close(evaluate(problem, gpipe_plan(problem, m)).iteration_time, expected, rel=1e-12)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_slower_parts_never_speed_up(problem: Problem, data: st.DataObject) -> None:
    """Raising one compute time, link time or tail never lowers a plan's or a baseline's time."""
    plan = data.draw(plans(problem))
    m = data.draw(st.sampled_from(feasible_microbatch_counts(problem)))
    slower = data.draw(raised(problem))
    assert at_least(evaluate(slower, plan).iteration_time, evaluate(problem, plan).iteration_time)
    for schedule in (gpipe, one_f_one_b, pipedream):
        assert at_least(schedule(slower, m), schedule(problem, m)), schedule.__name__


@PROPERTY
@given(problem=problems(binding_caps=False))
def test_one_microbatch_1f1b_is_gpipe(problem: Problem) -> None:
    """With one microbatch, 1F1B has nothing to interleave: it is GPipe(1)."""
    assert close(one_f_one_b(problem, 1), gpipe(problem, 1), rel=1e-12)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_plan_lower_bounds(problem: Problem, data: st.DataObject) -> None:
    """No plan beats its busiest resource; with the flush, the two passes add up."""
    plan = data.draw(plans(problem))
    result = evaluate(problem, plan)
    assert at_least(result.iteration_time, resource_busy(problem, plan.forward, plan.backward))
    for s, stage in enumerate(problem.stages):
        assert at_least(result.forward_end, sum(map(stage.forward, plan.forward[s])))
        own_backward = sum(map(stage.backward, plan.backward[s])) + stage.tail
        assert at_least(result.iteration_time, result.forward_end + own_backward)


@PROPERTY
@given(problem=problems())
def test_baseline_lower_bounds(problem: Problem) -> None:
    """GPipe(m) and 1F1B(m) take at least PipeDream(m), the busiest resource, for every ``m``."""
    stages = problem.num_stages
    for m in feasible_microbatch_counts(problem):
        sizes = [equal_sizes(problem, m)] * stages
        busiest = resource_busy(problem, sizes, sizes)
        assert close(pipedream(problem, m), busiest, rel=1e-12)
        assert at_least(gpipe(problem, m), busiest)
        assert at_least(one_f_one_b(problem, m), busiest)


@PROPERTY
@given(problem=problems(max_stages=1), data=st.data())
def test_one_stage_has_no_idle_time(problem: Problem, data: st.DataObject) -> None:
    """With one stage every schedule and plan just adds up the stage's compute and tail."""
    plan = data.draw(plans(problem))
    busy = resource_busy(problem, plan.forward, plan.backward)
    assert close(evaluate(problem, plan).iteration_time, busy, rel=1e-12)
    for m in feasible_microbatch_counts(problem):
        expected = pipedream(problem, m)
        assert close(gpipe(problem, m), expected, rel=1e-12)
        assert close(one_f_one_b(problem, m), expected, rel=1e-12)
