"""The joint GA's operators: mutations keep partitions feasible and change one stage of one
gene, crossover takes whole stages, bred children are valid and seeded."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.optimize.test_operators import assert_feasible
from tests.support import fake_cupy
from tests.support.populations import random_population
from tidgap.optimize.genome import GENE, decode_order, decode_partitions
from tidgap.optimize.joint_operators import (
    JOINT_MUTATIONS,
    MIRRORED_MUTATIONS,
    JointGenes,
    joint_breed,
    joint_crossover,
    joint_mutate,
    mirror,
    mutation_table,
)
from tidgap.optimize.operators import MUTATION_UNIFORMS
from tidgap.optimize.order_genes import canonical
from tidgap.optimize.rng import CounterRng
from tidgap.schedules.ir import first_violation

UNITS, STAGES, WIDTH, SIZE = 24, 4, 12, 256
FORWARD_CAPS = np.array([24, 6, 8, 12], dtype=np.int64)
BACKWARD_CAPS = np.array([4, 24, 12, 3], dtype=np.int64)
SETTINGS = {"crossover_rate": 0.8, "mutation_rate": 0.9, "tournament_size": 3}


def individuals(
    seed: int,
    size: int = SIZE,
    forward_caps: np.ndarray = FORWARD_CAPS,
    backward_caps: np.ndarray = BACKWARD_CAPS,
) -> JointGenes:
    """``size`` repaired individuals: random partitions of ``U`` units within the caps (rows
    of different counts, ``K = WIDTH``), random leads in ``-3..S+3``."""
    rng = np.random.default_rng(seed)
    forward = random_population(rng, forward_caps, UNITS, size, WIDTH)
    backward = random_population(rng, backward_caps, UNITS, size, WIDTH)
    lead = rng.integers(-3, len(forward_caps) + 4, size=forward.shape).astype(GENE)
    return JointGenes(forward, backward, lead).repaired()


def assert_partitions_feasible(
    genes: JointGenes,
    forward_caps: np.ndarray = FORWARD_CAPS,
    backward_caps: np.ndarray = BACKWARD_CAPS,
) -> None:
    """Both directions: rows sum to ``U``, sizes ``1..cap``, zeros only after."""
    assert_feasible(genes.forward, forward_caps, UNITS)
    assert_feasible(genes.backward, backward_caps, UNITS)


def assert_valid(
    genes: JointGenes,
    forward_caps: np.ndarray = FORWARD_CAPS,
    backward_caps: np.ndarray = BACKWARD_CAPS,
) -> None:
    """Feasible partitions, canonical leads, and codes that decode to valid orders."""
    assert_partitions_feasible(genes, forward_caps, backward_caps)
    assert genes.lead.dtype == GENE
    lead, codes = canonical(genes.forward, genes.backward, genes.lead)
    np.testing.assert_array_equal(lead, genes.lead)
    np.testing.assert_array_equal(codes, genes.codes)
    for p in range(genes.size):
        forward = decode_partitions(genes.forward[p], 1)
        backward = decode_partitions(genes.backward[p], 1)
        violation = first_violation(decode_order(genes.codes[p]), forward, backward)
        assert violation is None, (p, violation)


def changed_pieces(child: JointGenes, parent: JointGenes) -> np.ndarray:
    """``(P,)``: how many (gene, stage) rows of each individual differ from its parent."""
    pieces = [
        (getattr(child, gene) != getattr(parent, gene)).any(axis=2)
        for gene in ("forward", "backward", "lead")
    ]
    return np.stack(pieces, axis=1).sum(axis=(1, 2))


@pytest.fixture(scope="module")
def population() -> JointGenes:
    return individuals(7)


def test_the_random_individuals_are_valid(population: JointGenes) -> None:
    assert_valid(population)


@pytest.mark.parametrize("name", list(JOINT_MUTATIONS))
def test_every_mutation_keeps_partitions_feasible_and_changes_one_stage_of_one_gene(
    name: str, population: JointGenes
) -> None:
    rng = CounterRng(11)
    genes, changed = population, 0
    for _ in range(10):
        u = rng.random((genes.size, MUTATION_UNIFORMS))
        child = JOINT_MUTATIONS[name](genes, FORWARD_CAPS, BACKWARD_CAPS, u)
        assert child.codes is None
        assert_partitions_feasible(child)
        assert child.lead.dtype == GENE
        pieces = changed_pieces(child, genes)
        assert (pieces <= 1).all(), f"{name} changed {pieces.max()} rows of an individual"
        changed += int((pieces > 0).sum())
        genes = child.repaired()
        assert_partitions_feasible(genes)
    assert changed > 0, f"{name} never changed anything"


def test_mutate_keeps_its_rate_and_one_change_per_individual(population: JointGenes) -> None:
    same = joint_mutate(population, FORWARD_CAPS, BACKWARD_CAPS, CounterRng(1), rate=0.0)
    assert (changed_pieces(same, population) == 0).all()
    child = joint_mutate(population, FORWARD_CAPS, BACKWARD_CAPS, CounterRng(1), rate=1.0)
    pieces = changed_pieces(child, population)
    assert_partitions_feasible(child)
    assert (pieces <= 1).all() and (pieces == 1).mean() > 0.5


def test_the_mirrored_table_leaves_out_exactly_what_a_mirror_undoes() -> None:
    names = [list(JOINT_MUTATIONS)[position] for position in MIRRORED_MUTATIONS]
    left_out = set(JOINT_MUTATIONS) - set(names)
    assert left_out == {n for n in JOINT_MUTATIONS if n.startswith("backward_")} | {
        "align_directions"
    }
    assert names == sorted(names, key=list(JOINT_MUTATIONS).index)
    assert mutation_table(False) == tuple(range(len(JOINT_MUTATIONS)))


def test_a_mirrored_mutation_changes_one_stage_and_keeps_every_child_mirrored() -> None:
    caps = np.minimum(FORWARD_CAPS, BACKWARD_CAPS)
    parents = mirror(individuals(3, 512, caps, caps), caps).repaired()
    assert (parents.forward == parents.backward).all()
    child = joint_mutate(parents, caps, caps, CounterRng(1), rate=1.0, mirrored=True)
    assert_feasible(child.forward, caps, UNITS)
    np.testing.assert_array_equal(child.forward, child.backward)
    forward_rows = (child.forward != parents.forward).any(axis=2).sum(axis=1)
    lead_rows = (child.lead != parents.lead).any(axis=2).sum(axis=1)
    assert (forward_rows + lead_rows <= 1).all()
    full = mirror(joint_mutate(parents, caps, caps, CounterRng(1), rate=1.0), caps)
    full_rows = sum((getattr(full, g) != getattr(parents, g)).any(axis=2).sum(axis=1)
                    for g in ("forward", "lead"))  # fmt: skip
    # the full table's backward and align mutations are undone by the mirror
    assert (forward_rows + lead_rows == 1).mean() > (full_rows == 1).mean() + 0.2


def test_the_mirror_leaves_an_individual_over_the_backward_caps_as_it_is(
    population: JointGenes,
) -> None:
    mirrored = mirror(population, BACKWARD_CAPS)
    fits = (population.forward <= BACKWARD_CAPS[None, :, None]).all(axis=(1, 2))
    assert fits.any() and (~fits).any()
    np.testing.assert_array_equal(mirrored.backward[fits], population.forward[fits])
    np.testing.assert_array_equal(mirrored.backward[~fits], population.backward[~fits])


def test_crossover_takes_each_stages_three_rows_from_one_parent() -> None:
    first, second = individuals(1, 128), individuals(2, 128)
    second = JointGenes(second.forward, second.backward, first.lead + 1)  # differ everywhere
    u = CounterRng(2).random((128, STAGES))
    child = joint_crossover(first, second, u)
    assert_partitions_feasible(child)
    pick = u < 0.5
    for gene in ("forward", "backward", "lead"):
        rows = getattr(child, gene)
        np.testing.assert_array_equal(rows[pick], getattr(first, gene)[pick])
        np.testing.assert_array_equal(rows[~pick], getattr(second, gene)[~pick])
    assert pick.any() and (~pick).any()


def breed(genes: JointGenes, seed: int, xp=np) -> JointGenes:
    """300 children of ``genes`` (fitness: a fixed random score) with ``CounterRng(seed, xp)``."""
    fitness = np.random.default_rng(0).integers(0, 1000, genes.size)
    arrays = JointGenes(*(xp.asarray(a) for a in (genes.forward, genes.backward, genes.lead)))
    return joint_breed(
        arrays,
        xp.asarray(fitness),
        xp.asarray(FORWARD_CAPS),
        xp.asarray(BACKWARD_CAPS),
        CounterRng(seed, xp),
        children=300,
        **SETTINGS,
    )


def assert_same(first: JointGenes, second: JointGenes) -> None:
    for gene in ("forward", "backward", "lead", "codes"):
        np.testing.assert_array_equal(getattr(first, gene), getattr(second, gene))


def test_bred_children_are_valid(population: JointGenes) -> None:
    children = breed(population, 5)
    assert children.size == 300
    assert_valid(children)


@pytest.mark.parametrize("stages", [1, 2, 6])
def test_generations_of_children_stay_valid_on_any_pipeline(stages: int) -> None:
    caps = np.random.default_rng(stages).integers(2, UNITS + 1, size=(2, stages))
    genes = individuals(stages, 64, caps[0], caps[1])
    for generation in range(8):
        fitness = np.random.default_rng(generation).integers(0, 100, genes.size)
        genes = joint_breed(
            genes, fitness, caps[0], caps[1], CounterRng(generation), children=64, **SETTINGS
        )
        assert_valid(genes, caps[0], caps[1])


def test_same_seed_same_children_other_seed_other_children(population: JointGenes) -> None:
    assert_same(breed(population, 5), breed(population, 5))
    other = breed(population, 6)
    assert not np.array_equal(other.lead, breed(population, 5).lead)


def test_numpy_and_the_cupy_stand_in_breed_the_same_children(
    population: JointGenes, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in = fake_cupy.module()
    monkeypatch.setitem(sys.modules, "cupy", stand_in)  # where namespace() finds CuPy
    assert_same(breed(population, 9, stand_in), breed(population, 9))


@pytest.mark.parametrize("count", [SIZE, SIZE // 3, 1])
def test_reordering_in_place_gives_the_rows_a_copy_would_and_allocates_none(
    population: JointGenes, count: int
) -> None:
    """:meth:`JointGenes.reordered` (every cycle of a permutation, fixed points, a prefix)
    equals :meth:`JointGenes.take` of the same rows, in the arrays it was given."""
    order = np.concatenate([[0, 1], 2 + np.random.default_rng(count).permutation(SIZE - 2)])
    genes = JointGenes(*(array.copy() for array in population.arrays()))
    reordered = genes.reordered(order, count)
    for mine, copied, given in zip(
        reordered.arrays(), population.take(order[:count]).arrays(), genes.arrays(), strict=True
    ):
        np.testing.assert_array_equal(mine, copied)
        assert np.shares_memory(mine, given)
