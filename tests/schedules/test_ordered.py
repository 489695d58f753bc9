"""Ordered plans (model.md, "Ordered plans"): golden values, the identities, and properties
of the IR, the window rule, the repair and the event simulator."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.golden_ordered import ordered_plan
from tests.support.strategies import ordered_plans, orders, plans, problems, raised
from tidgap import InputError, Order, Plan, Problem, check_plan, evaluate, load_problem
from tidgap.schedules import simulate as simulate_module
from tidgap.schedules.baselines import (
    BASELINE_ROWS,
    baseline_times,
    equal_partition,
    feasible_microbatch_counts,
)
from tidgap.schedules.families import SCHEDULES
from tidgap.schedules.flush import evaluate as flush_evaluate
from tidgap.schedules.ir import (
    first_violation,
    flush_order,
    one_f_one_b_order,
    repair,
    window_order,
)
from tidgap.schedules.simulate import Deadlock, evaluate_order, simulate

REL = 1e-9
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None)
FIELDS = ("iteration_time", "forward_end", "forward_ends", "backward_ends")


def test_every_ordered_plan_matches_expected(golden_case: dict[str, Any]) -> None:
    problem = Problem.from_dict(golden_case["problem"])
    assert golden_case["ordered_plans"], "a golden case without ordered plans tests nothing"
    for entry in golden_case["ordered_plans"]:
        plan = ordered_plan(entry)
        check_plan(plan, problem)
        if "windows" in entry:
            assert list(plan.stage_order().stages) == entry["order_expanded"]
        got = evaluate(problem, plan).as_dict()
        expected = entry["expected"]
        for key in FIELDS:
            assert got[key] == pytest.approx(expected[key], rel=REL), key
        assert got["peak_held"] == expected["peak_held"]
        for key in ("peak_memory", "over_memory_limit"):
            assert got.get(key) == pytest.approx(expected.get(key)), key


def test_every_invalid_order_is_refused_naming_stage_position_and_rule(
    golden_case: dict[str, Any],
) -> None:
    problem = Problem.from_dict(golden_case["problem"])
    for entry in golden_case.get("invalid_orders", []):
        plan = ordered_plan(entry)
        error = entry["error"]
        key = "order" if "order" in entry else "windows"
        with pytest.raises(InputError) as raised_error:
            check_plan(plan, problem)
        assert raised_error.value.path == (key, error["stage"])
        text = str(raised_error.value)
        rule = "rule count" if error["rule"] == "count" else f"rule {error['rule']} "
        assert rule in text, text
        if "position" in error:
            assert f"position {error['position']}:" in text, text
        else:
            assert "position" not in text, text
        violation = first_violation(plan.stage_order(), plan.forward, plan.backward)
        assert (violation.stage, violation.position, violation.rule) == (
            error["stage"],
            error.get("position"),
            error["rule"],
        )


def test_the_flush_order_gives_the_flush_recurrences_exactly(golden_case: dict[str, Any]) -> None:
    problem = Problem.from_dict(golden_case["problem"])
    for entry in golden_case["plans"]:
        plan = Plan.of(entry["forward"], entry["backward"])
        order = flush_order(plan.forward, plan.backward)
        assert evaluate_order(problem, plan.forward, plan.backward, order) == flush_evaluate(
            problem, plan
        )


def test_the_one_f_one_b_order_gives_the_golden_and_the_compiled_baseline(
    golden_case: dict[str, Any],
) -> None:
    """The simulator on 1F1B's order equals the golden 1F1B(m) and, exactly, the compiled
    batched baselines (a separate implementation) at every feasible ``m``."""
    problem = Problem.from_dict(golden_case["problem"])
    ms, table = baseline_times(problem)
    compiled = dict(zip(ms.tolist(), table[BASELINE_ROWS.index("1f1b")].tolist(), strict=True))
    S = problem.num_stages
    for m, values in golden_case["baselines"].items():
        sizes = equal_partition(problem, int(m))
        order = one_f_one_b_order(S, int(m))
        got = evaluate_order(problem, [sizes] * S, [sizes] * S, order).iteration_time
        assert got == pytest.approx(values["1f1b"], rel=REL), m
        assert got == compiled[int(m)], m


def test_an_evaluation_keeps_no_steps_and_the_same_end_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ``steps_kept`` the simulator keeps no step (an evaluation needs none: at
    1024 stages building them took more than half its time) and gives the same end times,
    exactly."""
    problem = load_problem("example:gpt1-14")
    S, m = problem.num_stages, 6
    sizes = equal_partition(problem, m)
    order = one_f_one_b_order(S, m)
    kept = simulate(problem, [sizes] * S, [sizes] * S, order)
    bare = simulate(problem, [sizes] * S, [sizes] * S, order, steps_kept=False)
    assert kept.stages[0] and kept.links[0]
    assert bare.stages == [[] for _ in range(S)] and bare.links == [[] for _ in range(S - 1)]
    assert (bare.forward_ends, bare.backward_ends) == (kept.forward_ends, kept.backward_ends)

    def no_step(*args: Any) -> None:
        raise AssertionError("an evaluation built a step")

    monkeypatch.setattr(simulate_module, "Step", no_step)
    evaluation = evaluate_order(problem, [sizes] * S, [sizes] * S, order)
    assert evaluation.backward_ends == [ends[-1] for ends in kept.backward_ends]


def test_windows_of_the_whole_batch_give_the_flush_order(golden_case: dict[str, Any]) -> None:
    problem = Problem.from_dict(golden_case["problem"])
    B = problem.batch_size
    for entry in golden_case["plans"]:
        plan = Plan.of(entry["forward"], entry["backward"])
        for window in (B, B + problem.unit, 10 * B):
            windows = [window] * problem.num_stages
            assert window_order(plan.forward, plan.backward, windows) == flush_order(
                plan.forward, plan.backward
            )


def test_windows_of_s_minus_s_microbatches_give_the_one_f_one_b_order(
    golden_case: dict[str, Any],
) -> None:
    """Equal partitions of ``b`` samples each with ``W_s = (S-s) * b``: the 1F1B order."""
    problem = Problem.from_dict(golden_case["problem"])
    S, U = problem.num_stages, problem.num_units
    for m in feasible_microbatch_counts(problem):
        if U % m:
            continue
        sizes = equal_partition(problem, m)
        windows = [(S - s) * sizes[0] for s in range(S)]
        assert window_order([sizes] * S, [sizes] * S, windows) == one_f_one_b_order(S, m)


def test_the_registry_evaluates_every_golden_one_f_one_b_as_its_baseline(
    golden_case: dict[str, Any],
) -> None:
    problem = Problem.from_dict(golden_case["problem"])
    family = SCHEDULES["1f1b"]
    best = golden_case["best_baselines"]["1f1b"]
    evaluation = family.evaluate(problem, family.baseline(problem, best["microbatches"]))
    assert evaluation.iteration_time == pytest.approx(best["iteration_time"], rel=REL)
    assert evaluation.peak_held == best["peak_held"]


# --- properties ------------------------------------------------------------------------


@PROPERTY
@given(problem=problems(), data=st.data())
def test_rule_two_fails_exactly_when_the_simulator_cannot_finish(
    problem: Problem, data: st.DataObject
) -> None:
    """For random orders that keep rule 1, rule 2 breaks iff the simulation deadlocks."""
    plan = data.draw(plans(problem))
    order = data.draw(orders(plan))
    violation = first_violation(order, plan.forward, plan.backward)
    if violation is not None and violation.rule == 1:
        order = _own_samples_first(order, plan)
        violation = first_violation(order, plan.forward, plan.backward)
    assert violation is None or violation.rule == 2
    try:
        simulate(problem, plan.forward, plan.backward, order)
    except Deadlock:
        assert violation is not None
    else:
        assert violation is None


def _own_samples_first(order: Order, plan: Plan) -> Order:
    """``order`` with each ``B`` moved just late enough for rule 1 (own samples) to hold,
    every other choice kept: a way to draw orders that may break rule 2 alone."""
    from tidgap.schedules.ir import forwards_before, holder, letters_from, prefix_sums

    letters = []
    for s, stage in enumerate(order.stages):
        P, Q = prefix_sums(plan.forward[s]), prefix_sums(plan.backward[s])
        before = forwards_before(stage)
        for k in range(1, len(before)):
            before[k] = max(before[k], before[k - 1], holder(P, Q[k]))
        letters.append(letters_from(before, len(plan.forward[s])))
    return Order.of(letters)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_the_repair_makes_every_order_valid_and_keeps_valid_ones(
    problem: Problem, data: st.DataObject
) -> None:
    plan = data.draw(plans(problem))
    order = data.draw(orders(plan))
    repaired = repair(order, plan.forward, plan.backward)
    assert first_violation(repaired, plan.forward, plan.backward) is None
    assert repair(repaired, plan.forward, plan.backward) == repaired
    if first_violation(order, plan.forward, plan.backward) is None:
        assert repaired == order


@PROPERTY
@given(problem=problems(), data=st.data())
def test_the_repair_raises_each_backward_to_the_least_valid_place(
    problem: Problem, data: st.DataObject
) -> None:
    """model.md: each ``a[s][k]`` is raised to the least value that meets both rules and
    is at least ``a[s][k-1]``: one forward fewer before any raised ``B`` breaks a rule (a
    repair that moved backwards later than needed passed every other property)."""
    from tidgap.schedules.ir import forwards_before, letters_from

    plan = data.draw(plans(problem))
    order = data.draw(orders(plan))
    repaired = repair(order, plan.forward, plan.backward)
    for s, (given_letters, letters) in enumerate(zip(order.stages, repaired.stages, strict=True)):
        was, now = forwards_before(given_letters), forwards_before(letters)
        for k in range(1, len(now)):
            if now[k] > max(was[k], now[k - 1]):
                earlier = [*now[:k], now[k] - 1, *now[k + 1 :]]
                stages = list(repaired.stages)
                stages[s] = letters_from(earlier, len(plan.forward[s]))
                moved = Order.of(stages)
                assert first_violation(moved, plan.forward, plan.backward) is not None, (s, k)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_raising_any_time_never_lowers_the_iteration_time(
    problem: Problem, data: st.DataObject
) -> None:
    plan = data.draw(ordered_plans(problem))
    slower = data.draw(raised(problem))
    assert evaluate(slower, plan).iteration_time >= evaluate(problem, plan).iteration_time


@PROPERTY
@given(problem=problems(), data=st.data())
def test_peak_held_lies_between_the_largest_microbatch_and_the_batch(
    problem: Problem, data: st.DataObject
) -> None:
    plan = data.draw(ordered_plans(problem))
    held = evaluate(problem, plan).peak_held
    for s, value in enumerate(held):
        assert max(plan.forward[s]) <= value <= problem.batch_size


@PROPERTY
@given(problem=problems(), data=st.data())
def test_windows_expand_to_valid_or_refused_orders(problem: Problem, data: st.DataObject) -> None:
    """A window order keeps rule 1 always; it is refused (on ``windows[s]``) exactly when it
    breaks rule 2, and evaluates like its written-out order otherwise."""
    plan = data.draw(plans(problem))
    windows = data.draw(
        st.lists(
            st.integers(1, 2 * problem.batch_size),
            min_size=problem.num_stages,
            max_size=problem.num_stages,
        )
    )
    windowed = Plan.of(plan.forward, plan.backward, windows=windows)
    order = windowed.stage_order()
    violation = first_violation(order, plan.forward, plan.backward)
    assert violation is None or violation.rule == 2
    if violation is not None:
        with pytest.raises(InputError) as error:
            check_plan(windowed, problem)
        assert error.value.path == ("windows", violation.stage)
        return
    written = Plan.of(plan.forward, plan.backward, order=list(order.stages))
    assert evaluate(problem, windowed) == evaluate(problem, written)
