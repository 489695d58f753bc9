"""The local greedy and the global greedy-based DP (tidgap.optimize.heuristics), on hand-made,
golden and random problems; optimality claims only where they hold (one stage)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.strategies import partitions, problems
from tidgap import Link, Plan, Problem, Stage, affine, check_plan, equal_partition, evaluate
from tidgap.analysis.exhaustive import compositions
from tidgap.optimize.heuristics import (
    State,
    backward_chain,
    forward_chain,
    global_dp,
    local_greedy,
    push,
)

PROPERTY = settings(max_examples=100, deadline=None, derandomize=True, database=None)
FREE = affine(0, 0)


def at_most(value: float, bound: float) -> bool:
    """``value <= bound`` up to rounding."""
    return value <= bound or math.isclose(value, bound, rel_tol=1e-9, abs_tol=1e-12)


def two_stages(forward: tuple[Any, Any], backward: tuple[Any, Any], **extra: Any) -> Problem:
    """A 2-stage problem with the given compute functions; links and the rest from ``extra``."""
    links = extra.pop("links", [Link(forward=FREE, backward=FREE)])
    tails = extra.pop("tails", (0.0, 0.0))
    stages = [
        Stage(forward=f, backward=b, tail=t)
        for f, b, t in zip(forward, backward, tails, strict=True)
    ]
    return Problem(stages=stages, links=links, **extra)


def sub_batch(problem: Problem, units: int) -> Problem:
    """``problem`` with a batch of ``units`` units (caps above it act as the batch)."""
    data = problem.model_dump(exclude_none=True)
    return Problem.from_dict({**data, "batch_size": units * problem.unit})


def common_plan(problem: Problem, direction: str, sizes: list[int]) -> Plan:
    """``sizes`` (samples) on every stage in ``direction``, one-unit microbatches the other way."""
    S, ones = problem.num_stages, [problem.unit] * problem.num_units
    if direction == "forward":
        return Plan.of([sizes] * S, [ones] * S)
    return Plan.of([ones] * S, [sizes] * S)


def direction_time(problem: Problem, direction: str, sizes: list[int]) -> float:
    """``forward_end`` of a common forward partition (samples), or the iteration time of a
    common backward partition behind a fixed forward (differences = the span's)."""
    result = evaluate(problem, common_plan(problem, direction, sizes))
    return result.forward_end if direction == "forward" else result.iteration_time


def check_dp_direction(problem: Problem, direction: str, brute_force: bool) -> None:
    """The DP result of ``direction`` is the best of the candidates it considered.

    Candidates: the DP result for ``U - j`` units plus one microbatch of ``j`` units, for every
    ``j`` within the direction's common cap. The result must be one of them (its prefix is
    the smaller DP result), and with ``brute_force`` it is among all common compositions,
    and optimal over them when there is one stage (the DP state is then one number).
    """
    unit, U = problem.unit, problem.num_units
    chain = forward_chain(problem) if direction == "forward" else backward_chain(problem)
    largest = chain.cap // unit

    def dp(units: int) -> list[int]:
        if units == 0:
            return []
        plan = global_dp(sub_batch(problem, units))
        return [size // unit for size in getattr(plan, direction)[0]]

    result = dp(U)
    assert result[:-1] == dp(U - result[-1])
    best = direction_time(problem, direction, [j * unit for j in result])
    for j in range(1, min(largest, U) + 1):
        candidate = [*dp(U - j), j]
        assert at_most(best, direction_time(problem, direction, [k * unit for k in candidate]))
    if brute_force:
        every = compositions(U, largest)
        assert result in every
        if problem.num_stages == 1:
            optimum = min(direction_time(problem, direction, [k * unit for k in c]) for c in every)
            assert at_most(best, optimum)


# --- golden cases ----------------------------------------------------------------------


def test_plans_are_feasible(golden_case: dict[str, Any]) -> None:
    problem = Problem.from_dict(golden_case["problem"])
    check_plan(local_greedy(problem), problem)
    check_plan(global_dp(problem), problem)


def test_plans_are_deterministic(golden_case: dict[str, Any]) -> None:
    first = Problem.from_dict(golden_case["problem"])
    second = Problem.from_dict(golden_case["problem"])
    assert local_greedy(first) == local_greedy(second)
    assert global_dp(first) == global_dp(second)


def test_plan_shapes(golden_case: dict[str, Any]) -> None:
    """Local greedy: per stage one equal partition, both ways; DP: one partition per direction."""
    problem = Problem.from_dict(golden_case["problem"])
    local = local_greedy(problem)
    assert local.forward == local.backward
    for sizes in local.forward:
        assert sizes == equal_partition(problem, len(sizes))
    plan = global_dp(problem)
    for per_stage in (plan.forward, plan.backward):
        assert all(sizes == per_stage[0] for sizes in per_stage)


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_dp_is_best_of_its_candidates_on_golden(
    golden_case: dict[str, Any], direction: str
) -> None:
    """Brute force over all common compositions where ``U <= 8``."""
    problem = Problem.from_dict(golden_case["problem"])
    check_dp_direction(problem, direction, brute_force=problem.num_units <= 8)


# --- random small problems -------------------------------------------------------------


@PROPERTY
@given(problem=problems())
def test_random_plans_are_feasible(problem: Problem) -> None:
    check_plan(local_greedy(problem), problem)
    check_plan(global_dp(problem), problem)


@PROPERTY
@given(problem=problems(), direction=st.sampled_from(["forward", "backward"]))
def test_dp_is_best_of_its_candidates(problem: Problem, direction: str) -> None:
    check_dp_direction(problem, direction, brute_force=True)


@PROPERTY
@given(problem=problems(max_stages=1), direction=st.sampled_from(["forward", "backward"]))
def test_dp_is_optimal_with_one_stage(problem: Problem, direction: str) -> None:
    check_dp_direction(problem, direction, brute_force=True)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_push_follows_the_model(problem: Problem, data: st.DataObject) -> None:
    """Pushing a common partition through each chain gives the oracle's end times."""
    unit, S = problem.unit, problem.num_stages
    for direction in ("forward", "backward"):
        chain = forward_chain(problem) if direction == "forward" else backward_chain(problem)
        sizes = [j * unit for j in data.draw(partitions(problem.num_units, chain.cap // unit))]
        state = State((0.0,) * S, (-math.inf,) * (S - 1), 0)
        for b in sizes:
            compute, links = [f(b) for f in chain.compute], [f(b) for f in chain.links]
            state = push(state, compute, links, b // unit)
        result = evaluate(problem, common_plan(problem, direction, sizes))
        if direction == "forward":
            assert list(state.ends) == result.forward_ends
        else:
            spans = [end - result.forward_end for end in reversed(result.backward_ends)]
            assert all(
                math.isclose(a, b, abs_tol=1e-9) for a, b in zip(state.ends, spans, strict=True)
            )


# --- global_dp by hand -----------------------------------------------------------------


def one_stage(cap: int | None) -> Problem:
    """``B = 8``; ``Tf(b) = 1 + b/2``, ``Tb(b) = 2 + b``: larger microbatches are cheaper."""
    stage = Stage(forward=affine(1, 0.5), backward=affine(2, 1), max_microbatch=cap)
    return Problem(batch_size=8, stages=[stage])


def test_one_stage_takes_the_whole_batch() -> None:
    assert global_dp(one_stage(None)) == Plan.of([[8]], [[8]])


def test_one_stage_cap_and_tie_breaks() -> None:
    """Cap 3: every 3-part composition ties on time; the larger last microbatch wins, at
    ``u = 5`` ([2, 3] over [3, 2]) and at ``u = 8`` ([2, 3] + 3 over [3, 3] + 2)."""
    assert global_dp(one_stage(3)) == Plan.of([[2, 3, 3]], [[2, 3, 3]])


def test_two_stages_brute_force_forward() -> None:
    """Free stage 0, ``Tf_1(b) = 1 + 2b``, ``Cf_0(b) = 2b``, ``U = 4``.

    DP: best[1] = [1] (E1 = 5, A = 2); best[2] = [1, 1] (E1 = 8) over [2] (9);
    best[3] = [1, 2] (11, ties with [1, 1, 1], larger last); best[4] = [1, 1] + 2 (13) over
    [1, 2] + 1 (14), [1] + 3 (15), [4] (17). Brute force: 13 is the unique optimum.
    """
    problem = two_stages(
        (FREE, affine(1, 2)),
        (FREE, FREE),
        links=[Link(forward=affine(0, 2), backward=FREE)],
        batch_size=4,
    )
    plan = global_dp(problem)
    assert plan.forward == [[1, 1, 2]] * 2
    times = {tuple(c): direction_time(problem, "forward", c) for c in compositions(4, 4)}
    assert times[(1, 1, 2)] == 13
    assert sorted(times.values())[:2] == [13, 14]


def test_two_stages_backward_is_the_mirror() -> None:
    """The forward case above, reflected: stage 1 free, ``Tb_0(b) = 1 + 2b``, ``Cb_0 = 2b``."""
    problem = two_stages(
        (FREE, FREE),
        (affine(1, 2), FREE),
        links=[Link(forward=FREE, backward=affine(0, 2))],
        batch_size=4,
    )
    plan = global_dp(problem)
    assert plan.backward == [[1, 1, 2]] * 2
    result = evaluate(problem, plan)
    assert result.iteration_time - result.forward_end == 13


def test_backward_objective_includes_tails() -> None:
    """``Tb_1(b) = 1 + b``, ``Tb_0(b) = b``, free links, ``U = 4``. Without tails the span is
    8 at best and [4] gives 9; a tail of 100 on stage 1 makes ``G[1]`` the objective, which
    one microbatch minimises."""
    backward = (affine(0, 1), affine(1, 1))
    plain = two_stages((FREE, FREE), backward, batch_size=4)
    tailed = two_stages((FREE, FREE), backward, batch_size=4, tails=(0.0, 100.0))
    assert evaluate(plain, global_dp(plain)).iteration_time == 8
    assert global_dp(plain).backward[0] != [4]
    assert global_dp(tailed).backward == [[4], [4]]


def test_greedy_dp_can_miss_the_common_optimum() -> None:
    """One state per ``u`` is greedy: ``Tf_0(b) = 1 + 3b``, ``Tf_1(b) = 2b``, ``U = 3``.

    best[2] = [1, 1] (E = 8, 10) beats [2] (E = 7, 11) on the last stage, so [2, 1]
    (ends 13) is never built; the DP returns [1, 1, 1] (ends 14).
    """
    problem = two_stages((affine(1, 3), affine(0, 2)), (FREE, FREE), batch_size=3)
    assert global_dp(problem).forward == [[1, 1, 1]] * 2
    assert direction_time(problem, "forward", [1, 1, 1]) == 14
    assert direction_time(problem, "forward", [2, 1]) == 13


# --- local_greedy by hand --------------------------------------------------------------


def test_local_greedy_stages_disagree() -> None:
    """``B = 8``, ``S = 2``. Stage 0, ``Tf = Tb = 10 + b``: ``(m + 1)(20 + 2b)`` is least at
    ``m = 1`` (72). Stage 1, ``Tf = b``, ``Tb = 2b``: ``3(m + 1)b`` is least at ``m = 8`` (27)."""
    problem = two_stages((affine(10, 1), affine(0, 1)), (affine(10, 1), affine(0, 2)), batch_size=8)
    expected = [[8], [1] * 8]
    assert local_greedy(problem) == Plan.of(expected, expected)


def test_local_greedy_caps_ties_and_ignored_links() -> None:
    """``B = 10``, ``unit = 2`` (``U = 5``), ``S = 3``, slow links (ignored by the estimate).

    Stage 0, constant 10 each way, backward cap 6: ``20(m + 2)`` grows with ``m``, so the
    smallest count within the cap, ``m = 2`` ([6, 4]). Stage 1 costs nothing: every ``m``
    ties at 0, so ``m = 1``. Stage 2, ``Tf = Tb = 3 + b``: ``(m + 2)(6 + 2b)`` is 78, 72, 70,
    84, 70 for ``m = 1..5``; the tie goes to ``m = 3`` ([4, 4, 2])."""
    slow = Link(forward=affine(50, 5), backward=affine(50, 5))
    stages = [
        Stage(forward=affine(10, 0), backward=affine(10, 0), max_microbatch_backward=6),
        Stage(forward=FREE, backward=FREE),
        Stage(forward=affine(3, 1), backward=affine(3, 1)),
    ]
    problem = Problem(batch_size=10, unit=2, stages=stages, links=[slow, slow])
    expected = [[6, 4], [10], [4, 4, 2]]
    assert local_greedy(problem) == Plan.of(expected, expected)
    check_plan(local_greedy(problem), problem)
