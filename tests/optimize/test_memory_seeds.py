"""Seeds within tight memory limits (tidgap.optimize.memory_seeds): 1F1B with fewer
microbatches in flight is a valid plan within its level, a search finds a plan within
every limit that leaves each stage one unit, and a limit below one unit is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidgap import InputError, Problem, evaluate, load_problem
from tidgap.optimize.driver import search
from tidgap.optimize.limits import MemoryLevel, stage_level
from tidgap.optimize.memory_seeds import (
    OneFOneBHolding,
    capped_one_f_one_b,
    fastest_one_f_one_b_within,
    fewest_within,
    in_flight,
    one_f_one_b_held,
    require_room,
)
from tidgap.profiling.synth import synth_problem
from tidgap.schedules.baselines import feasible_microbatch_counts, one_f_one_b_plan

EXAMPLES = settings(max_examples=40, deadline=None, derandomize=True, database=None)


def limited(problem: Problem, held: list[int], activation_bytes: float = 1000.0) -> Problem:
    """``problem`` with ``activation_bytes`` on every stage and a ``memory_limit`` of
    ``held[s]`` samples on stage ``s``."""
    return Problem.from_dict(limited_document(problem, held, activation_bytes))


def limited_document(problem: Problem, held: list[float], activation_bytes: float) -> dict:
    """:func:`limited`'s problem document."""
    document = problem.model_dump(mode="json", exclude_none=True)
    for stage, samples in zip(document["stages"], held, strict=True):
        stage["activation_bytes"] = activation_bytes
        stage["memory_limit"] = samples * activation_bytes
    return document


@st.composite
def problems_and_levels(draw: st.DrawFn) -> tuple[Problem, MemoryLevel]:
    """A random network (2-6 stages, unit 1 or 2) and a level of at least one unit a stage."""
    stages = draw(st.integers(2, 6))
    unit = draw(st.sampled_from([1, 2]))
    batch = unit * draw(st.integers(2, 12))
    seed = draw(st.integers(0, 10**6))
    problem = Problem.from_dict(synth_problem(seed, stages=stages, batch_size=batch, unit=unit))
    held = draw(st.lists(st.integers(unit, batch), min_size=stages, max_size=stages))
    return problem, MemoryLevel("test", tuple(held))


@EXAMPLES
@given(problems_and_levels(), st.integers(1, 24))
def test_capped_seeds_are_valid_plans_within_their_level(
    case: tuple[Problem, MemoryLevel], most: int
) -> None:
    """Every seed is a valid plan (evaluate checks its order's rules) holding at most the
    level on each stage; where no 1F1B(m) fits, there is one for each count from the
    fewest that fits up to ``most``."""
    problem, level = case
    plans = capped_one_f_one_b(problem, level, most)
    for plan in plans:
        assert level.admits(evaluate(problem, plan).peak_held), (plan, level)
    counts = np.asarray([m for m in feasible_microbatch_counts(problem) if m <= most], np.int64)
    if OneFOneBHolding(problem).fits(level, counts).any():
        assert plans == []
    else:
        top = min(most, problem.num_units)
        assert [len(plan.forward[0]) for plan in plans] == list(
            range(fewest_within(problem, level), top + 1)
        )


@EXAMPLES
@given(problems_and_levels())
def test_one_f_one_b_fits_as_evaluate_counts_its_samples(case: tuple[Problem, MemoryLevel]) -> None:
    problem, level = case
    counts = np.asarray(feasible_microbatch_counts(problem), np.int64)
    fits = OneFOneBHolding(problem).fits(level, counts)
    for m, fit in zip(counts, fits, strict=True):
        held = evaluate(problem, one_f_one_b_plan(problem, int(m))).peak_held
        assert fit == level.admits(held), m


def test_in_flight_never_grows_down_the_pipeline() -> None:
    """At most ``S - s`` and ``held // size`` on each stage, and no more than the stage
    before (else a stage would wait for a forward its upstream has not run)."""
    problem = load_problem("example:hetero-8")
    level = MemoryLevel("test", (16, 64, 8, 64, 64, 64, 64, 64))
    assert in_flight(problem, level, 8) == [2, 2, 1, 1, 1, 1, 1, 1]
    assert in_flight(problem, MemoryLevel("test", (256,) * 8), 8) == [8, 7, 6, 5, 4, 3, 2, 1]
    assert in_flight(problem, level, 16)[2:] == [0] * 6


def test_a_search_finds_a_plan_within_one_unit_on_every_stage() -> None:
    """Each stage may hold one microbatch of one unit: no 1F1B or GPipe fits, and random
    orders almost never do (before these seeds the search ended with no plan)."""
    example = load_problem("example:hetero-8")
    problem = limited(example, [example.unit] * example.num_stages)
    result = search(problem, seed=0, generations=4, population=32)
    reference = evaluate(problem, result.plan)
    assert reference == result.evaluation
    assert reference.peak_held == [problem.unit] * problem.num_stages
    assert not any(reference.over_memory_limit or [])


def test_a_limit_in_bytes_of_one_unit_finds_a_plan_too() -> None:
    example = load_problem("example:hetero-8")
    problem = limited(example, [example.batch_size] * example.num_stages, 1000.0)
    result = search(problem, seed=0, generations=4, population=32, memory_limit=1000 * 8)
    assert max(evaluate(problem, result.plan).peak_held) <= problem.unit


def test_a_stage_limit_below_one_unit_is_refused_on_that_stage() -> None:
    example = load_problem("example:hetero-8")
    held = [example.batch_size] * example.num_stages
    held[3] = example.unit - 1
    with pytest.raises(InputError) as caught:
        require_room(limited(example, held), None)
    assert caught.value.path == ("stages", 3, "memory_limit")
    assert "7 samples" in str(caught.value) and "unit 8" in str(caught.value)
    require_room(limited(example, [example.unit] * 8), "1f1b")  # one unit is room enough


def test_a_byte_limit_below_one_unit_is_refused_on_the_option() -> None:
    problem = limited(load_problem("example:hetero-8"), [256] * 8, 1000.0)
    with pytest.raises(InputError) as caught:
        require_room(problem, 7999)
    assert caught.value.source == "memory_limit" and "7 samples" in str(caught.value)
    require_room(problem, 8000)
    assert stage_level(problem).held == (256,) * 8


def test_a_limit_that_needs_more_microbatches_than_the_default_width_widens_it() -> None:
    """One sample a stage of a 100-sample batch needs 100 microbatches a stage (the
    chromosome holds 64 unless a plan needs more)."""
    network = Problem.from_dict(synth_problem(3, stages=3, batch_size=100, unit=1))
    problem = limited(network, [1, 1, 1])
    result = search(problem, seed=0, generations=2, population=16)
    assert [len(sizes) for sizes in result.plan.forward] == [100] * 3
    assert evaluate(problem, result.plan).peak_held == [1, 1, 1]


def test_too_few_microbatches_for_the_limit_are_refused_on_the_option() -> None:
    """Two units a stage of a 32-unit batch take 16 microbatches a stage: asked for at most
    8, the search refuses before its generations (it would end with no plan)."""
    example = load_problem("example:hetero-8")
    problem = limited(example, [2 * example.unit] * example.num_stages)
    with pytest.raises(InputError) as caught:
        search(problem, seed=0, generations=50, population=32, max_microbatches=8)
    assert caught.value.source == "max_microbatches"
    assert str(caught.value).endswith("that takes at least 16")
    found = search(problem, seed=0, generations=2, population=32, max_microbatches=16)
    assert max(evaluate(problem, found.plan).peak_held) <= 2 * example.unit


@EXAMPLES
@given(seed=st.integers(0, 10**6), stages=st.integers(1, 6), batch=st.integers(1, 120))
def test_one_f_one_b_held_is_what_1f1b_holds(seed: int, stages: int, batch: int) -> None:
    """The vectorised held samples of every count equal the evaluator's peaks."""
    problem = Problem.from_dict(synth_problem(seed, stages, batch, 1, 0.5, "affine", "h"))
    counts = np.asarray(feasible_microbatch_counts(problem), np.int64)
    held = one_f_one_b_held(problem, counts)
    for m, row in zip(counts, held, strict=True):
        assert row.tolist() == list(evaluate(problem, one_f_one_b_plan(problem, int(m))).peak_held)


def test_a_limit_admits_a_1f1b_wider_than_the_default_width_and_the_search_keeps_it() -> None:
    """9 samples of 1000 bytes a stage admit 1F1B(98) (3 stages of 294 samples) and no count
    the default width (64) holds: the search returned a plan 40.5% slower (536.5 against
    381.8 ms), with --memory-limit and with the stages' own limits alike (an audit found 7
    of 40 byte-limited problems so). The fastest 1F1B within each level is seeded and
    the width holds it: never slower than it, within every level."""
    base = Problem.from_dict(synth_problem(0, 3, 294, 1, 0.5, "affine", "width"))
    problem = limited(base, [9, 9, 9])
    best = fastest_one_f_one_b_within(problem, stage_level(problem))
    assert best is not None and best.microbatches == 98
    for limit in (None, 9000):
        result = search(problem, seed=0, generations=5, memory_limit=limit)
        assert result.evaluation.iteration_time <= best.iteration_time * (1 + 1e-12)
        for point in result.tradeoff:
            fastest = fastest_one_f_one_b_within(problem, point.level)
            if fastest is not None and point.evaluation is not None:
                assert point.evaluation.iteration_time <= fastest.iteration_time * (1 + 1e-12)


@pytest.mark.parametrize("name", ["med7_1", "linkheavy7"])
def test_run_priced_the_fastest_1f1b_within_a_level_is_the_runs_fastest(name: str) -> None:
    """With order tables a run prices 1F1B(m) otherwise than the model: the fastest within
    a level was the model's (on med7_1 another count in 8 of its 45 levels), and a
    run-priced search was not held to the run's fastest."""
    from tests.conftest import golden_cases
    from tests.support.calibrations import order_tables
    from tidgap.runtime.pricing import run_evaluation

    data = next(c["problem"] for c in golden_cases() if c["problem"]["name"] == name)
    data["source"] = {"calibration": {"order": order_tables(data["stages"])}}
    problem = Problem.from_dict(data)
    counts = np.asarray(feasible_microbatch_counts(problem), np.int64)
    held = one_f_one_b_held(problem, counts)
    run = [
        run_evaluation(problem, one_f_one_b_plan(problem, int(m))).iteration_time for m in counts
    ]
    for limit in held:
        level = MemoryLevel("limit", tuple(int(h) for h in limit))
        fits = (held <= limit).all(axis=1)
        best = min(np.flatnonzero(fits), key=lambda i: (run[i], counts[i]))
        found = fastest_one_f_one_b_within(problem, level, "run")
        assert found is not None
        assert (found.microbatches, found.iteration_time) == (counts[best], run[best])


def test_the_best_1f1b_given_is_the_fastest_within_a_level_that_holds_it_untimed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Given the best 1F1B over every count, a level that admits it returns it without
    timing the counts again (4 levels at 512 stages timed them for 3.5 s); one that does not
    admit it times them as before."""
    import tidgap.optimize.memory_seeds as memory_seeds

    problem = Problem.from_dict(synth_problem(0, 6, 96, 1, 0.5, "affine", "h"))
    best = memory_seeds.best_baselines(problem)["1f1b"]
    held = one_f_one_b_held(problem, np.asarray([best.microbatches], np.int64))[0]
    admitting = MemoryLevel("1F1B", tuple(int(h) for h in held))
    tighter = MemoryLevel("less", tuple(int(h) - 1 for h in held))
    assert fastest_one_f_one_b_within(problem, admitting) == best
    expected = fastest_one_f_one_b_within(problem, tighter)
    assert expected is not None and expected != best
    with monkeypatch.context() as patched:
        patched.setattr(memory_seeds, "best_baselines", None)  # calling it fails
        assert fastest_one_f_one_b_within(problem, admitting, best=best) == best
    assert fastest_one_f_one_b_within(problem, tighter, best=best) == expected
