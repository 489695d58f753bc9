"""Random feasible populations (with random orders, valid or not; joint-GA genes), random tick
tables, and the check that two sets of children are equal, for backend and kernel tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from tidgap import Order, Plan
from tidgap.backends.ticks import TickedProblem
from tidgap.backends.xp import namespace
from tidgap.optimize.genome import FORWARD_OP, NO_OP, ORDER_GENE, Population, encode_order
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.rng import CounterRng
from tidgap.schedules.ir import repair


def random_partition(rng: np.random.Generator, total: int, cap: int, count: int) -> np.ndarray:
    """An ordered partition of ``total`` into ``count`` positive parts of at most ``cap``."""
    assert -(-total // cap) <= count <= total
    parts = np.ones(count, dtype=np.int64) + rng.multinomial(total - count, [1 / count] * count)
    while (parts > cap).any():  # move the excess of over-full parts to parts with room
        over = int(np.argmax(parts))
        room = np.flatnonzero(parts < cap)
        target = room[rng.integers(len(room))]
        moved = min(parts[over] - cap, cap - parts[target])
        parts[over] -= moved
        parts[target] += moved
    assert parts.sum() == total and parts.min() >= 1 and parts.max() <= cap
    return parts


def random_population(
    rng: np.random.Generator,
    caps: np.ndarray,
    num_units: int,
    size: int,
    width: int,
    max_count: int | None = None,
) -> np.ndarray:
    """``(size, S, width)`` int32: per row a random microbatch count, then a random partition.

    Counts run from the fewest the cap allows to ``max_count`` (default: all units, capped
    by ``width``), so rows of one individual have different lengths; zeros pad each row.
    """
    stages = len(caps)
    genes = np.zeros((size, stages, width), dtype=np.int32)
    highest = min(num_units, width, max_count or num_units)
    for p in range(size):
        for s in range(stages):
            fewest = -(-num_units // int(caps[s]))
            assert fewest <= width, f"stage {s} needs {fewest} microbatches, wider than {width}"
            count = int(rng.integers(fewest, max(fewest, highest) + 1))
            parts = random_partition(rng, num_units, int(caps[s]), count)
            genes[p, s, :count] = parts
    return genes


def random_ticked(rng: np.random.Generator, stages: int, num_units: int, top: int) -> TickedProblem:
    """Random tick tables (entry 0 is 0, entries past a cap are 0) with values up to ``top``."""
    smallest = -(-num_units // 40)  # at most 40 microbatches per row
    fcaps = rng.integers(smallest, num_units + 1, size=stages)
    bcaps = rng.integers(smallest, num_units + 1, size=stages)

    def tables(rows: int, caps: np.ndarray) -> np.ndarray:
        values = rng.integers(0, top + 1, size=(rows, num_units + 1), dtype=np.int64)
        values[:, 0] = 0
        values[rng.random(values.shape) < 0.1] = 0  # some free operations and links
        for r in range(rows):
            values[r, caps[r] + 1 :] = 0
        return values

    return TickedProblem(
        tick=1.0,
        num_units=num_units,
        unit=1,
        forward_compute=tables(stages, fcaps),
        backward_compute=tables(stages, bcaps),
        forward_transfer=tables(stages - 1, fcaps[:-1]),
        backward_transfer=tables(stages - 1, bcaps[1:]),
        tails=rng.integers(0, top + 1, size=stages),
        forward_caps=fcaps.astype(np.int64),
        backward_caps=bcaps.astype(np.int64),
    )


def with_run_tables(ticked: TickedProblem) -> TickedProblem:
    """``ticked`` priced as ``tidgap run`` runs plans, with tables that differ from its own:
    a recomputing stage's forwards twice ``Tf``, its backwards three times ``Tb``; a
    forward right after a backward 3/4 ``Tf``, the last stage's backward right after its
    own forward 5/8 ``Tb``."""
    fc, bc = ticked.forward_compute, ticked.backward_compute
    return replace(
        ticked,
        recompute_forward=2 * fc,
        recompute_backward=3 * bc,
        forward_after_backward=3 * fc // 4,
        backward_after_forward=5 * bc // 8,
    )


def random_individuals(
    rng: np.random.Generator, ticked: TickedProblem, size: int, width: int, max_count: int = 40
) -> Population:
    """Forward and backward chromosomes within the ticked problem's caps."""
    U = ticked.num_units
    return Population(
        random_population(rng, ticked.forward_caps, U, size, width, max_count),
        random_population(rng, ticked.backward_caps, U, size, width, max_count),
    )


def random_orders(
    rng: np.random.Generator, population: Population, repaired: float = 0.5, broken: float = 0.1
) -> Population:
    """``population`` with ``(P, S, 2K)`` order genes: per stage a random interleaving of its
    ``M_s`` forwards and ``N_s`` backwards (rules 1 and 2 may break: deadlocks), repaired to
    validity (:func:`tidgap.schedules.ir.repair`) for a fraction ``repaired`` of the
    individuals, and for a fraction ``broken`` one code changed so rule ``count`` breaks."""
    count, stages, width = population.forward.shape
    genes = np.full((count, stages, 2 * width), NO_OP, dtype=ORDER_GENE)
    for p in range(count):
        forward = [[int(u) for u in row if u] for row in population.forward[p]]
        backward = [[int(u) for u in row if u] for row in population.backward[p]]
        letters = []
        for f, b in zip(forward, backward, strict=True):
            ops = np.array(["F"] * len(f) + ["B"] * len(b))
            letters.append("".join(rng.permutation(ops)))
        order = Order.of(letters)
        if rng.random() < repaired:
            order = repair(order, forward, backward)
        genes[p] = encode_order(Plan.of(forward, backward, order=list(order.stages)), width)
        if rng.random() < broken:
            s = int(rng.integers(stages))
            genes[p, s, int(rng.integers(2 * width))] = rng.choice([NO_OP, FORWARD_OP, 2])
    return replace(population, order=genes)


def random_joint(
    rng: np.random.Generator, stages: int, width: int, size: int
) -> tuple[JointGenes, np.ndarray, np.ndarray]:
    """``(genes, forward_caps, backward_caps)``: valid random partitions of a random unit
    count within random caps per direction, and random leads (not repaired: some far out of
    range, padding not 0)."""
    units = int(rng.integers(1, 3 * width))
    fewest = -(-units // width)
    caps = [rng.integers(fewest, units + 1, size=stages).astype(np.int64) for _ in range(2)]
    forward, backward = (random_population(rng, c, units, size, width) for c in caps)
    lead = rng.integers(-3, stages + 3, size=(size, stages, width)).astype(np.int32)
    return JointGenes(forward, backward, lead), caps[0], caps[1]


def assert_same_children(got: JointGenes, expected: JointGenes) -> None:
    """Forward, backward, leads and codes equal, with the same dtypes."""
    for name in ("forward", "backward", "lead", "codes"):
        want = getattr(expected, name)
        assert getattr(got, name).dtype == want.dtype, name
        np.testing.assert_array_equal(getattr(got, name), want, err_msg=name)


def assert_breeds_into_a_part(
    breed: Callable[..., JointGenes], args: tuple, seed: int, settings: dict[str, Any]
) -> None:
    """``breed(*args, CounterRng(seed), out=part, **settings)``, ``part`` the middle of a
    larger population on the arrays' module, returns ``part`` holding the children of the
    same call without ``out``, and writes nothing around it (as ``JointOptimizer.ask``
    breeds every island's children into one population)."""
    expected = breed(*args, CounterRng(seed), **settings)
    xp = namespace(args[0].forward)
    whole = JointGenes.empty(expected.size + 5, *expected.forward.shape[1:], xp)
    for array in whole.arrays():
        array[...] = -7
    part = whole.take(slice(2, 2 + expected.size))
    assert breed(*args, CounterRng(seed), out=part, **settings) is part
    assert_same_children(part, expected)
    for array in whole.arrays():
        assert (array[:2] == -7).all() and (array[2 + expected.size :] == -7).all()


def coarsened_backwards(
    rng: np.random.Generator, population: Population, caps: np.ndarray, mirrored: float = 0.3
) -> Population:
    """``population`` with each backward row made of the forward row's chunks (every
    backward boundary a forward boundary): the forward row itself for a fraction
    ``mirrored`` of the rows, else neighbouring chunks merged at random within ``caps``
    (``(S,)`` units)."""
    backward = np.zeros_like(population.forward)
    for p, s in np.ndindex(population.forward.shape[:2]):
        chunks = [int(u) for u in population.forward[p, s] if u]
        merged = [chunks[0]]
        for size in chunks[1:]:
            if rng.random() >= mirrored and merged[-1] + size <= caps[s] and rng.random() < 0.5:
                merged[-1] += size
            else:
                merged.append(size)
        backward[p, s, : len(merged)] = merged
    return replace(population, backward=backward)
