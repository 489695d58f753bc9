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
        ("same_partition", "yes"),
        ("checkpoint", 5),
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


def test_numpy_values_are_written_as_plain_json(tmp_path) -> None:
    """NumPy integers and bools go into the state file and the plan as plain JSON (a
    checkpoint failed after the whole search: 'int64 is not JSON serializable')."""
    import numpy as np

    state = tmp_path / "s.state"
    result = tidgap.search(
        tidgap.load_problem("example:vgg16"), generations=3, population=16, backend="numpy",
        max_microbatches=np.int64(16), same_partition=np.bool_(True), checkpoint=str(state),
    )  # fmt: skip
    assert result.plan_document()["search"]["seed"] == 0
    from tidgap.optimize.checkpoint import load_state

    assert load_state(state).meta["max_microbatches"] == 16


def test_initial_plans_may_be_a_generator() -> None:
    """A generator's plans seed the search (the checks used them up: silently dropped)."""
    problem = tidgap.load_problem("example:hetero-8")
    seed = tidgap.search(problem, generations=3, population=16, seed=4).plan
    options = dict(generations=2, population=16, seed=1)
    as_list = tidgap.search(problem, initial_plans=[seed], **options)
    as_generator = tidgap.search(problem, initial_plans=(p for p in [seed]), **options)
    assert as_generator.plan == as_list.plan


def test_a_checkpoint_that_cannot_be_written_is_refused_before_the_search(tmp_path) -> None:
    with pytest.raises(tidgap.InputError, match="does not exist"):
        tidgap.Optimizer(tidgap.load_problem(TINY), checkpoint=str(tmp_path / "no" / "s.state"))


@pytest.mark.parametrize("plans", [None, 5, tidgap.Plan.of([[8]] * 2, [[8]] * 2)])
def test_initial_plans_must_be_a_sequence(plans: object) -> None:
    with pytest.raises(TypeError, match="initial_plans must be a sequence of tidgap.Plan"):
        tidgap.search(tidgap.load_problem(TINY), generations=1, initial_plans=plans)


@pytest.mark.parametrize("limit", [2**63, 10**100, 10**310], ids=["2^63", "1e100", "1e310"])
def test_a_memory_limit_past_a_byte_count_is_refused_as_in_text(limit: int) -> None:
    """As ``"9.3e18"`` is: 10**310 raised ``OverflowError`` from the limit's float, and
    10**100 was searched and saved in a state file its resume refused."""
    document = tidgap.load_problem(TINY).model_dump(exclude_none=True)
    for stage in document["stages"]:
        stage["activation_bytes"] = 1000
    problem = tidgap.Problem.from_dict(document)
    with pytest.raises(tidgap.InputError, match=r"^memory_limit: too large: .*2\*\*63 - 1 bytes"):
        tidgap.search(problem, generations=1, population=8, memory_limit=limit)
    tidgap.search(problem, generations=1, population=8, memory_limit=2**63 - 1)


@pytest.mark.parametrize("schedule", ["windowed", "flush"])
@pytest.mark.parametrize(("answer", "reason"), [(True, "interrupted"), ("stop", "stop")])
def test_interrupted_may_answer_a_bool_or_a_name(
    schedule: str, answer: object, reason: str
) -> None:
    """``threading.Event().is_set`` as ``interrupted``: ``True`` ended the search in
    ``TypeError: stop_reason must be a str`` after its whole setup; ``False`` goes on."""
    problem = tidgap.load_problem(TINY)
    stopped = tidgap.search(
        problem, schedule=schedule, generations=50, population=8, interrupted=lambda: answer
    )
    assert stopped.stop_reason == reason and stopped.generations == 0
    going = tidgap.search(
        problem, schedule=schedule, generations=3, population=8, interrupted=lambda: False
    )
    assert going.stop_reason == "generations" and going.generations == 3


@pytest.mark.parametrize("answer", ["", 1, 0.0, ["SIGINT"]])
def test_interrupted_answering_anything_else_is_refused_naming_it(answer: object) -> None:
    with pytest.raises(TypeError, match=r"^interrupted\(\) must return None, a bool or"):
        tidgap.search(
            tidgap.load_problem(TINY), generations=3, population=8, interrupted=lambda: answer
        )
