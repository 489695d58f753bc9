"""Memory limits in samples (tidgap.optimize.limits): parsing ``--memory-limit``, the most
samples within a byte limit (as evaluate counts them), levels and the penalised fitness."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidgap import Link, Problem, Stage, affine
from tidgap.backends.evaluator import INVALID
from tidgap.model.errors import InputError
from tidgap.optimize.limits import (
    OVER_LIMIT,
    MemoryLevel,
    bytes_level,
    capped,
    held_within,
    limit_in_force,
    parse_memory_limit,
    penalised,
    scaled,
    stage_level,
    tradeoff_levels,
)
from tidgap.schedules.held import peak_memory, within_limit

EXAMPLES = settings(max_examples=80, deadline=None, derandomize=True, database=None)
BYTES = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1f1b", "1f1b"),
        ("1F1B", "1f1b"),
        (" 1f1b ", "1f1b"),
        ("80GB", 80 * 10**9),
        ("24GiB", 24 * 2**30),
        ("1000", 1000),
    ],
)
def test_memory_limits_parse(text: str, expected: str | int) -> None:
    assert parse_memory_limit(text) == expected


@pytest.mark.parametrize(
    "text", ["lots", "1f1c", "", "0", "0GB", "-1G", "1" + "0" * 300 + "GB", "1" + "0" * 400, "1e19"]
)
def test_bad_memory_limits_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_memory_limit(text)
    assert "\n" not in str(caught.value)


def test_a_limit_under_one_byte_says_so() -> None:
    with pytest.raises(ValueError, match=r"^'0\.4' is less than 1 byte$"):
        parse_memory_limit("0.4")


def brute_force_held(limit: float, activation_bytes: float, batch_size: int) -> int:
    """The most ``h`` in ``0..batch_size`` whose ``h * activation_bytes`` evaluate counts
    within ``limit`` (:func:`~tidgap.schedules.held.within_limit`), counting."""
    return max(h for h in range(batch_size + 1) if within_limit(h * activation_bytes, limit))


@pytest.mark.parametrize(
    ("limit", "activation_bytes", "batch_size", "expected"),
    [
        (6.0, 2.0, 8, 3),  # exactly at the limit is within it
        (5.999, 2.0, 8, 2),
        (1.5, 0.5, 8, 3),
        (0.3, 0.1, 8, 3),  # 3 * 0.1 == 0.30000000000000004: at 0.3, as evaluate says
        (0.3 - 1e-9, 0.1, 8, 2),
        (3 * 0.1, 0.1, 8, 3),
        (44 * 0.03, 0.03, 50, 44),  # the quotient 43.999...: the product decides
        (1.0, 3.0, 8, 0),
        (100.0, 1.0, 8, 8),  # never more than the batch
        (1.0, 0.0, 8, 8),  # a sample that takes no memory
    ],
)
def test_held_within_at_the_boundaries(
    limit: float, activation_bytes: float, batch_size: int, expected: int
) -> None:
    assert held_within(limit, activation_bytes, batch_size) == expected


def test_held_within_a_limit_many_samples_above_the_batch() -> None:
    """A valid problem may give ``activation_bytes`` 1e-300 and ``memory_limit`` 1e10."""
    assert held_within(1e10, 1e-300, 8) == 8


@given(BYTES, BYTES, st.integers(1, 200))
@example(0.3, 0.1, 8)  # 3 * 0.1 is 0.30000000000000004: at the limit, as evaluate says
@example(62.9, 3.7, 17)
@EXAMPLES
def test_held_within_is_the_most_samples_within_the_limit(
    limit: float, activation_bytes: float, batch_size: int
) -> None:
    assert held_within(limit, activation_bytes, batch_size) == brute_force_held(
        limit, activation_bytes, batch_size
    )


@given(st.integers(0, 200), BYTES, st.integers(1, 200))
@EXAMPLES
def test_a_limit_of_exactly_h_samples_holds_h(held: int, activation_bytes: float, batch: int):
    """A limit that is a product ``h * activation_bytes`` admits ``h`` samples (those
    boundaries are where rounding decides; independent draws almost never hit them)."""
    limit = held * activation_bytes
    assert (
        held_within(limit, activation_bytes, batch)
        == brute_force_held(limit, activation_bytes, batch)
        >= min(held, batch)
    )


def memory_problem(batch_size: int, memory: list[tuple[float | None, float | None]]) -> Problem:
    """A problem of ``len(memory)`` stages, stage ``s`` with ``(activation_bytes,
    memory_limit) = memory[s]`` (times do not matter)."""
    time = affine(1.0, 0.5)
    return Problem(
        batch_size=batch_size,
        unit=1,
        stages=[
            Stage(forward=time, backward=time, activation_bytes=held, memory_limit=limit)
            for held, limit in memory
        ],
        links=[Link(forward=time, backward=time) for _ in range(len(memory) - 1)],
    )


@st.composite
def problems_with_memory(draw: st.DrawFn) -> Problem:
    """1..5 stages, a batch of 1..50, random ``activation_bytes``, ``memory_limit`` on some."""
    limits = st.none() | st.floats(min_value=1e-3, max_value=2e4, allow_nan=False)
    memory = draw(st.lists(st.tuples(BYTES, limits), min_size=1, max_size=5))
    return memory_problem(draw(st.integers(1, 50)), memory)


@given(problems_with_memory())
@EXAMPLES
def test_stage_level_is_what_evaluate_calls_within(problem: Problem) -> None:
    """Holding ``held[s]`` is within every stage's limit; one sample more is over it."""
    batch_size = problem.batch_size
    held = stage_level(problem).held
    assert peak_memory(problem, list(held))[1] == []
    for s, stage in enumerate(problem.stages):
        if stage.memory_limit is None or held[s] == batch_size:
            assert held[s] == batch_size
            continue
        more = list(held)
        more[s] += 1
        assert peak_memory(problem, more)[1] == [s]


def test_a_limit_in_bytes_needs_activation_bytes() -> None:
    problem = memory_problem(8, [(None, None)] * 3)
    with pytest.raises(InputError) as caught:
        bytes_level(problem, 10**9)
    assert caught.value.source == "memory_limit"  # the Python argument (the CLI maps it)
    assert str(caught.value).startswith("memory_limit: ") and "--" not in str(caught.value)
    assert "activation_bytes" in str(caught.value)
    with pytest.raises(InputError):
        limit_in_force(problem, 10**9, MemoryLevel("1F1B", (8, 8, 8)))


@st.composite
def levels_case(draw: st.DrawFn) -> tuple[Problem, MemoryLevel, MemoryLevel]:
    """``(problem, one_f_one_b, in_force)``: a problem with memory, a random 1F1B level and
    the level in force for a random ``--memory-limit`` (none, ``1f1b`` or bytes)."""
    problem = draw(problems_with_memory())
    stages, samples = problem.num_stages, st.integers(1, problem.batch_size)
    held = tuple(draw(samples) for _ in range(stages))
    one_f_one_b = MemoryLevel("1F1B", held, bound=held)
    requested = draw(st.none() | st.just("1f1b") | st.integers(1, 20000))
    return problem, one_f_one_b, limit_in_force(problem, requested, one_f_one_b)


@given(levels_case())
@EXAMPLES
def test_the_stages_own_limits_cap_every_level(
    case: tuple[Problem, MemoryLevel, MemoryLevel],
) -> None:
    problem, one_f_one_b, in_force = case
    own = stage_level(problem).held
    for level in [in_force, *tradeoff_levels(problem, in_force, one_f_one_b)]:
        assert all(h <= o for h, o in zip(level.held, own, strict=True)), level


@given(levels_case())
@EXAMPLES
def test_every_level_keeps_every_byte_limit_in_force(
    case: tuple[Problem, MemoryLevel, MemoryLevel],
) -> None:
    """Each stage's own ``memory_limit`` (and the level in force's byte limit) stays a byte
    limit of every level, also where a level's samples bind there: a search counting memory
    as ``tidgap run`` holds it compares with the bytes (a tie of the best 1F1B's samples
    with a stage's limit in samples dropped the stage's bytes: the 1F1B's graphs, over
    them, were admitted)."""
    problem, one_f_one_b, in_force = case
    for level in [in_force, *tradeoff_levels(problem, in_force, one_f_one_b)]:
        for s, stage in enumerate(problem.stages):
            if stage.memory_limit is not None:
                assert level.bytes_cap is not None, level
                assert level.bytes_cap[s] <= stage.memory_limit, (level, s)
            if in_force.bytes_cap is not None and level is in_force:
                assert level.bytes_cap[s] <= in_force.bytes_cap[s]


def test_the_best_1f1bs_samples_bind_beside_every_byte_limit() -> None:
    """Capped by a stage's limit of as many samples, or of fewer, the 1F1B level keeps both
    bounds (as ``tidgap run`` holds plans, a stage's bytes may allow more than the best
    1F1B holds though fewer of its samples); a factor above 1 that reaches the whole batch
    binds nothing there."""
    one_f_one_b = MemoryLevel("1F1B", (3, 2, 12), bound=(3, 2, 12))
    stages = MemoryLevel("stage memory_limit", (3, 12, 12), (1000.0, math.inf, math.inf))
    level = capped(one_f_one_b, stages)
    assert level.held == (3, 2, 12)
    assert level.bytes_cap == (1000.0, math.inf, math.inf)
    assert level.bound == (3, 2, 12)
    double = scaled(one_f_one_b, 2.0, 12)
    assert double.held == (6, 4, 12) and double.bound == (6, 4, None)
    assert scaled(one_f_one_b, 1.0, 12).bound == (3, 2, 12)
    below = capped(one_f_one_b, MemoryLevel("8 kB", (2, 3, 12), (800.0,) * 3))
    assert below.held == (2, 2, 12) and below.bytes_cap == (800.0,) * 3
    assert below.bound == (3, 2, 12)
    assert capped(stages, MemoryLevel("8 kB", (2, 3, 12), (800.0,) * 3)).bound is None


@given(levels_case())
@EXAMPLES
def test_tradeoff_levels_are_sorted_distinct_and_hold_the_one_in_force(
    case: tuple[Problem, MemoryLevel, MemoryLevel],
) -> None:
    problem, one_f_one_b, in_force = case
    levels = tradeoff_levels(problem, in_force, one_f_one_b)
    assert in_force in levels
    assert len({level.held for level in levels}) == len(levels)
    keys = [(sum(level.held), level.held) for level in levels]
    assert keys == sorted(keys)
    assert stage_level(problem).held in {level.held for level in levels}


@given(
    st.integers(1, 4).flatmap(
        lambda stages: st.tuples(
            st.lists(st.integers(0, 20), min_size=stages, max_size=stages),
            st.lists(
                st.tuples(
                    st.integers(0, 2**50),
                    st.lists(st.integers(0, 30), min_size=stages, max_size=stages),
                ),
                min_size=2,
                max_size=30,
            ),
        )
    )
)
@EXAMPLES
def test_penalised_ranks_within_limit_first_then_by_samples_over(
    case: tuple[list[int], list[tuple[int, list[int]]]],
) -> None:
    held, plans = case
    times = np.array([time for time, _ in plans], dtype=np.int64)
    peaks = np.array([peak for _, peak in plans], dtype=np.int64)
    fitness = penalised(times, peaks, np.array(held, dtype=np.int64))
    over = np.maximum(peaks - np.array(held), 0).sum(axis=1)
    within = over == 0
    np.testing.assert_array_equal(fitness[within], times[within])
    if within.any() and (~within).any():
        assert fitness[within].max() < fitness[~within].min()
    np.testing.assert_array_equal(fitness[~within], OVER_LIMIT + over[~within])
    kept = penalised(np.full(2, INVALID), peaks[:2], np.array(held, dtype=np.int64))
    np.testing.assert_array_equal(kept, [INVALID, INVALID])
