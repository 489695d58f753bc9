"""The Python API refuses arguments of the wrong kind with one clear error (an
:class:`InputError` naming the argument, or a ``TypeError`` saying what it wants), never
a ``ZeroDivisionError``, a screen of pydantic errors or a search that runs anyway."""

from __future__ import annotations

from typing import Any

import pytest

import tidgap
from tidgap import InputError


@pytest.fixture(scope="module")
def tiny() -> tidgap.Problem:
    return tidgap.load_problem("example:tiny-2")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"seed": "a"}, "seed: must be an integer (got 'a')"),
        ({"generations": 1.5}, "generations: must be an integer (got 1.5)"),
        ({"generations": True}, "generations: must be an integer (got True)"),
        ({"population": 8.0}, "population: must be an integer (got 8.0)"),
        ({"stagnation": 0}, "stagnation: must be at least 1 (got 0)"),
    ],
)
def test_search_refuses_arguments_of_the_wrong_kind(
    tiny: tidgap.Problem, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError) as caught:
        tidgap.search(tiny, **{"generations": 1, **options})
    assert str(caught.value) == message


@pytest.mark.parametrize("problem", [None, "example:tiny-2"])
def test_search_wants_a_problem(problem: Any) -> None:
    with pytest.raises(TypeError, match="problem must be a tidgap.Problem"):
        tidgap.search(problem, generations=1)


@pytest.mark.parametrize("m", [0, 9])
@pytest.mark.parametrize("baseline", [tidgap.gpipe, tidgap.one_f_one_b])
def test_a_baseline_count_outside_the_batch_is_one_error(
    tiny: tidgap.Problem, baseline: Any, m: int
) -> None:
    with pytest.raises(InputError) as caught:
        baseline(tiny, m)
    assert str(caught.value) == f"m: {m} is outside 1..8"


def test_a_plan_of_the_wrong_shape_is_one_line() -> None:
    with pytest.raises(InputError) as caught:
        tidgap.Plan.of([[1, 2]], [[3, "x"]])
    assert str(caught.value) == 'plan: backward[0][1]: must be an integer (got "x")'
