"""NumPy's values in the Python API (input-rules.md: "NumPy integers are integers in plans,
problems ... and every integer argument"; a NumPy bool is no integer): problems, stages,
links and time functions built from NumPy values equal those built from Python's."""

from __future__ import annotations

import numpy as np
import pytest

import tidgap
from tidgap import InputError, Link, Problem, Stage


def _problem(number: type, array: bool) -> Problem:
    sizes, times = [1, 2, 4, 8], [1.0, 2.0, 3.5, 6.0]
    if array:
        table = tidgap.table(np.array(sizes), np.array(times))
    else:
        table = tidgap.table([number(s) for s in sizes], times)
    stage = Stage(forward=table, backward=table, max_microbatch=number(4))
    link = Link(forward=tidgap.affine(0.1, 0.0), backward=tidgap.affine(0.1, 0.0))
    return Problem(
        name="np", batch_size=number(8), unit=number(1), stages=[stage] * 2, links=[link]
    )


@pytest.mark.parametrize("number", [np.int64, np.int32, np.uint16])
@pytest.mark.parametrize("array", [False, True])
def test_numpy_integers_build_the_same_problem(number: type, array: bool) -> None:
    problem = _problem(number, array)
    assert problem == _problem(int, False)
    assert type(problem.batch_size) is int and type(problem.stages[0].max_microbatch) is int
    assert tidgap.evaluate(problem, tidgap.gpipe_plan(problem, 2)).iteration_time > 0


def test_a_numpy_bool_is_no_integer() -> None:
    with pytest.raises(InputError, match=r"table: sizes\[0\]"):
        tidgap.table(np.array([True, False]), [1.0, 2.0])
