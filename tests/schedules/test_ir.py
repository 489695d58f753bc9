"""The schedule IR: actions print and parse as ``0F3``; orders round-trip; the error text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.strategies import orders, plans, problems
from tidgap import Action, Order, Problem
from tidgap.schedules.ir import Violation, holder, holders, one_f_one_b_order, prefix_sums

PROPERTY = settings(max_examples=100, deadline=None, derandomize=True, database=None)


def test_an_action_prints_as_stage_op_microbatch_and_parses_back() -> None:
    action = Action(12, "B", 3)
    assert str(action) == "12B3"
    assert Action.parse("12B3") == action
    assert Action.parse(" 0F0 ") == Action(0, "F", 0)


@pytest.mark.parametrize("text", ["", "F3", "0X3", "0F", "0f3", "-1F3", "0F3x", "0 F 3"])
def test_anything_else_is_not_an_action(text: str) -> None:
    with pytest.raises(ValueError, match="not an action"):
        Action.parse(text)


def test_one_f_one_b_prints_in_the_pytorch_style() -> None:
    assert one_f_one_b_order(2, 3).format_actions() == [
        "0F0 0F1 0B0 0F2 0B1 0B2",
        "1F0 1B0 1F1 1B1 1F2 1B2",
    ]


@PROPERTY
@given(problem=problems(), data=st.data())
def test_every_order_round_trips_through_its_actions(problem: Problem, data: st.DataObject) -> None:
    order = data.draw(orders(data.draw(plans(problem))))
    assert Order.parse_actions(order.format_actions()) == order
    for s in range(len(order.stages)):
        letters = "".join(action.op for action in order.actions(s))
        assert letters == order.stages[s]


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (["0F1"], "0F1 where 0F0 comes next"),
        (["0F0 0B1"], "0B1 where 0B0 comes next"),
        (["0F0 0B0", "0F0"], "1F0 comes next"),
        (["0F0 zz"], "not an action"),
    ],
)
def test_actions_out_of_sequence_are_refused_naming_the_action(
    lines: list[str], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        Order.parse_actions(lines)


def test_a_violation_says_position_and_rule() -> None:
    assert Violation(1, 3, 2, "why").message() == "position 3: breaks rule 2 (no deadlock): why"
    assert Violation(0, None, "count", "why").message() == "breaks rule count: why"


@PROPERTY
@given(
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=12),
    samples=st.lists(st.integers(0, 120), max_size=12),
)
def test_holders_finds_each_samples_holder_as_holder_does(
    sizes: list[int], samples: list[int]
) -> None:
    """One search for many samples (the simulator's, per stage) gives :func:`holder`'s
    microbatches, past the last one too."""
    prefix = prefix_sums(sizes)
    assert holders(prefix, samples) == [holder(prefix, x) for x in samples]
