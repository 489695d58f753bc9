"""The Numba backend's fused breeding and mutation (``fallback_cpu/breed_numba.py``) give
exactly the children of the ``xp`` operators, for the same seed: the flush GA's
:func:`~tidgap.optimize.operators.breed`, the joint GA's
:func:`~tidgap.optimize.joint_operators.joint_breed` and the annealing's
:func:`~tidgap.optimize.joint_operators.mutate_repaired`."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.populations import (
    assert_breeds_into_a_part,
    assert_same_children,
    random_joint,
    random_population,
)
from tidgap.backends import BACKENDS, load
from tidgap.optimize.joint import backend_breeding
from tidgap.optimize.joint_operators import (
    JOINT_MUTATIONS,
    joint_breed,
    mirror,
    mutate_repaired,
    mutation_table,
)
from tidgap.optimize.operators import breed
from tidgap.optimize.rng import CounterRng, uniform_int

pytest.importorskip("numba")
NUMBA = BACKENDS["numba"]


@pytest.mark.parametrize("seed", range(8))
def test_numba_breed_equals_the_xp_operators(seed: int) -> None:
    """Selection, crossover and every partition mutation, on random caps and counts."""
    numba_breed = load(NUMBA.breeder or "")
    rng = np.random.default_rng(100 + seed)
    stages, units = int(rng.integers(1, 7)), int(rng.integers(2, 60))
    caps = rng.integers(-(-units // 12), units + 1, size=stages).astype(np.int64)
    genes = random_population(rng, caps, units, size=300, width=16, max_count=12)
    fitness = rng.integers(0, 50, size=300).astype(np.int64)  # ties on purpose
    settings = dict(children=290, crossover_rate=0.7, mutation_rate=0.95, tournament_size=3)
    expected = breed(genes, fitness, caps, CounterRng(seed), **settings)
    got = numba_breed(genes, fitness, caps, CounterRng(seed), **settings)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    assert (got != genes[:290]).any()


@pytest.mark.parametrize("mirrored", [False, True])
@pytest.mark.parametrize("width", [3, 8, 32])
@pytest.mark.parametrize("seed", range(4))
def test_numba_joint_breed_equals_the_xp_operators(seed: int, width: int, mirrored: bool) -> None:
    """Partitions, leads and codes of ``joint_breed``'s children (``mirrored`` or not), for
    S = 1..4 (leads not repaired in the parents: the repair runs on every child)."""
    numba_joint_breed = load(NUMBA.joint_breeder or "")
    rng = np.random.default_rng(1000 * width + seed)
    genes, forward_caps, backward_caps = random_joint(rng, seed + 1, width, size=800)
    fitness = rng.integers(0, 100, size=800).astype(np.int64)
    settings = dict(
        children=790, crossover_rate=0.7, mutation_rate=0.9, tournament_size=3, mirrored=mirrored
    )
    args = (genes, fitness, forward_caps, backward_caps)
    expected = joint_breed(*args, CounterRng(seed), **settings)
    assert_same_children(numba_joint_breed(*args, CounterRng(seed), **settings), expected)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_joint_breeder_breeds_into_a_part_of_a_larger_population(backend: str) -> None:
    breeder = backend_breeding(BACKENDS[backend])[0]
    rng = np.random.default_rng(5)
    genes, forward_caps, backward_caps = random_joint(rng, 4, 8, size=60)
    fitness = rng.integers(0, 100, size=60).astype(np.int64)
    settings = dict(children=50, crossover_rate=0.7, mutation_rate=0.9, tournament_size=3)
    assert_breeds_into_a_part(breeder, (genes, fitness, forward_caps, backward_caps), 3, settings)


@pytest.mark.parametrize("mirrored", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_numba_mutation_equals_mutate_repaired_and_uses_every_mutation(
    seed: int, mirrored: bool
) -> None:
    """The annealing's step: one mutation per individual, then the repair; each mutation of
    the table (all, or the mirrored ones) changes some individuals; the given genes are left
    as they were."""
    rng = np.random.default_rng(seed)
    genes, forward_caps, backward_caps = random_joint(rng, stages=4, width=12, size=1500)
    if mirrored:  # mirrored parents, as a mirrored search has
        genes = mirror(genes, np.minimum(forward_caps, backward_caps))
    genes = genes.repaired()
    kept = [rows.copy() for rows in genes.arrays()]
    _, _, mutate = backend_breeding(NUMBA)
    args = (genes, forward_caps, backward_caps)
    got = mutate(*args, CounterRng(seed), 1.0, mirrored)
    assert_same_children(got, mutate_repaired(*args, CounterRng(seed), 1.0, mirrored))
    for before, after in zip(kept, genes.arrays(), strict=True):
        np.testing.assert_array_equal(before, after)
    table = mutation_table(mirrored)
    chosen = uniform_int(CounterRng(seed).random((1500,)), 0, len(table))
    names = list(JOINT_MUTATIONS)
    for index, name in enumerate(names[position] for position in table):
        members = chosen == index
        pairs = zip(got.arrays(), kept, strict=True)
        assert any((a[members] != b[members]).any() for a, b in pairs), name


def test_a_rate_below_one_leaves_the_undrawn_individuals_repaired_as_they_were() -> None:
    rng = np.random.default_rng(9)
    genes, forward_caps, backward_caps = random_joint(rng, stages=3, width=8, size=400)
    _, _, mutate = backend_breeding(NUMBA)
    got = mutate(genes, forward_caps, backward_caps, CounterRng(1), 0.3)
    assert_same_children(
        got, mutate_repaired(genes, forward_caps, backward_caps, CounterRng(1), 0.3)
    )
    draws = CounterRng(1)
    draws.stream()
    untouched = draws.random((400,)) >= 0.3
    assert 0 < untouched.sum() < 400
    same = genes.repaired().take(np.flatnonzero(untouched))
    assert_same_children(got.take(np.flatnonzero(untouched)), same)


def test_no_children_is_an_empty_generation() -> None:
    rng = np.random.default_rng(2)
    genes, forward_caps, backward_caps = random_joint(rng, stages=2, width=4, size=10)
    fitness = np.zeros(10, dtype=np.int64)
    breeder, _, _ = backend_breeding(NUMBA)
    got = breeder(genes, fitness, forward_caps, backward_caps, CounterRng(0), 0, 0.5, 0.5, 3)
    assert got.size == 0 and got.codes.shape == (0, 2, 8)
