"""The batched annealing after the joint GA: chains stay within their island's level, end
no worse than the island's best, and are the same for the same seed on every backend."""

from __future__ import annotations

import time
import warnings

import pytest

from tidgap import Link, Problem, Stage, affine, evaluate, load_problem, search
from tidgap.analysis.search_summary import summary_lines
from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.ticks import tick_problem
from tidgap.optimize import windowed_finish
from tidgap.optimize.anneal import Annealing, anneal
from tidgap.optimize.ga import GeneticSettings
from tidgap.optimize.genome import decode_plan
from tidgap.optimize.joint import Island, JointSpace
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.limits import OVER_LIMIT, MemoryLevel, penalised, stage_level
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.windowed_seeds import one_f_one_b_level
from tidgap.schedules.baselines import best_baselines


def _islands(name: str, backend: str, size: int = 24) -> tuple[object, JointSpace, list[Island]]:
    """Two islands of random repaired individuals: within the best 1F1B's memory, unlimited."""
    problem = load_problem(f"example:{name}")
    ticked = tick_problem(problem)
    evaluator = create_evaluator(ticked, "windowed", backend)
    space = JointSpace(evaluator, ticked.forward_caps, ticked.backward_caps, 16)
    levels = [one_f_one_b_level(problem, best_baselines(problem)["1f1b"]), stage_level(problem)]
    genes = space.random(size, CounterRng(3))
    scored = (genes, *space.evaluate(genes))
    return (
        problem,
        space,
        [Island.seeded(level, *scored, size, space.limit(level)) for level in levels],
    )


def _plain(found: tuple[JointGenes, int] | None) -> tuple | None:
    return None if found is None else (*(a.tolist() for a in found[0].arrays()), found[1])


@pytest.mark.parametrize("name", ["gpt1-14", "hetero-8"])
def test_chains_stay_within_their_level_and_never_end_worse(name: str) -> None:
    problem, space, islands = _islands(name, "numba")
    starts = [int(island.fitness.min()) for island in islands]
    found, evaluations = anneal(islands, space, CounterRng(1), Annealing(steps=40))
    assert evaluations == 40 * 2 * 24
    for island, start, best in zip(islands, starts, found, strict=True):
        if best is None:
            assert start >= OVER_LIMIT  # nothing within the level to start from, none reached
            continue
        genes, ticks = best
        assert ticks <= start
        plan = decode_plan(genes.forward[0], genes.backward[0], problem, genes.codes[0])
        reference = evaluate(problem, plan)
        assert island.level.admits(reference.peak_held)
        assert reference.iteration_time == pytest.approx(space.evaluator.ticked.to_time(ticks))


def test_annealing_improves_random_plans() -> None:
    _, space, islands = _islands("gpt1-14", "numba")
    unlimited = int(islands[1].fitness.min())
    found, _ = anneal(islands, space, CounterRng(1), Annealing(steps=60))
    assert found[1] is not None and found[1][1] < unlimited


def test_the_same_seed_gives_the_same_chains_on_numpy_and_numba() -> None:
    results = []
    for backend in ("numpy", "numba", "numba"):
        _, space, islands = _islands("hetero-8", backend)
        found, _ = anneal(islands, space, CounterRng(7), Annealing(steps=15))
        results.append([_plain(best) for best in found])
    assert results[0] == results[1] == results[2]


def test_the_schedule_ends_on_steps_or_deadline() -> None:
    assert Annealing(steps=0).progress(0, time.perf_counter()) == 1
    assert Annealing(steps=10).progress(5, time.perf_counter()) == 0.5
    started = time.perf_counter()
    assert Annealing(deadline=started - 1).progress(0, started) >= 1
    assert Annealing(steps=10, interrupted=lambda: "SIGINT").stopped()
    # Resumed half way: the time to the deadline covers the other half.
    resumed = Annealing(deadline=started + 100, begun=0.5)
    assert 0.5 <= resumed.progress(0, started) < 0.51
    assert Annealing(steps=10, deadline=started + 100, begun=0.5).progress(8, started) == 0.8
    assert not Annealing(steps=10, interrupted=lambda: None).stopped()
    _, space, islands = _islands("tiny-2", "numba", size=8)
    _, evaluations = anneal(
        islands, space, CounterRng(0), Annealing(deadline=time.perf_counter()), per_island=4
    )
    assert evaluations == 0
    _, evaluations = anneal(islands, space, CounterRng(0), Annealing(steps=3), per_island=4)
    assert evaluations == 3 * 2 * 4


def test_over_limit_moves_are_never_taken() -> None:
    # A level of one sample per stage admits no plan: every chain keeps its start.
    problem, space, islands = _islands("tiny-2", "numba", size=8)
    source = islands[0]
    tight = MemoryLevel("tight", (1,) * problem.num_stages)
    island = Island.seeded(tight, source.genes, source.times, source.peaks, 8, space.limit(tight))
    assert int(island.fitness.min()) >= OVER_LIMIT
    found, _ = anneal([island], space, CounterRng(2), Annealing(steps=10))
    assert found == [None]


def test_a_windowed_search_anneals_after_the_ga_and_says_so(monkeypatch) -> None:
    problem = load_problem("example:gpt1-14")
    options = dict(generations=40, population=16, memory_limit="1f1b", backend="numba")
    seen: list[str] = []
    result = search(problem, on_phase=seen.append, **options)
    assert seen[-3:] == ["anneal", "polish", "decode"]
    headline = summary_lines(result)[0]
    assert f"annealing {result.setup['anneal']:.1f} s" in headline
    monkeypatch.setattr(windowed_finish, "ANNEAL_STEPS_PER_GENERATION", 0)
    without = search(problem, **options)
    chains = result.evaluations - without.evaluations
    assert chains > 0 and chains % 16 == 0  # whole steps of every island's chains


def test_a_signal_during_the_annealing_stops_it_and_skips_the_polish() -> None:
    problem = load_problem("example:gpt1-14")
    annealing = []
    result = search(
        problem,
        generations=30,
        population=16,
        on_phase=annealing.append,
        interrupted=lambda: "SIGINT" if "anneal" in annealing else None,
    )
    assert result.interrupted and result.stop_reason == "SIGINT"
    assert result.generations == 30 and "polish" not in result.setup
    assert result.evaluation.iteration_time <= result.baselines["1f1b"].iteration_time


@pytest.mark.parametrize("steps", [1, 3])
def test_what_anneal_reports_is_what_it_found(steps: int) -> None:
    """Each island's reported genes score the reported ticks, also when its best is still
    the chain it started from and that chain has moved since (chains change in place)."""
    for seed in range(6):
        _, space, islands = _islands("hetero-8", "numba")
        found, _ = anneal(islands, space, CounterRng(seed), Annealing(steps=steps))
        for island, best in zip(islands, found, strict=True):
            if best is not None:
                ticks, peaks = space.evaluate(best[0])
                assert int(ticks[0]) == best[1] and island.level.admits(peaks[0].tolist())


def test_a_time_limited_search_anneals_and_polishes_again_to_the_limit() -> None:
    """The polish ends early at a local optimum; the time left goes to more rounds of
    annealing and polish, so the search ends within the last rounds' share of its limit."""
    problem = load_problem("example:gpt1-14")
    phases: list[str] = []
    result = search(problem, seed=0, time_limit=2.0, backend="numba", on_phase=phases.append)
    assert phases.count("anneal") >= 2 and phases[-2:] == ["polish", "decode"]
    assert result.stop_reason == "time limit"  # the wall time: test_search.py


def test_an_island_adopts_in_place_of_its_least_fit() -> None:
    _, space, islands = _islands("hetero-8", "numba")
    island = islands[1]
    worst, best = int(island.fitness.argmax()), int(island.fitness.argmin())
    genes = island.genes.take(slice(best, best + 1))
    times, peaks = space.evaluate(genes)
    before = island.genes.size
    island.adopt(genes, times, peaks)
    assert island.genes.size == before
    assert island.fitness[worst] == island.fitness[best] and island.times[worst] == times[0]
    for mine, given in zip(island.genes.arrays(), genes.arrays(), strict=True):
        assert (mine[worst] == given[0]).all()


def test_a_generation_is_written_over_the_islands_own_arrays() -> None:
    """``accept``: the elites then the children, in the arrays the island had (no fresh
    ones each generation); what was taken from it before (a copy) is unchanged."""
    _, space, islands = _islands("hetero-8", "numba")
    island = islands[1]
    settings = GeneticSettings(population=64)  # 2 elites
    assert settings.elites == 2
    before = [a.copy() for a in island.genes.arrays()]
    arrays = [id(a) for a in (*island.genes.arrays(), island.times, island.peaks)]
    best = island.genes.take(island.elites(2))
    taken = [a.copy() for a in best.arrays()]
    children = space.random(island.children(settings), CounterRng(9))
    times, peaks = space.evaluate(children)
    island.accept(settings, children, times, peaks)
    assert [id(a) for a in (*island.genes.arrays(), island.times, island.peaks)] == arrays
    for mine, old, first, rest in zip(
        island.genes.arrays(), before, taken, children.arrays(), strict=True
    ):
        assert (mine[:2] == first).all() and (mine[2:] == rest).all()
        assert not (mine == old).all()
    for kept, copy in zip(best.arrays(), taken, strict=True):
        assert (kept == copy).all()
    assert (island.times[2:] == times).all()
    assert (island.fitness == penalised(island.times, island.peaks, island.held)).all()


def test_chains_whose_plans_take_no_time_anneal_without_dividing_by_zero() -> None:
    """Every op free: each chain's best is 0 ticks, its temperature was 0 (numpy's
    divide-by-zero and invalid-value warnings on the user's stderr). A search now refuses
    such a problem (test_optimizer.py), but a level's best may still be 0 ticks here."""
    free = affine(0, 0)
    problem = Problem(
        batch_size=8,
        stages=[Stage(forward=free, backward=free) for _ in range(2)],
        links=[Link(forward=free, backward=free)],
    )
    ticked = tick_problem(problem)
    evaluator = create_evaluator(ticked, "windowed", "numpy")
    space = JointSpace(evaluator, ticked.forward_caps, ticked.backward_caps, 8)
    genes = space.random(16, CounterRng(3))
    level = stage_level(problem)
    islands = [Island.seeded(level, genes, *space.evaluate(genes), 16, space.limit(level))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found, _ = anneal(islands, space, CounterRng(1), Annealing(steps=5))
    assert found[0] is not None and found[0][1] == 0
