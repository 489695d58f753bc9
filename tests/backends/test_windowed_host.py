"""The CUDA event loop for ordered plans (``kernels/windowed_sim.cuh``), built for the host
with g++: equal to the reference simulator on every golden ordered plan and on random ones
(ticks, rel 1e-6), ``peak_held`` exactly, and invalid orders scored ``TIDGAP_INVALID``."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import golden_cases
from tests.support.golden_ordered import ordered_plan
from tests.support.host_build import build_host
from tests.support.strategies import ordered_plans, orders, plans, problems
from tidgap import Order, Plan, Problem, evaluate
from tidgap.backends.evaluator import INVALID
from tidgap.backends.ticks import TickedProblem, tick_problem
from tidgap.kernels.source import WARP, lane_group, lane_scratch_bytes
from tidgap.optimize.genome import encode_plan
from tidgap.schedules.ir import first_violation

PROPERTY = settings(max_examples=80, deadline=None, derandomize=True, database=None)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``tidgap_windowed_host`` from ``tests/support/native/windowed_host.cpp``."""
    return build_host(tmp_path_factory, "windowed_host", "tidgap_windowed_host")


def order_codes(order: Order, width: int) -> np.ndarray:
    """``(S, 2 width)`` int8: 0 forward, 1 backward, -1 after the last op (any letter other
    than F and B as 2, which the kernel must refuse)."""
    codes = np.full((len(order.stages), 2 * width), -1, dtype=np.int8)
    for s, letters in enumerate(order.stages):
        codes[s, : len(letters)] = [{"F": 0, "B": 1}.get(op, 2) for op in letters]
    return codes


def run(
    host: Any, ticked: TickedProblem, problem: Problem, items: list[tuple[Plan, Order]]
) -> tuple[np.ndarray, np.ndarray]:
    """``(P,)`` iteration ticks and ``(P, S)`` peak held units of ``items``."""
    width = max(
        max(*map(len, plan.forward + plan.backward), -(-max(map(len, order.stages)) // 2))
        for plan, order in items
    )
    encoded = [encode_plan(plan, problem, width) for plan, _ in items]
    forward = np.ascontiguousarray([f for f, _ in encoded], dtype=np.int32)
    backward = np.ascontiguousarray([b for _, b in encoded], dtype=np.int32)
    codes = np.ascontiguousarray([order_codes(order, width) for _, order in items])
    population, stages = len(items), problem.num_stages
    fitness = np.zeros(population, dtype=np.int64)
    held = np.zeros((population, stages), dtype=np.int64)
    tables = [
        np.ascontiguousarray(table, dtype=np.int64)
        for table in (
            ticked.forward_compute,
            ticked.backward_compute,
            ticked.forward_transfer,
            ticked.backward_transfer,
            ticked.tails,
        )
    ]
    run_tables = ticked.run_tables()
    host(
        *(ctypes.c_void_p(a.ctypes.data) for a in (forward, backward, codes, fitness, held)),
        ctypes.c_longlong(population),
        ctypes.c_int(stages),
        ctypes.c_int(width),
        ctypes.c_int(codes.shape[2]),
        *(ctypes.c_void_p(t.ctypes.data) for t in tables),
        ctypes.c_int(ticked.forward_compute.shape[1]),
        *(ctypes.c_void_p(t.ctypes.data) for t in run_tables),  # unread: model pricing
        ctypes.c_int(0),
    )
    return fitness, held


def check(host: Any, problem: Problem, items: list[tuple[Plan, Order]]) -> None:
    ticked = tick_problem(problem)
    fitness, held = run(host, ticked, problem, items)
    for (plan, order), ticks, units in zip(items, fitness, held, strict=True):
        if first_violation(order, plan.forward, plan.backward) is not None:
            assert ticks == INVALID and not units.any()
            continue
        ordered = Plan.of(plan.forward, plan.backward, order=list(order.stages))
        expected = evaluate(problem, ordered)
        assert ticked.to_time(int(ticks)) == pytest.approx(expected.iteration_time, rel=1e-6)
        assert (units * problem.unit).tolist() == expected.peak_held


@pytest.mark.parametrize("case", golden_cases(), ids=lambda case: case["problem"]["name"])
def test_every_golden_ordered_plan_and_invalid_order(host: Any, case: dict[str, Any]) -> None:
    problem = Problem.from_dict(case["problem"])
    entries = case["ordered_plans"] + case.get("invalid_orders", [])
    items = [(ordered_plan(entry), ordered_plan(entry).stage_order()) for entry in entries]
    check(host, problem, items)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_random_orders_valid_or_not(host: Any, problem: Problem, data: st.DataObject) -> None:
    items = []
    for _ in range(4):
        valid = data.draw(ordered_plans(problem))
        items.append((valid, valid.stage_order()))
        plan = data.draw(plans(problem))
        items.append((plan, data.draw(orders(plan))))
    check(host, problem, items)


def test_a_wrong_count_or_a_stray_letter_is_invalid(host: Any) -> None:
    problem = Problem.from_dict(golden_cases()[0]["problem"])
    plan = ordered_plan(golden_cases()[0]["ordered_plans"][0])
    letters = list(plan.stage_order().stages)
    short = Order.of([letters[0][:-1], *letters[1:]])
    stray = Order.of([letters[0][:-1] + "X", *letters[1:]])
    fitness, held = run(host, tick_problem(problem), problem, [(plan, short), (plan, stray)])
    assert fitness.tolist() == [INVALID, INVALID] and not held.any()


@pytest.fixture(scope="module")
def lane_words(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``TIDGAP_LANE_WORDS(stages, width)`` of the host build."""
    words = build_host(tmp_path_factory, "windowed_host", "tidgap_lane_words_host")
    words.restype = ctypes.c_longlong
    return words


@pytest.mark.parametrize(("stages", "width"), [(1, 1), (3, 7), (8, 32), (12, 64), (32, 512)])
def test_lane_scratch_bytes_is_the_kernels_own(lane_words: Any, stages: int, width: int) -> None:
    """The launcher's shared-memory size for ``windowed_lanes.cu`` is a warp's individuals
    times the kernel's ``TIDGAP_LANE_WORDS`` (a smaller one would overrun shared memory)."""
    individuals = WARP // lane_group(stages)
    assert lane_scratch_bytes(stages, width) == individuals * 8 * lane_words(stages, width)
