"""The setup's fast paths against their plain-Python references, bit for bit: vectorised time
functions, batched baselines, compiled global DP, tick tables, and the lower bound's exact
and relaxed totals (tidgap.fallback_cpu.setup_loops)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.outliers import with_outlier
from tests.support.strategies import plans, problems, time_functions
from tidgap import Link, Problem, Stage, affine, best_baselines, equal_partition, evaluate
from tidgap.analysis import bound as bound_module
from tidgap.analysis.bound import (
    candidate_sizes,
    least_total,
    lower_bound,
    relaxed_total,
    step_times,
)
from tidgap.analysis.exhaustive import flush_optimum
from tidgap.backends.ticks import CEILING_FACTOR, choose_tick, tick_problem
from tidgap.fallback_cpu.setup_loops import warm_up
from tidgap.model.timefn import TimeFunction, table
from tidgap.optimize.heuristics import (
    backward_chain,
    chain_dp,
    compiled_chain_dps,
    forward_chain,
    local_microbatches,
)
from tidgap.profiling.synth import synth_problem
from tidgap.schedules import baselines as baselines_module
from tidgap.schedules.baselines import (
    BASELINE_ROWS,
    baseline_bounds,
    baseline_times,
    count_tables,
    gpipe_plan,
)
from tidgap.schedules.families import BASELINE_NAMES, SCHEDULES

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None)

#: Synthetic problems whose counts fill several lane blocks, with counts below ``S - 1`` (one
#: block each), remainders, a unit above 1 and a cap (so the counts start above 1).
SYNTH = [
    dict(seed=1, stages=20, batch_size=50, unit=1, shape="table"),
    dict(seed=2, stages=9, batch_size=300, unit=3, shape="saturating"),
    dict(seed=3, stages=33, batch_size=40, unit=2, shape="affine"),
    dict(seed=4, stages=5, batch_size=200, unit=1, shape="table", cap=60),
]


def synth(seed: int, stages: int, batch_size: int, unit: int, shape: str, cap: int = 0) -> Problem:
    """A ``tidgap synth`` problem, every stage capped at ``cap`` samples when ``cap`` > 0."""
    data = synth_problem(seed, stages, batch_size, unit, heterogeneity=0.7, shape=shape)
    if cap:
        for stage in data["stages"]:
            stage["max_microbatch"] = cap
    return Problem.from_dict(data)


def golden_and_synth() -> list[Problem]:
    from tests.conftest import golden_cases

    cases = [Problem.from_dict(case["problem"]) for case in golden_cases()]
    return cases + [synth(**spec) for spec in SYNTH]


PROBLEMS = golden_and_synth()


def at_most(value: float, bound: float) -> bool:
    """``value <= bound`` up to rounding."""
    return value <= bound or math.isclose(value, bound, rel_tol=1e-12, abs_tol=1e-12)


def test_warm_up_compiles_everything() -> None:
    warm_up()


# --- TimeFunction.at -------------------------------------------------------------------


@PROPERTY
@given(data=st.data(), unit=st.integers(1, 3), largest=st.integers(1, 40))
def test_at_is_the_call_bit_for_bit(data: st.DataObject, unit: int, largest: int) -> None:
    function = data.draw(time_functions(unit, largest))
    sizes = np.arange(unit, largest + 1)
    values = function.at(sizes)
    assert values.dtype == np.float64 and values.shape == sizes.shape
    assert [float(v) for v in values] == [function(int(b)) for b in sizes]
    assert function.at(sizes.reshape(1, -1)).shape == (1, len(sizes))


def test_at_refuses_sizes_outside_the_table_like_call() -> None:
    function = table([2, 4], [1.0, 3.0])
    with pytest.raises(ValueError) as called:
        function(5)
    with pytest.raises(ValueError) as batched:
        function.at(np.array([2, 3, 5]))
    assert str(batched.value) == str(called.value)
    with pytest.raises(ValueError):
        function.at(np.array([1]))


# --- baselines -------------------------------------------------------------------------


def check_baselines(problem: Problem) -> None:
    """Every schedule with every feasible count equals its reference exactly, and is at
    least its count's lower bound; the best of each is the least time with the smallest
    count, also when a single count is timed before the bounds prune."""
    ms, times = baseline_times(problem)
    assert times.shape == (len(BASELINE_ROWS), len(ms))
    assert set(BASELINE_ROWS) == set(BASELINE_NAMES)
    for row, schedule in zip(times, BASELINE_ROWS, strict=True):
        expected = [SCHEDULES[schedule].time(problem, int(m)) for m in ms]
        assert row.tolist() == expected, schedule
    bounds = baseline_bounds(count_tables(problem, ms), problem.num_units)
    assert bounds.shape == times.shape
    for bound, time in zip(bounds.flat, times.flat, strict=True):
        assert at_most(float(bound), float(time))
    for first in (baselines_module.FIRST_COUNTS, 1):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(baselines_module, "FIRST_COUNTS", first)
            best = best_baselines(problem)
        for row, schedule in zip(times, BASELINE_ROWS, strict=True):
            least = min(row)
            assert best[schedule].iteration_time == least
            assert best[schedule].microbatches == ms[row.tolist().index(least)]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.name)
def test_baselines_equal_the_references(problem: Problem) -> None:
    check_baselines(problem)


@PROPERTY
@given(problem=problems(max_stages=12))
def test_baselines_equal_the_references_on_random_problems(problem: Problem) -> None:
    check_baselines(problem)


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.name)
def test_baseline_times_of_some_counts_are_those_of_every_count(problem: Problem) -> None:
    ms, every = baseline_times(problem)
    some, times = baseline_times(problem, ms[1::3])
    assert some.tolist() == ms[1::3].tolist()
    assert times.tolist() == every[:, 1::3].tolist()


@pytest.mark.parametrize("shape", ["affine", "saturating", "table"])
def test_best_baselines_of_a_large_batch_time_few_counts(shape: str) -> None:
    """4 stages of 20,000 units: the bounds leave under 0.5% of the steps (a count ``m``
    takes ``m`` per stage) to time, and the best of each schedule is the full scan's."""
    problem = Problem.from_dict(synth_problem(3, 4, 20_000, shape=shape))
    timed: list[int] = []
    real = baselines_module._timed

    def counting(tables: baselines_module.CountTables, units: int, *wanted: Any) -> np.ndarray:
        timed.append(int(tables.ms.sum()))
        return real(tables, units, *wanted)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(baselines_module, "_timed", counting)
        best = best_baselines(problem)
    ms, times = baseline_times(problem)
    assert 0 < sum(timed) < 0.005 * ms.sum()
    for row, schedule in zip(times, BASELINE_ROWS, strict=True):
        i = int(np.argmin(row))
        assert (best[schedule].microbatches, best[schedule].iteration_time) == (ms[i], row[i])


def test_ties_go_to_the_fewest_microbatches() -> None:
    """Free stages and links: every count takes 0, so the best of each schedule is ``m = 1``;
    with one constant-time stage, GPipe(m) is ``2m`` and ``m = 1`` wins alone."""
    free = affine(0, 0)
    stages = [Stage(forward=free, backward=free)] * 3
    tie = Problem(batch_size=6, stages=stages, links=[Link(forward=free, backward=free)] * 2)
    assert {r.microbatches for r in best_baselines(tie).values()} == {1}
    constant = Problem(batch_size=6, stages=[Stage(forward=affine(1, 0), backward=affine(1, 0))])
    assert best_baselines(constant)["gpipe"].iteration_time == 2.0


# --- heuristics ------------------------------------------------------------------------


def reference_local_microbatches(problem: Problem, s: int) -> int:
    """The estimate of :func:`local_microbatches` per count, on built partitions."""
    stage, cap = problem.stages[s], min(problem.forward_cap(s), problem.backward_cap(s))

    def estimate(m: int) -> float:
        largest = max(equal_partition(problem, m))
        return (m + problem.num_stages - 1) * (stage.forward(largest) + stage.backward(largest))

    counts = [m for m in range(1, problem.num_units + 1) if max(equal_partition(problem, m)) <= cap]
    return min(counts, key=lambda m: (estimate(m), m))


def check_heuristics(problem: Problem) -> None:
    unit, units = problem.unit, problem.num_units
    chains = [forward_chain(problem), backward_chain(problem)]
    assert compiled_chain_dps(chains, unit, units) == [chain_dp(c, unit, units) for c in chains]
    for s in range(problem.num_stages):
        assert local_microbatches(problem, s) == reference_local_microbatches(problem, s)


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.name)
def test_heuristics_equal_the_references(problem: Problem) -> None:
    check_heuristics(problem)


@PROPERTY
@given(problem=problems(max_stages=6))
def test_heuristics_equal_the_references_on_random_problems(problem: Problem) -> None:
    check_heuristics(problem)


# --- tick tables -----------------------------------------------------------------------


def reference_tables(problem: Problem) -> tuple[float, list[list[float]]]:
    """The tick and the four tables, one ``TimeFunction`` call per size, in float."""
    S, U, unit = problem.num_stages, problem.num_units, problem.unit

    def row(function: TimeFunction, cap: int) -> list[float]:
        values = [0.0] + [function(u * unit) for u in range(1, cap // unit + 1)]
        return values + [0.0] * (U + 1 - len(values))

    fcap, bcap = problem.forward_cap, problem.backward_cap
    rows = [row(stage.forward, fcap(s)) for s, stage in enumerate(problem.stages)]
    rows += [row(stage.backward, bcap(s)) for s, stage in enumerate(problem.stages)]
    rows += [row(link.forward, fcap(s)) for s, link in enumerate(problem.links)]
    rows += [row(link.backward, bcap(s + 1)) for s, link in enumerate(problem.links)]
    assert len(rows) == 4 * S - 2
    tails = sum(stage.tail for stage in problem.stages)
    cap = min(min(fcap(s), bcap(s)) for s in range(S)) // unit
    ceiling = CEILING_FACTOR * (serial_reference(rows, cap) + tails)
    if ceiling > 0:
        rows = [[min(value, ceiling) for value in r] for r in rows]
    upper = sum(stage.tail for stage in problem.stages) + sum(U * max(r) for r in rows)
    return choose_tick(upper), rows


def serial_reference(rows: list[list[float]], cap: int) -> float:
    """The least over ``m`` of every op of ``m`` equal microbatches (none over ``cap``
    units), one ``m`` and one size at a time."""
    U = len(rows[0]) - 1
    per_size = [sum(r[k] for r in rows) for k in range(U + 1)]
    totals = [
        (m - U % m) * per_size[U // m] + U % m * per_size[min(U // m + 1, U)]
        for m in range(1, U + 1)
        if -(-U // m) <= cap
    ]
    return min(totals, default=math.inf)


def check_ticks(problem: Problem) -> None:
    ticked = tick_problem(problem)
    tick, rows = reference_tables(problem)
    assert ticked.tick == tick
    got = np.concatenate(
        [
            ticked.forward_compute,
            ticked.backward_compute,
            ticked.forward_transfer,
            ticked.backward_transfer,
        ]
    )
    expected = np.rint(np.asarray(rows) / tick).astype(np.int64)
    assert got.dtype == np.int64 and np.array_equal(got, expected)


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.name)
def test_tick_tables_equal_the_per_size_reference(problem: Problem) -> None:
    check_ticks(problem)


@PROPERTY
@given(problem=problems())
def test_tick_tables_equal_the_per_size_reference_on_random_problems(problem: Problem) -> None:
    check_ticks(problem)


# --- the lower bound -------------------------------------------------------------------


@PROPERTY
@given(data=st.data(), unit=st.integers(1, 4), cap_units=st.integers(1, 30))
def test_candidates_hold_the_least_step_exactly(
    data: st.DataObject, unit: int, cap_units: int
) -> None:
    """The least ``t(j unit)`` over the candidates is the least over every ``j``, exactly, and
    the least ``t_j / j`` agrees up to rounding."""
    cap = cap_units * unit
    function = data.draw(time_functions(unit, cap))
    sizes = candidate_sizes(function, unit, cap)
    assert ((sizes % unit == 0) & (sizes >= unit) & (sizes <= cap)).all()
    everything = step_times(function, unit, cap)
    assert function.at(sizes).min() == everything.min()
    ratios = everything / np.arange(1, cap_units + 1)
    least = (function.at(sizes) / (sizes // unit)).min()
    assert math.isclose(least, ratios.min(), rel_tol=1e-12, abs_tol=1e-15)


@PROPERTY
@given(data=st.data(), unit=st.integers(1, 3), cap_units=st.integers(1, 12))
def test_relaxed_total_never_exceeds_the_exact_one(
    data: st.DataObject, unit: int, cap_units: int
) -> None:
    units = data.draw(st.integers(cap_units, 40))
    cap = cap_units * unit
    function = data.draw(time_functions(unit, cap))
    exact = least_total(step_times(function, unit, cap), units)
    assert at_most(relaxed_total(function, unit, cap, units), exact)


def test_relaxed_total_is_tight_for_a_linear_function() -> None:
    """``t(b) = b``: every partition costs ``B``; so does the relaxation."""
    assert relaxed_total(affine(0, 1), 2, 6, 9) == least_total(np.array([2.0, 4.0, 6.0]), 9) == 18


@pytest.fixture
def relaxed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every resource's total by the relaxation."""
    monkeypatch.setattr(bound_module, "EXACT_CELLS", 0)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_relaxed_bound_is_below_the_exact_bound_and_every_plan(
    problem: Problem, data: st.DataObject
) -> None:
    exact = lower_bound(problem)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bound_module, "EXACT_CELLS", 0)
        loose = lower_bound(problem)
    assert loose >= 0 and at_most(loose, exact)
    assert at_most(loose, evaluate(problem, data.draw(plans(problem))).iteration_time)


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.name)
def test_relaxed_bound_is_below_gpipe(problem: Problem, relaxed: None) -> None:
    gpipe = best_baselines(problem)["gpipe"].iteration_time
    assert lower_bound(problem) > 0 and at_most(lower_bound(problem), gpipe)


@pytest.mark.parametrize("shape", ["affine", "saturating", "table"])
def test_bound_of_a_billion_units_needs_no_table_of_them(shape: str) -> None:
    """``B = 10**9`` in units of 1: the bound takes the relaxation (a table of every size or
    the DP would need gigabytes) and stays below GPipe(4)."""
    problem = Problem.from_dict(synth_problem(5, 3, 10**9, shape=shape))
    assert problem.num_units * problem.common_cap() > bound_module.EXACT_CELLS
    bound = lower_bound(problem)
    assert bound > 0 and at_most(bound, evaluate(problem, gpipe_plan(problem, 4)).iteration_time)


def test_clamped_entries_stay_above_every_tail_and_a_free_plan() -> None:
    """The ceiling left the tails out: with a 500 ms tail, a backward of 1e4 ms at one
    sample was clamped below the tail, and the proven optimum held it (501.585 ms by its
    ticks, 30002.1 by the reference); where the best equal plan takes no time, the ceiling
    was 0 and every entry 0 (the optimum "0 ms", 4 by the reference)."""
    fast = affine(0.02, 0.005)
    slow_at_one = table([1, 2, 3, 4, 5, 6], [1e4, 0.4, 0.5, 0.6, 0.7, 0.8])
    stages = [
        Stage(forward=affine(0.1, 0.05), backward=slow_at_one),
        Stage(forward=affine(0.1, 0.05), backward=affine(0.2, 0.1), tail=500.0),
    ]
    tailed = Problem(batch_size=6, stages=stages, links=[Link(forward=fast, backward=fast)])
    check_ticks(tailed)
    plan, time = flush_optimum(tailed, "numpy")
    assert time == pytest.approx(evaluate(tailed, plan).iteration_time, rel=1e-12)
    assert 1 not in plan.backward[0] and time < 502
    free_at_four = table([1, 2, 4], [1.0, 1.5, 0.0])
    free = Problem(batch_size=4, stages=[Stage(forward=free_at_four, backward=affine(0, 0))])
    check_ticks(free)
    plan, time = flush_optimum(free, "numpy")
    assert time == evaluate(free, plan).iteration_time == 0


def test_an_absurd_entry_is_clamped_and_the_tick_follows_the_ops() -> None:
    """One entry of 1e14 ms made the tick 8 ms, coarser than every op (0.02-0.6 ms)."""
    problem = with_outlier(1e14)
    check_ticks(problem)
    ticked = tick_problem(problem)
    ops = np.concatenate([ticked.forward_compute[:, 1:], ticked.forward_transfer[:, 1:]])
    assert ops.min() >= 1e6
    clamped = ticked.forward_compute[1, 5]
    assert ticked.to_time(clamped) < 1e4 and clamped == ticked.forward_compute.max()


def check_wanted_entries(problem: Problem, seed: int) -> None:
    """Timing only some (schedule, count) entries gives those entries of the full table bit
    for bit (``inf`` elsewhere): 1F1B counts below ``S - 1`` on one lane, GPipe and
    PipeDream counts sharing lanes however they are picked."""
    ms, every = baseline_times(problem)
    tables = count_tables(problem, ms)
    rng = np.random.default_rng(seed)
    for wanted in (rng.random(every.shape) < 0.4, np.eye(3, len(ms), dtype=bool)):
        times = baselines_module._timed(tables, problem.num_units, wanted)
        assert times[wanted].tolist() == every[wanted].tolist()
        assert np.isinf(times[~wanted]).all()


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.name)
def test_baseline_times_of_some_entries_are_those_of_every_count(problem: Problem) -> None:
    check_wanted_entries(problem, 0)


@PROPERTY
@given(problem=problems(max_stages=12), seed=st.integers(0, 2**16))
def test_baseline_times_of_some_entries_on_random_problems(problem: Problem, seed: int) -> None:
    check_wanted_entries(problem, seed)


@pytest.mark.parametrize("stages", [40, 70])
def test_best_baselines_times_each_schedule_only_where_its_bound_can_win(stages: int) -> None:
    """Past the first counts, each schedule times only its own counts whose bound can beat
    its best first time, none timed twice: PipeDream's busiest resource, at most its
    count's work, prunes counts that GPipe's chain keeps; the result is the full scan's."""
    problem = Problem.from_dict(synth_problem(0, stages, 2 * stages))
    entries: list[np.ndarray] = []
    real = baselines_module._timed

    def counting(tables: baselines_module.CountTables, units: int, *wanted: Any) -> np.ndarray:
        mask = wanted[0] if wanted else np.ones((3, len(tables.ms)), bool)
        rows, columns = np.nonzero(mask)
        entries.extend(np.stack([rows, tables.ms[columns]], axis=1))
        return real(tables, units, *wanted)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(baselines_module, "_timed", counting)
        best = best_baselines(problem)
    pairs = [tuple(int(v) for v in pair) for pair in entries]
    assert len(pairs) == len(set(pairs))
    ms, times = baseline_times(problem)
    timed_pipedream = sum(1 for row, _m in pairs if row == 2)
    timed_gpipe = sum(1 for row, _m in pairs if row == 0)
    assert timed_pipedream < timed_gpipe
    for row, schedule in zip(times, BASELINE_ROWS, strict=True):
        i = int(np.argmin(row))
        assert (best[schedule].microbatches, best[schedule].iteration_time) == (ms[i], row[i])
