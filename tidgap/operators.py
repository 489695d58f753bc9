"""Genetic operators on chromosomes, pure functions over ``xp`` in a registry.

A chromosome set is ``genes``: ``(P, S, K)`` int32 microbatch sizes in units, each row's
microbatches first, then zeros; ``caps``: ``(S,)`` the largest size per stage in units.
Every operator maps feasible rows (sum ``U``, sizes ``1..cap``) to feasible rows, by
construction. Mutations act on one random stage of each individual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidgap.rng import CounterRng
from tidgap.xp import namespace

#: ``operator(genes, caps, rng) -> genes``: one mutation of every individual.
Mutation = Callable[[Any, Any, CounterRng], Any]


def microbatch_counts(genes: Any) -> Any:
    """``(P, S)`` number of microbatches per individual and stage."""
    return (genes > 0).sum(axis=-1)


def crossover(first: Any, second: Any, rng: CounterRng) -> Any:
    """Uniform crossover of whole stages: each child stage is one parent's partition."""
    xp = namespace(first)
    take_first = rng.random(first.shape[:2]) < 0.5
    return xp.where(take_first[:, :, None], first, second)


def _pick_stage(genes: Any, rng: CounterRng) -> tuple[Any, Any, Any]:
    """A random stage per individual: ``(rows, stage, individuals)``, rows ``(P, K)``."""
    xp = namespace(genes)
    population, stages, _ = genes.shape
    stage = rng.integers(0, stages, (population,))
    individuals = xp.arange(population)
    return genes[individuals, stage], stage, individuals


def _put_rows(genes: Any, rows: Any, stage: Any, individuals: Any) -> Any:
    """``genes`` with ``rows`` written back into each individual's chosen stage."""
    result = genes.copy()
    result[individuals, stage] = rows
    return result


def _pair(rows: Any, k: Any) -> tuple[Any, Any]:
    """``rows[p, k[p]]`` and ``rows[p, k[p]+1]`` (``k + 1`` clipped to the last column)."""
    xp = namespace(rows)
    last = rows.shape[1] - 1
    first = xp.take_along_axis(rows, k[:, None], axis=1)[:, 0]
    second = xp.take_along_axis(rows, xp.minimum(k + 1, last)[:, None], axis=1)[:, 0]
    return first, second


def _set_pair(rows: Any, k: Any, first: Any, second: Any, active: Any) -> Any:
    """Rows with columns ``k`` and ``k+1`` set to ``first``, ``second`` where ``active``."""
    xp = namespace(rows)
    column = xp.arange(rows.shape[1])[None, :]
    at_k = (column == k[:, None]) & active[:, None]
    at_next = (column == (k + 1)[:, None]) & active[:, None]
    rows = xp.where(at_k, first[:, None].astype(rows.dtype), rows)
    return xp.where(at_next, second[:, None].astype(rows.dtype), rows)


def _boundary_move(genes: Any, caps: Any, rng: CounterRng, local: bool) -> Any:
    """Move the boundary between microbatches ``k`` and ``k+1`` of a random stage."""
    xp = namespace(genes)
    rows, stage, individuals = _pick_stage(genes, rng)
    count = microbatch_counts(rows[:, None, :])[:, 0]
    k = rng.integers(0, xp.maximum(count - 1, 1), (rows.shape[0],))
    left, right = _pair(rows, k)
    total = left + right
    cap = caps[stage]
    low = xp.maximum(1, total - cap)
    high = xp.minimum(cap, total - 1)
    if local:
        step = xp.where(rng.random((rows.shape[0],)) < 0.5, -1, 1)
        new_left = xp.clip(left + step, low, xp.maximum(high, low))
    else:
        new_left = rng.integers(low, xp.maximum(high, low) + 1, (rows.shape[0],))
    active = (count >= 2) & (high >= low)
    rows = _set_pair(rows, k, new_left, total - new_left, active)
    return _put_rows(genes, rows, stage, individuals)


def move_boundary(genes: Any, caps: Any, rng: CounterRng) -> Any:
    """Re-split two neighbouring microbatches of a random stage at a random point."""
    return _boundary_move(genes, caps, rng, local=False)


def shift_boundary(genes: Any, caps: Any, rng: CounterRng) -> Any:
    """Shift one unit across the boundary between two neighbouring microbatches."""
    return _boundary_move(genes, caps, rng, local=True)


def split_microbatch(genes: Any, caps: Any, rng: CounterRng) -> Any:
    """Split a random microbatch of a random stage in two (if it has room and size >= 2)."""
    del caps  # both halves are smaller than a feasible microbatch
    xp = namespace(genes)
    rows, stage, individuals = _pick_stage(genes, rng)
    population, width = rows.shape
    count = microbatch_counts(rows[:, None, :])[:, 0]
    k = rng.integers(0, xp.maximum(count, 1), (population,))
    size, _ = _pair(rows, k)
    head = rng.integers(1, xp.maximum(size, 2), (population,))
    column = xp.arange(width)[None, :]
    source = xp.where(column <= k[:, None], column, column - 1)
    shifted = xp.take_along_axis(rows, source, axis=1)
    active = (size >= 2) & (count < width)
    rows = xp.where(active[:, None], shifted, rows)
    rows = _set_pair(rows, k, head, size - head, active)
    return _put_rows(genes, rows, stage, individuals)


def merge_microbatches(genes: Any, caps: Any, rng: CounterRng) -> Any:
    """Merge two neighbouring microbatches of a random stage (if the cap allows)."""
    xp = namespace(genes)
    rows, stage, individuals = _pick_stage(genes, rng)
    population, width = rows.shape
    count = microbatch_counts(rows[:, None, :])[:, 0]
    k = rng.integers(0, xp.maximum(count - 1, 1), (population,))
    left, right = _pair(rows, k)
    active = (count >= 2) & (left + right <= caps[stage])
    column = xp.arange(width)[None, :]
    source = xp.where(column <= k[:, None], column, xp.minimum(column + 1, width - 1))
    shifted = xp.take_along_axis(rows, source, axis=1)
    shifted = xp.where(column == width - 1, 0, shifted)
    shifted = xp.where(column == k[:, None], (left + right)[:, None].astype(rows.dtype), shifted)
    rows = xp.where(active[:, None], shifted, rows)
    return _put_rows(genes, rows, stage, individuals)


def copy_neighbour(genes: Any, caps: Any, rng: CounterRng) -> Any:
    """Give a random stage the partition of a neighbouring stage (if its cap allows).

    Aligned partitions let a stage start each microbatch as soon as its input arrives.
    """
    xp = namespace(genes)
    rows, stage, individuals = _pick_stage(genes, rng)
    stages = genes.shape[1]
    direction = xp.where(rng.random((rows.shape[0],)) < 0.5, -1, 1)
    neighbour = xp.clip(stage + direction, 0, stages - 1)
    borrowed = genes[individuals, neighbour]
    fits = borrowed.max(axis=1) <= caps[stage]
    rows = xp.where(fits[:, None], borrowed, rows)
    return _put_rows(genes, rows, stage, individuals)


def equal_rows(total: int, counts: Any, width: int) -> Any:
    """``(P, width)`` equal partitions of ``total`` units into ``counts[p]`` microbatches.

    The split of ``numpy.array_split``: the first ``total % m`` get one unit more.
    """
    xp = namespace(counts)
    column = xp.arange(width)[None, :]
    m = counts[:, None]
    rows = total // m + (column < total % m)
    return xp.where(column < m, rows, 0).astype(xp.int32)


def equalise_stage(genes: Any, caps: Any, rng: CounterRng) -> Any:
    """Replace a random stage's partition by an equal one with a random feasible count."""
    xp = namespace(genes)
    rows, stage, individuals = _pick_stage(genes, rng)
    population, width = rows.shape
    total = int(rows[0].sum())
    fewest = -(-total // caps[stage])
    counts = rng.integers(fewest, xp.maximum(fewest, min(width, total)) + 1, (population,))
    return _put_rows(genes, equal_rows(total, counts, width), stage, individuals)


#: The mutations a search draws from, by name.
MUTATIONS: dict[str, Mutation] = {
    "move_boundary": move_boundary,
    "shift_boundary": shift_boundary,
    "split_microbatch": split_microbatch,
    "merge_microbatches": merge_microbatches,
    "copy_neighbour": copy_neighbour,
    "equalise_stage": equalise_stage,
}


def mutate(genes: Any, caps: Any, rng: CounterRng, rate: float) -> Any:
    """Apply, with probability ``rate`` per individual, one mutation drawn from the registry.

    Each operator runs only on the individuals that drew it.
    """
    xp = namespace(genes)
    population = genes.shape[0]
    chosen = rng.integers(0, len(MUTATIONS), (population,))
    chosen = xp.where(rng.random((population,)) < rate, chosen, -1)
    result = genes.copy()
    for index, operator in enumerate(MUTATIONS.values()):
        members = xp.nonzero(chosen == index)[0]
        if members.size:
            result[members] = operator(genes[members], caps, rng)
    return result


def tournament(fitness: Any, rng: CounterRng, count: int, size: int = 3) -> Any:
    """``count`` indices, each the fittest (least) of ``size`` random individuals."""
    xp = namespace(fitness)
    entrants = rng.integers(0, fitness.shape[0], (count, size))
    best = xp.argmin(fitness[entrants], axis=1)
    return xp.take_along_axis(entrants, best[:, None], axis=1)[:, 0]
