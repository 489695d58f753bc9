"""GA operators: every child is feasible, the registry is complete, draws are seeded."""

from __future__ import annotations

import numpy as np
import pytest

from tidgap.optimize.ga import Chromosomes, GeneticSettings, random_chromosomes
from tidgap.optimize.operators import (
    MUTATION_UNIFORMS,
    MUTATIONS,
    crossover,
    equal_rows,
    microbatch_counts,
    mutate,
    tournament,
)
from tidgap.optimize.rng import CounterRng

UNITS, STAGES, WIDTH = 24, 4, 12
CAPS = np.array([24, 6, 8, 12], dtype=np.int64)


def assert_feasible(genes: np.ndarray, caps: np.ndarray = CAPS, units: int = UNITS) -> None:
    """Sums, caps, no gaps: a row is its microbatches first, zeros after."""
    assert genes.dtype == np.int32
    assert (genes.sum(axis=-1) == units).all()
    assert (genes.max(axis=-1) <= caps).all()
    assert (genes >= 0).all()
    counts = microbatch_counts(genes)
    column = np.arange(genes.shape[-1])
    assert ((genes > 0) == (column < counts[..., None])).all(), "zeros inside a row"


@pytest.fixture
def population() -> np.ndarray:
    return random_chromosomes(256, STAGES, WIDTH, UNITS, CAPS, CounterRng(7))


def test_random_chromosomes_are_feasible_and_diverse(population: np.ndarray) -> None:
    assert_feasible(population)
    assert len({row.tobytes() for row in population}) > 200


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_every_mutation_keeps_children_feasible(name: str, population: np.ndarray) -> None:
    rng = CounterRng(11)
    genes = population
    changed = 0
    for _ in range(20):
        child = MUTATIONS[name](genes, CAPS, rng.random((len(genes), MUTATION_UNIFORMS)))
        assert_feasible(child)
        changed += int((child != genes).any(axis=(1, 2)).sum())
        genes = child
    assert changed > 0, f"{name} never changed anything"


def test_mutations_touch_one_stage_per_individual(population: np.ndarray) -> None:
    for name, operator in MUTATIONS.items():
        child = operator(population, CAPS, CounterRng(3).random((256, MUTATION_UNIFORMS)))
        stages_changed = (child != population).any(axis=2).sum(axis=1)
        assert (stages_changed <= 1).all(), name


def test_split_and_merge_change_the_count_by_one(population: np.ndarray) -> None:
    before = microbatch_counts(population)
    u = CounterRng(5).random((256, MUTATION_UNIFORMS))
    split = MUTATIONS["split_microbatch"](population, CAPS, u)
    delta = microbatch_counts(split).sum(axis=1) - before.sum(axis=1)
    assert set(np.unique(delta)) <= {0, 1} and delta.max() == 1
    merged = MUTATIONS["merge_microbatches"](population, CAPS, u)
    delta = microbatch_counts(merged).sum(axis=1) - before.sum(axis=1)
    assert set(np.unique(delta)) <= {-1, 0} and delta.min() == -1


def test_crossover_takes_whole_stages_from_either_parent(population: np.ndarray) -> None:
    first, second = population[:128], population[128:]
    child = crossover(first, second, CounterRng(2).random((128, STAGES)))
    assert_feasible(child)
    from_first = (child == first).all(axis=2)
    from_second = (child == second).all(axis=2)
    assert (from_first | from_second).all()
    assert from_first.any() and (~from_first).any()


def test_mutate_respects_its_rate(population: np.ndarray) -> None:
    unchanged = mutate(population, CAPS, CounterRng(1), rate=0.0)
    assert np.array_equal(unchanged, population)
    changed = mutate(population, CAPS, CounterRng(1), rate=1.0)
    assert_feasible(changed)
    assert (changed != population).any(axis=(1, 2)).mean() > 0.5


def test_equal_rows_split_like_array_split() -> None:
    rows = equal_rows(10, np.array([1, 3, 4, 10]), 10)
    for row, m in zip(rows, [1, 3, 4, 10], strict=True):
        expected = [len(part) for part in np.array_split(np.arange(10), m)]
        assert row[:m].tolist() == expected and not row[m:].any()


def test_tournament_prefers_the_fitter() -> None:
    fitness = np.arange(100, dtype=np.int64)
    picks = tournament(fitness, CounterRng(4), 1000, size=3)
    assert picks.mean() < 40  # uniform picks would average 49.5


def test_same_seed_same_draws_other_seed_other_draws() -> None:
    assert np.array_equal(CounterRng(9).random((50,)), CounterRng(9).random((50,)))
    assert not np.array_equal(CounterRng(9).random((50,)), CounterRng(10).random((50,)))
    draws = CounterRng(9).integers(3, 7, (1000,))
    assert draws.min() == 3 and draws.max() == 6


def test_elitism_never_loses_the_best(population: np.ndarray) -> None:
    def score(genes: np.ndarray) -> np.ndarray:
        """A stand-in fitness: squared deviation from 2-unit microbatches."""
        return ((genes - 2) ** 2 * (genes > 0)).sum(axis=(1, 2)).astype(np.int64)

    side = Chromosomes(population, score(population), CAPS, score)
    settings = GeneticSettings(population=256)
    rng = CounterRng(1)
    best = side.best()[1]
    for _ in range(30):
        side.step(settings, rng)
        assert_feasible(side.genes)
        assert side.best()[1] <= best
        best = side.best()[1]
    assert np.array_equal(side.fitness, score(side.genes))


def test_seeds_past_64_bits_draw_apart_and_the_others_as_before() -> None:
    """``seed % 2**64`` made 0, 2**64 and -2**64 one search; a seed within 64 bits keeps
    its draws (plans found before stay reproducible)."""
    from tidgap.optimize.rng import seed_word, splitmix64

    seeds = [0, 1, 2**64 - 1, 2**64, -(2**64), -1, 10**99, -(10**99)]
    keys = [CounterRng(seed).key for seed in seeds]
    assert len(set(keys)) == len(seeds)
    expected = int(splitmix64(np.array([2**64 - 1], dtype=np.uint64))[0])
    assert CounterRng(2**64 - 1).key == expected and seed_word(5) == 5
    assert CounterRng(-(10**99)).key == CounterRng(-(10**99)).key
