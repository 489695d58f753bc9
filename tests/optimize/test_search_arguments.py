"""The Python API refuses bad search arguments with :class:`tidgap.InputError` naming the
argument, as the command line does its options: a stopping rule that would never stop (a
NaN time limit ran forever), a population or microbatch cap below its least, a memory
limit that is not ``"1f1b"``, a size or a positive number of bytes."""

from __future__ import annotations

import math

import pytest

import tidgap

TINY = "example:tiny-2"


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("time_limit", math.nan),
        ("time_limit", -1.0),
        ("generations", -1),
        ("stagnation", 0),
        ("population", 7),
        ("max_microbatches", 0),
        ("memory_limit", 0),
        ("memory_limit", -5),
        ("memory_limit", 2.5),
        ("memory_limit", True),
        ("memory_limit", "lots"),
    ],
)
def test_a_bad_argument_is_refused_naming_it(argument: str, value: object) -> None:
    arguments = {"generations": 1, "population": 8, argument: value}  # stops if taken
    with pytest.raises(tidgap.InputError, match=f"^{argument}: "):
        tidgap.search(tidgap.load_problem(TINY), **arguments)


def test_a_memory_limit_may_be_a_size_or_the_word_in_any_case() -> None:
    document = tidgap.load_problem(TINY).model_dump(exclude_none=True)
    for stage in document["stages"]:
        stage["activation_bytes"] = 2**20  # a MiB per sample
    problem = tidgap.Problem.from_dict(document)
    sized = tidgap.search(problem, generations=1, population=8, memory_limit="5MiB")
    assert max(sized.evaluation.peak_held) <= 5
    worded = tidgap.search(problem, generations=1, population=8, memory_limit="1F1B")
    assert worded.memory_limit.label == "1F1B"
