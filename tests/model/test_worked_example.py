"""The worked example of docs/model.md, computed by hand, and small hand-checked cases."""

from __future__ import annotations

import math

import pytest

from tidgap import Link, Plan, Problem, Stage, affine, evaluate, gpipe, one_f_one_b, table


def worked_problem() -> Problem:
    """``S = 2, B = 2``, ``Tf(b) = b``, ``Tb(b) = 2b``, free links."""
    stage = Stage(forward=affine(0, 1), backward=affine(0, 2))
    return Problem(
        batch_size=2,
        stages=[stage, stage],
        links=[Link(forward=affine(0, 0), backward=affine(0, 0))],
    )


def test_worked_example_plan() -> None:
    result = evaluate(worked_problem(), Plan.of([[1, 1], [2]], [[2], [1, 1]]))
    # stage 0 forwards end at 1, 2; stage 1 needs sample 2 (arrives at 2) and ends at 4.
    assert result.forward_ends == [2, 4]
    assert result.forward_end == 4
    # stage 1 backwards end at 6, 8; stage 0 waits for both gradients (8), ends at 12.
    assert result.backward_ends == [12, 8]
    assert result.iteration_time == 12


def test_worked_example_baselines() -> None:
    assert gpipe(worked_problem(), 2) == 9
    assert one_f_one_b(worked_problem(), 2) == 9


def test_link_serialises_transfers_in_send_order() -> None:
    """Two 1-sample microbatches over a link costing 5 each: the second waits for the first."""
    stage = Stage(forward=affine(0, 1), backward=affine(0, 0))
    problem = Problem(
        batch_size=2,
        stages=[stage, stage],
        links=[Link(forward=affine(5, 0), backward=affine(0, 0))],
    )
    result = evaluate(problem, Plan.of([[1, 1], [1, 1]], [[2], [2]]))
    # arrivals at 1+5 = 6 and max(2, 6)+5 = 11; stage 1 ends at 7, then 12.
    assert result.forward_ends == [2, 12]


def test_table_interpolates_linearly_and_refuses_to_extrapolate() -> None:
    function = table([2, 6], [1.0, 3.0])
    assert function(2) == 1.0
    assert function(4) == pytest.approx(2.0)
    assert function(6) == 3.0
    with pytest.raises(ValueError):
        function(7)
    assert function.domain == (2.0, 6.0)
    assert affine(1, 2).domain == (0.0, math.inf)


def test_tail_counts_after_the_last_backward() -> None:
    stage = Stage(forward=affine(0, 1), backward=affine(0, 1), tail=10)
    problem = Problem(batch_size=1, stages=[stage])
    assert evaluate(problem, Plan.of([[1]], [[1]])).iteration_time == 12
