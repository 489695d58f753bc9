"""The windowed search (issue 11): never slower than the best 1F1B that fits nor than the
flush plan it starts with, within its memory limits, a consistent time-memory trade-off,
reproducible, and using a whole time budget."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.conftest import case_id, golden_cases
from tidgap import (
    InputError,
    Optimizer,
    Problem,
    Stopping,
    evaluate,
    example_names,
    load_problem,
)
from tidgap.analysis.search_summary import AFTER_GA
from tidgap.optimize import polish as polish_module
from tidgap.optimize import windowed_driver, windowed_finish
from tidgap.optimize.driver import search
from tidgap.optimize.joint import Island
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.limits import stage_level
from tidgap.optimize.results import SearchResult
from tidgap.optimize.windowed_driver import (
    FLUSH_STAGNATION,
    flush_fits,
    flush_generations,
    prepare_windowed,
)
from tidgap.optimize.windowed_finish import polished
from tidgap.optimize.windowed_seeds import one_f_one_b_level, ramp_plans
from tidgap.profiling.synth import synth_problem
from tidgap.schedules.baselines import (
    best_baselines,
    feasible_microbatch_counts,
    one_f_one_b_plan,
)

REL = 1e-9
GENERATIONS = 8
POPULATION = 32


def _golden_problem(name: str) -> dict[str, Any]:
    """The problem document of golden case ``name`` (a fresh copy)."""
    return next(c for c in golden_cases() if case_id(c) == name)["problem"]


def _golden(name: str) -> Problem:
    """The problem of golden case ``name``."""
    return Problem.from_dict(_golden_problem(name))


def _problem(name: str) -> Problem:
    """A golden case's problem, or a built-in example (``example:NAME``)."""
    return load_problem(name) if name.startswith("example:") else _golden(name)


#: Every golden case and every built-in example.
EVERY_PROBLEM = [case_id(c) for c in golden_cases()] + [f"example:{n}" for n in example_names()]


@pytest.mark.parametrize("name", EVERY_PROBLEM)
@pytest.mark.parametrize("width", [4, 32])
def test_ramp_seeds_are_plans_that_start_small(name: str, width: int) -> None:
    """Each ramp seed is a plan within the caps and ``width``: every stage the same rows,
    forwards opening with at least ``S - 1`` one-unit microbatches and no microbatch above
    the best 1F1B's size ``b``, backwards opening with ``b - 1`` units."""
    problem = _problem(name)
    best = best_baselines(problem)["1f1b"]
    plans = ramp_plans(problem, width, best)
    unit, S, U = problem.unit, problem.num_stages, problem.num_units
    b = min(round(U / best.microbatches), problem.common_cap() // unit) * unit
    for plan in plans:
        evaluate(problem, plan)  # a valid plan: partitions of the batch within the caps
        forward, backward = plan.forward[0], plan.backward[0]
        assert plan.forward == [forward] * S and plan.backward == [backward] * S
        assert max(len(forward), len(backward)) <= width
        assert forward[: S - 1] == [unit] * (S - 1) and max(forward + backward) <= b
        assert backward[0] == b - unit
    assert len({tuple(plan.forward[0]) for plan in plans}) == len(plans)
    if width == 32 and name in ("example:gpt1-14", "example:hetero-8", "example:vgg16"):
        assert len(plans) == 3


def _windowed(problem: Problem, **options: Any) -> SearchResult:
    """A short windowed search (seed 0, :data:`GENERATIONS`, :data:`POPULATION`)."""
    options = {"seed": 0, "generations": GENERATIONS, "population": POPULATION} | options
    return search(problem, schedule="windowed", **options)


def _fitting_one_f_one_b_time(problem: Problem) -> float:
    """The least time of any 1F1B(m) within the stages' own memory limits."""
    stages = stage_level(problem)
    times = []
    for m in feasible_microbatch_counts(problem):
        evaluation = evaluate(problem, one_f_one_b_plan(problem, m))
        if stages.admits(evaluation.peak_held):
            times.append(evaluation.iteration_time)
    return min(times)


def _check_tradeoff(problem: Problem, result: SearchResult) -> None:
    """Levels tightest first with the one in force among them (the result's point); each
    point's plan within its level by the reference."""
    points = result.tradeoff
    levels = [point.level for point in points]
    assert result.memory_limit in levels
    sums = [sum(level.held) for level in levels]
    assert sums == sorted(sums) and len({level.held for level in levels}) == len(levels)
    for point in points:
        if point.plan is None:
            continue
        reference = evaluate(problem, point.plan)
        assert point.evaluation == reference
        assert point.level.admits(reference.peak_held), (point.level, reference.peak_held)
    chosen = points[levels.index(result.memory_limit)]
    assert chosen.plan == result.plan and chosen.evaluation == result.evaluation


def _slower_than_a_plan_within(result: SearchResult) -> list[str]:
    """The trade-off points slower than another point's plan that their level admits (then
    that plan, not theirs, is the fastest found within the level)."""
    found = [point for point in result.tradeoff if point.evaluation is not None]
    return [
        f"{result.problem.name}: within {point.level.label} "
        f"{point.evaluation.iteration_time:.9g}, within {other.level.label} "
        f"{other.evaluation.iteration_time:.9g} holding {other.evaluation.peak_held}"
        for point in result.tradeoff
        for other in found
        if point.level.admits(other.evaluation.peak_held)
        and (
            point.evaluation is None
            or point.evaluation.iteration_time > other.evaluation.iteration_time
        )
    ]


@pytest.mark.parametrize("name", EVERY_PROBLEM)
def test_never_slower_than_the_best_1f1b_nor_its_flush_plan(name: str) -> None:
    problem = _problem(name)
    result = _windowed(problem)
    assert result.schedule == "windowed" and result.plan.order is not None
    assert result.evaluation == evaluate(problem, result.plan)
    time = result.evaluation.iteration_time
    best = result.baselines["1f1b"]
    if stage_level(problem).admits(list(one_f_one_b_level(problem, best).held)):
        assert time <= best.iteration_time * (1 + REL)
    _check_tradeoff(problem, result)
    flush_options = dict(
        schedule="flush",
        seed=0,
        generations=flush_generations(GENERATIONS),
        stagnation=FLUSH_STAGNATION,
        population=POPULATION,
    )
    if not flush_fits(problem):
        with pytest.raises(InputError):
            search(problem, **flush_options)
        return
    flush = search(problem, **flush_options)
    assert time <= flush.evaluation.iteration_time * (1 + REL)


@pytest.mark.parametrize("name", EVERY_PROBLEM)
def test_never_slower_than_any_1f1b_within_the_stages_own_limits(name: str) -> None:
    problem = _problem(name)
    time = _windowed(problem).evaluation.iteration_time
    assert time <= _fitting_one_f_one_b_time(problem) * (1 + REL)


@pytest.mark.parametrize("name", EVERY_PROBLEM)
def test_one_f_one_b_limit_holds_every_stage_to_what_the_best_1f1b_holds(name: str) -> None:
    problem = _problem(name)
    result = _windowed(problem, memory_limit="1f1b")
    level = one_f_one_b_level(problem, result.baselines["1f1b"])
    reference = evaluate(problem, result.plan)
    assert reference == result.evaluation
    assert all(p <= h for p, h in zip(reference.peak_held, level.held, strict=True))
    assert stage_level(problem).admits(reference.peak_held)
    if stage_level(problem).admits(list(level.held)):
        assert result.memory_limit == level
        assert reference.iteration_time <= result.baselines["1f1b"].iteration_time * (1 + REL)
    _check_tradeoff(problem, result)


def _with_activation_bytes(
    name: str, per_stage: list[float], stage_limits: dict[int, float] | None = None
) -> Problem:
    """Golden case ``name`` with ``activation_bytes[s] = per_stage[s]`` and stage ``s``'s own
    ``memory_limit`` ``stage_limits[s]``."""
    document = _golden_problem(name)
    for stage, size in zip(document["stages"], per_stage, strict=True):
        stage["activation_bytes"] = size
    for s, limit in (stage_limits or {}).items():
        document["stages"][s]["memory_limit"] = limit
    return Problem.from_dict(document)


MIB = 2**20
BYTES_PROBLEMS = [
    pytest.param(
        _with_activation_bytes("med7_1", [MIB * (s + 1) for s in range(6)]), 40 * MIB, id="med7_1"
    ),
    pytest.param(
        _with_activation_bytes("tiny7_3", [MIB, 2 * MIB, MIB, 3 * MIB]), 4 * MIB, id="tiny7_3"
    ),
    # stage 0's own memory_limit (20 samples) is tighter there than the limit (40 samples)
    pytest.param(
        _with_activation_bytes("med7_1", [MIB * (s + 1) for s in range(6)], {0: 20 * MIB}),
        40 * MIB,
        id="med7_1-own-limit",
    ),
]


@pytest.mark.parametrize(("problem", "limit"), BYTES_PROBLEMS)
def test_a_limit_in_bytes_bounds_every_stage_and_the_stages_own_limits_too(
    problem: Problem, limit: int
) -> None:
    unlimited = _windowed(problem)
    assert unlimited.evaluation.peak_memory is not None
    assert max(unlimited.evaluation.peak_memory) > limit  # the limit binds
    result = _windowed(problem, memory_limit=limit)
    reference = evaluate(problem, result.plan)
    assert reference == result.evaluation and reference.peak_memory is not None
    for s, stage in enumerate(problem.stages):
        own = float("inf") if stage.memory_limit is None else stage.memory_limit
        assert reference.peak_memory[s] <= min(limit, own), s
    assert not any(reference.over_memory_limit or [])
    _check_tradeoff(problem, result)


def test_each_level_is_the_fastest_trade_off_plan_within_it() -> None:
    """A looser level receives the tighter islands' migrants: its best is never slower than
    a plan found within a tighter level that it admits; likewise under every limit."""
    limits = [(_problem(name), None) for name in EVERY_PROBLEM]
    limits += [(_problem(name), "1f1b") for name in EVERY_PROBLEM]
    limits += [param.values for param in BYTES_PROBLEMS]
    slower = [
        line
        for problem, limit in limits
        for line in _slower_than_a_plan_within(_windowed(problem, memory_limit=limit))
    ]
    assert not slower, "\n".join(slower)


@pytest.mark.parametrize("name", ["example:hetero-8", "tiny7_2"])
def test_same_seed_same_plan_and_numba_equals_numpy(name: str) -> None:
    problem = _problem(name)
    runs = [_windowed(problem, seed=3, backend=b) for b in ("numba", "numba", "numpy")]
    plans = [(r.plan.forward, r.plan.backward, r.plan.order) for r in runs]
    assert plans[0] == plans[1] == plans[2]
    assert runs[0].evaluation == runs[2].evaluation


@pytest.mark.parametrize("pricing", ["model", "run"])
def test_no_generations_run_no_generation_of_either_search(pricing: str) -> None:
    """``generations=0``: the seeds and their polish, no GA generation (the first search
    ran one); one generation is more."""
    problem = load_problem("example:tiny-2")
    options = dict(seed=0, population=POPULATION, pricing=pricing)
    none, one = (search(problem, generations=g, **options) for g in (0, 1))
    assert (none.generations, one.generations) == (0, 1)
    assert none.evaluations < one.evaluations


@pytest.mark.parametrize("schedule", ["windowed", "flush"])
def test_without_stagnation_a_time_limit_is_used_to_the_end(schedule: str) -> None:
    problem = load_problem("example:tiny-2")
    options = dict(schedule=schedule, seed=0, population=POPULATION, time_limit=1.5)
    early = search(problem, stagnation=3, **options)
    assert early.stop_reason == "stagnation"
    # the first, flush search of a windowed one stops on the same rule (it ran its own 100)
    assert early.generations <= 3 * 4 + 2, early.generations
    result = search(problem, stagnation=None, **options)
    assert result.stop_reason == "time limit"
    assert result.generations > early.generations
    assert result.evaluation == evaluate(problem, result.plan)


def test_a_shallow_search_keeps_its_best_seeds_polished_over_groups_of_stages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under :data:`~tidgap.optimize.polish.GROUP_MOVES_FROM_STAGES` stages each level's
    best seed, polished over the moves of groups of stages first, bounds that level's plan;
    on these 16 stages within 1F1B's memory the search is faster with it than without."""
    problem = Problem.from_dict(synth_problem(3, stages=16, batch_size=64))
    options: dict[str, Any] = dict(
        seed=0, population=POPULATION, generations=GENERATIONS, memory_limit="1f1b"
    )
    run = prepare_windowed(problem, **options)
    space, to_time = run.optimizer.space, run.optimizer.ticked.to_time
    seeds = polished(run.seed_bests, run.levels, run.in_force, space, None, groups=True)
    result = search(problem, **options)
    assert "seed polish" in result.setup
    for point, seed in zip(result.tradeoff, seeds, strict=True):
        assert seed is not None and point.evaluation is not None
        assert point.evaluation.iteration_time <= to_time(seed[1]) * (1 + REL)
    monkeypatch.setattr(windowed_finish, "with_polished_seeds", lambda run, found: found)
    without = search(problem, **options).evaluation.iteration_time
    assert result.evaluation.iteration_time < without


def test_checking_and_timing_the_plans_is_a_phase_of_its_own() -> None:
    """The reference simulation of the levels' plans at the end (seconds at 1024 stages)
    is timed as phase ``decode``, the last, not counted as setup in the summary."""
    seen: list[str] = []
    problem = load_problem("example:tiny-2")
    result = search(problem, seed=0, population=POPULATION, generations=2, on_phase=seen.append)
    assert seen[-1] == "decode" and seen.count("decode") == 1
    assert "decode" in result.setup and "decode" in AFTER_GA


def test_a_deep_search_polishes_no_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """From :data:`~tidgap.optimize.polish.GROUP_MOVES_FROM_STAGES` stages the final polish
    moves groups of stages first itself: no seed polish."""
    problem = load_problem("example:gpt1-14")
    options: dict[str, Any] = dict(seed=0, population=POPULATION, generations=GENERATIONS)
    assert "seed polish" in search(problem, **options).setup
    monkeypatch.setattr(polish_module, "GROUP_MOVES_FROM_STAGES", problem.num_stages)
    assert "seed polish" not in search(problem, **options).setup


def test_the_1f1b_level_is_counted_not_simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The best 1F1B's level equals the evaluator's peaks, counted without simulating the
    1F1B (1 s at 512 stages)."""
    import tidgap.schedules.simulate as simulate

    problem = Problem.from_dict(synth_problem(1, 7, 50, 1, 0.5, "affine", "h"))
    best = best_baselines(problem)["1f1b"]
    peaks = tuple(evaluate(problem, one_f_one_b_plan(problem, best.microbatches)).peak_held)
    monkeypatch.setattr(simulate, "simulate", None)  # calling it fails
    level = one_f_one_b_level(problem, best)
    assert level.held == peaks and level.bound == peaks


def test_a_search_left_no_time_for_a_generation_allocates_the_annealing_chains_alone() -> None:
    """Where the time left before the GA's limit would not even cover allocating the islands
    (no generation could run), a lean setup's islands hold the annealing's
    :data:`~tidgap.optimize.windowed_finish.ANNEAL_CHAINS` fittest each, which is all the
    annealing starts from (at 512 stages the islands' copies took 2.5 s); one on
    generations keeps its whole population, and so does one not lean (an optimizer whose
    state may be saved: it resumes)."""
    from tidgap.optimize.ga import DEFAULT_POPULATION

    problem = Problem.from_dict(synth_problem(3, stages=16, batch_size=64))
    assert windowed_finish.ANNEAL_CHAINS is not None
    assert windowed_finish.ANNEAL_CHAINS < DEFAULT_POPULATION
    short = prepare_windowed(problem, seed=0, time_limit=1e-3, lean_islands=True)
    assert {island.genes.size for island in short.optimizer.islands} == {
        windowed_finish.ANNEAL_CHAINS
    }
    counted = prepare_windowed(problem, seed=0, generations=1, lean_islands=True)
    sizes = {island.genes.size for island in counted.optimizer.islands}
    assert sizes == {DEFAULT_POPULATION}
    optimizer = Optimizer(problem, seed=0, stopping=Stopping(time_limit=1e-3))
    sizes = {island.genes.size for island in optimizer.run.optimizer.islands}
    assert sizes == {DEFAULT_POPULATION}
    resumed = Optimizer(problem, seed=0, resume=optimizer.state, stopping=Stopping(generations=1))
    assert resumed.generation == optimizer.generation


def test_search_sets_up_lean_and_an_optimizer_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`search` (no checkpoint: nothing reads its state) asks the islands' size by the
    time left; an :class:`Optimizer`, whose state may be saved, never does."""
    asked: list[float | None] = []

    def recorded(population: int, islands: int, stages: int, width: int, left: Any) -> int:
        asked.append(left)
        return population

    monkeypatch.setattr(windowed_driver, "island_size", recorded)
    problem = Problem.from_dict(synth_problem(3, stages=4, batch_size=32))
    search(problem, seed=0, time_limit=0.5)
    assert asked and asked[-1] is not None
    asked.clear()
    Optimizer(problem, seed=0, stopping=Stopping(time_limit=0.5))
    assert asked and all(left is None for left in asked)


def test_a_short_search_keeps_its_seeds_guarantees_and_time_for_its_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past its annealing's deadline a search builds no chains (no step would run: the
    islands' bests stand), its improvements stop early enough to leave time for checking
    and timing its plans (:meth:`WindowedRun.end`), and its plan is still never slower
    than the best 1F1B nor its flush plan, within the limit."""
    problem = Problem.from_dict(synth_problem(3, stages=16, batch_size=64))

    def no_annealing(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("annealed past its deadline")

    monkeypatch.setattr(windowed_finish, "anneal", no_annealing)
    run = prepare_windowed(problem, seed=0, time_limit=1e-3, memory_limit="1f1b")
    result = windowed_finish.finish_windowed(run, "time limit")
    assert run.reserve > 0 and run.end() == run.clock + run.time_limit - run.reserve
    best = min(
        result.baselines["1f1b"].iteration_time, evaluate(problem, run.flush_plan).iteration_time
    )
    assert result.evaluation.iteration_time <= best * (1 + REL)
    assert result.evaluation == evaluate(problem, result.plan)


def test_past_the_annealings_latest_deadline_the_polish_scans_are_not_timed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A search past the latest deadline its annealing could have (its end less the least
    polish share) builds no chains and times no scan of its plan for the polish's reserve
    (0.5 s at 1024 stages), which could only move that deadline earlier."""

    def untimed(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("timed the polish's scans past the annealing's deadline")

    monkeypatch.setattr(windowed_finish, "scan_seconds", untimed)
    problem = Problem.from_dict(synth_problem(3, stages=16, batch_size=64))
    run = prepare_windowed(problem, seed=0, time_limit=1e-3, memory_limit="1f1b")
    found = [run.optimizer.best_within(level) for level in run.levels]
    assert any(best is not None for best in found)
    annealed = windowed_finish.annealed(run, found)
    fastest = windowed_finish.fastest_admitted(found, run.levels, run.optimizer.space)
    assert [None if b is None else b[1] for b in annealed] == [
        None if b is None else b[1] for b in fastest
    ]


@pytest.mark.parametrize(("time_limit", "population"), [(1e-3, 512), (None, 8)])
def test_the_islands_share_no_genes_and_the_last_takes_the_candidates_arrays(
    monkeypatch: pytest.MonkeyPatch, time_limit: float | None, population: int
) -> None:
    """Each island's genes are its own (the GA writes over them in place), the last one's
    the scored candidates' arrays reordered in place (no copy: at 1024 stages a copy's first
    touch took 0.5 s), holding the same individuals as a copy would (all of them, or, with
    more candidates than the island holds, the fittest)."""
    seeded: list[tuple[Any, ...]] = []
    original = Island.seeded.__func__  # type: ignore[attr-defined]

    def recorded(cls: type, level: Any, candidates: Any, *rest: Any, **options: Any) -> Island:
        copies = [array.copy() for array in candidates.arrays()]
        island = original(cls, level, candidates, *rest, **options)
        seeded.append((island, candidates, copies, rest, options.get("owned", False)))
        return island

    monkeypatch.setattr(Island, "seeded", classmethod(recorded))
    problem = Problem.from_dict(synth_problem(3, stages=8, batch_size=64))
    run = prepare_windowed(
        problem, seed=0, time_limit=time_limit, generations=1, population=population
    )
    islands = run.optimizer.islands
    assert [owned for *_, owned in seeded] == [False] * (len(islands) - 1) + [True]
    for i, island in enumerate(islands):
        for other in islands[i + 1 :]:
            for mine, theirs in zip(island.genes.arrays(), other.genes.arrays(), strict=True):
                assert not np.shares_memory(mine, theirs)
    last, candidates, copies, (times, peaks, size, held), _ = seeded[-1]
    assert (candidates.size > size) == (population == 8)
    copied = Island.seeded(last.level, JointGenes(*copies), times, peaks, size, held)
    for mine, theirs, given in zip(
        last.genes.arrays(), copied.genes.arrays(), candidates.arrays(), strict=True
    ):
        np.testing.assert_array_equal(mine, theirs)
        assert np.shares_memory(mine, given)
    np.testing.assert_array_equal(last.fitness, copied.fitness)


def test_window_order_seeds_are_encoded_without_building_their_plans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The window-order seeds (each partition in each level's window order) are encoded as
    their plans would be (built, then :func:`encode_plans`: the same genes,
    in the same order), without building those plans (at 512 stages that took 1 s)."""
    from tidgap import Plan
    from tidgap.optimize import windowed_seeds as seeds_module
    from tidgap.optimize.limits import tradeoff_levels

    problem = Problem.from_dict(synth_problem(3, stages=16, batch_size=64))
    baselines = best_baselines(problem)
    level = one_f_one_b_level(problem, baselines["1f1b"])
    levels = tradeoff_levels(problem, level, level)
    width = 24
    equal = seeds_module.seed_plans(problem, width, POPULATION, baselines)
    partitions = [*equal[::3], *ramp_plans(problem, width, baselines["1f1b"])]
    wide = one_f_one_b_plan(problem, width + 1)  # too wide: left out, as encode_plans does
    built = [  # each partition in each level's window order (model.md, Windows)
        Plan.of(p.forward, p.backward, windows=[max(1, h) for h in level.held])
        for p in [*partitions, wide]
        for level in levels
    ]
    expected = seeds_module.encode_plans([*equal, wide, *built, equal[0]], problem, width)
    assert len(levels) > 1 and expected.size == len(equal) + len(partitions) * len(levels) + 1

    def no_plan(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("built a plan")

    monkeypatch.setattr(Plan, "of", no_plan)
    genes = seeds_module.encode_seeds(
        [*equal, wide], [*partitions, wide], levels, [equal[0]], problem, width
    )
    for got, want in zip(genes.arrays(), expected.arrays(), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
