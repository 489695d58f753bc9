"""Genetic operators on chromosomes, pure functions over ``xp`` in a registry.

A chromosome set is ``genes``: ``(P, S, K)`` int32 microbatch sizes in units, each row's
microbatches first, then zeros; ``caps``: ``(S,)`` the largest size per stage in units.
Every operator maps feasible rows (sum ``U``, sizes ``1..cap``) to feasible rows, by
construction. A mutation changes one stage of each individual and reads only that
individual's three uniforms ``u[p] = (stage, position, value)``, so a CUDA thread can
apply it to one individual alone (``kernels/breed.cuh`` does, and tests hold the two equal).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidgap.backends.xp import namespace
from tidgap.optimize.rng import CounterRng, uniform_int

#: ``operator(genes (P, S, K), caps (S,), u (P, 3)) -> genes``: one mutation per individual.
Mutation = Callable[[Any, Any, Any], Any]

#: Uniforms a mutation reads per individual.
MUTATION_UNIFORMS = 3
#: Draws :func:`mutate` (and the joint GA's ``joint_mutate``) makes, in order: the operator,
#: whether to mutate, the uniforms.
MUTATE_DRAWS = 3
#: Draws :func:`breed` (and the joint GA's ``joint_breed``) makes per generation, in order:
#: two tournaments, the crossover, whether to cross, then :func:`mutate`'s.
BREED_DRAWS = 4 + MUTATE_DRAWS


def microbatch_counts(genes: Any) -> Any:
    """``(..., )`` number of microbatches per row of ``(..., K)`` sizes."""
    return (genes > 0).sum(axis=-1)


def crossover(first: Any, second: Any, u: Any) -> Any:
    """Uniform crossover of whole stages: child stage ``s`` is ``first``'s if ``u[p, s] < 0.5``."""
    xp = namespace(first)
    return xp.where((u < 0.5)[:, :, None], first, second)


def _stage_rows(genes: Any, u: Any) -> tuple[Any, Any, Any]:
    """The stage each individual mutates (from ``u[:, 0]``): ``(rows (P, K), stage, index)``."""
    xp = namespace(genes)
    population, stages, _ = genes.shape
    stage = uniform_int(u[:, 0], 0, stages)
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
    return first.astype(xp.int64), second.astype(xp.int64)


def _set_pair(rows: Any, k: Any, first: Any, second: Any, active: Any) -> Any:
    """Rows with columns ``k`` and ``k+1`` set to ``first``, ``second`` where ``active``."""
    xp = namespace(rows)
    column = xp.arange(rows.shape[1])[None, :]
    at_k = (column == k[:, None]) & active[:, None]
    at_next = (column == (k + 1)[:, None]) & active[:, None]
    rows = xp.where(at_k, first[:, None].astype(rows.dtype), rows)
    return xp.where(at_next, second[:, None].astype(rows.dtype), rows)


def _boundary_move(genes: Any, caps: Any, u: Any, local: bool) -> Any:
    """Move the boundary between microbatches ``k`` and ``k+1`` of one stage."""
    xp = namespace(genes)
    rows, stage, individuals = _stage_rows(genes, u)
    count = microbatch_counts(rows)
    k = uniform_int(u[:, 1], 0, xp.maximum(count - 1, 1))
    left, right = _pair(rows, k)
    total = left + right
    cap = caps[stage]
    low = xp.maximum(1, total - cap)
    high = xp.maximum(xp.minimum(cap, total - 1), low)
    if local:
        new_left = xp.clip(left + xp.where(u[:, 2] < 0.5, -1, 1), low, high)
    else:
        new_left = uniform_int(u[:, 2], low, high + 1)
    active = (count >= 2) & (xp.minimum(cap, total - 1) >= low)
    rows = _set_pair(rows, k, new_left, total - new_left, active)
    return _put_rows(genes, rows, stage, individuals)


def move_boundary(genes: Any, caps: Any, u: Any) -> Any:
    """Re-split two neighbouring microbatches of a stage at a random point."""
    return _boundary_move(genes, caps, u, local=False)


def shift_boundary(genes: Any, caps: Any, u: Any) -> Any:
    """Shift one unit across the boundary between two neighbouring microbatches."""
    return _boundary_move(genes, caps, u, local=True)


def split_microbatch(genes: Any, caps: Any, u: Any) -> Any:
    """Split a random microbatch of a stage in two (if it has room and size >= 2)."""
    del caps  # both halves are smaller than a feasible microbatch
    xp = namespace(genes)
    rows, stage, individuals = _stage_rows(genes, u)
    width = rows.shape[1]
    count = microbatch_counts(rows)
    k = uniform_int(u[:, 1], 0, xp.maximum(count, 1))
    size, _ = _pair(rows, k)
    head = uniform_int(u[:, 2], 1, xp.maximum(size, 2))
    column = xp.arange(width)[None, :]
    source = xp.where(column <= k[:, None], column, column - 1)
    shifted = xp.take_along_axis(rows, source, axis=1)
    active = (size >= 2) & (count < width)
    rows = xp.where(active[:, None], shifted, rows)
    rows = _set_pair(rows, k, head, size - head, active)
    return _put_rows(genes, rows, stage, individuals)


def merge_microbatches(genes: Any, caps: Any, u: Any) -> Any:
    """Merge two neighbouring microbatches of a stage (if the cap allows)."""
    xp = namespace(genes)
    rows, stage, individuals = _stage_rows(genes, u)
    width = rows.shape[1]
    count = microbatch_counts(rows)
    k = uniform_int(u[:, 1], 0, xp.maximum(count - 1, 1))
    left, right = _pair(rows, k)
    active = (count >= 2) & (left + right <= caps[stage])
    column = xp.arange(width)[None, :]
    source = xp.where(column <= k[:, None], column, xp.minimum(column + 1, width - 1))
    shifted = xp.take_along_axis(rows, source, axis=1)
    shifted = xp.where(column == width - 1, 0, shifted)
    shifted = xp.where(column == k[:, None], (left + right)[:, None].astype(rows.dtype), shifted)
    rows = xp.where(active[:, None], shifted, rows)
    return _put_rows(genes, rows, stage, individuals)


def copy_neighbour(genes: Any, caps: Any, u: Any) -> Any:
    """Give a stage the partition of a neighbouring stage (if its cap allows).

    Aligned partitions let a stage start each microbatch as soon as its input arrives.
    """
    xp = namespace(genes)
    rows, stage, individuals = _stage_rows(genes, u)
    stages = genes.shape[1]
    neighbour = xp.clip(stage + xp.where(u[:, 1] < 0.5, -1, 1), 0, stages - 1)
    borrowed = genes[individuals, neighbour]
    fits = borrowed.max(axis=1) <= caps[stage]
    rows = xp.where(fits[:, None], borrowed, rows)
    return _put_rows(genes, rows, stage, individuals)


def equal_rows(total: int, counts: Any, width: int) -> Any:
    """``(P, width)`` equal partitions of ``total`` units into ``counts[p]`` microbatches.

    The split of ``numpy.array_split``: the first ``total % m`` get one unit more. In
    int32 throughout (the genes' type): int64 temporaries took 0.1 s a call at 1024 stages
    and 64 individuals, most of it the first touch of their memory.
    """
    xp = namespace(counts)
    column = xp.arange(width, dtype=xp.int32)[None, :]
    m = counts[:, None].astype(xp.int32)
    rows = total // m + (column < total % m)
    return xp.where(column < m, rows, 0).astype(xp.int32, copy=False)


def equalise_stage(genes: Any, caps: Any, u: Any) -> Any:
    """Replace a stage's partition by an equal one with a random feasible count."""
    xp = namespace(genes)
    rows, stage, individuals = _stage_rows(genes, u)
    width = rows.shape[1]
    total = int(rows[0].sum())
    fewest = -(-total // caps[stage])
    counts = uniform_int(u[:, 1], fewest, xp.maximum(fewest, min(width, total)) + 1)
    return _put_rows(genes, equal_rows(total, counts, width), stage, individuals)


#: The mutations a search draws from, by name (their order is part of the seeded stream).
MUTATIONS: dict[str, Mutation] = {
    "move_boundary": move_boundary,
    "shift_boundary": shift_boundary,
    "split_microbatch": split_microbatch,
    "merge_microbatches": merge_microbatches,
    "copy_neighbour": copy_neighbour,
    "equalise_stage": equalise_stage,
}


def mutate(genes: Any, caps: Any, rng: CounterRng, rate: float) -> Any:
    """With probability ``rate`` per individual, one mutation drawn from the registry.

    Three draws, each over all ``P`` individuals: the operator, whether to mutate, and the
    operator's uniforms ``(P, 3)``. Each operator runs only on the individuals that drew it.
    """
    xp = namespace(genes)
    population = genes.shape[0]
    chosen = rng.integers(0, len(MUTATIONS), (population,))
    chosen = xp.where(rng.random((population,)) < rate, chosen, -1)
    u = rng.random((population, MUTATION_UNIFORMS))
    result = genes.copy()
    for index, operator in enumerate(MUTATIONS.values()):
        members = xp.nonzero(chosen == index)[0]
        if members.size:
            result[members] = operator(genes[members], caps, u[members])
    return result


def tournament(fitness: Any, rng: CounterRng, count: int, size: int = 3) -> Any:
    """``count`` indices, each the fittest (least; first on ties) of ``size`` random ones."""
    xp = namespace(fitness)
    entrants = rng.integers(0, fitness.shape[0], (count, size))
    best = xp.argmin(fitness[entrants], axis=1)
    return xp.take_along_axis(entrants, best[:, None], axis=1)[:, 0]


def breed(
    genes: Any,
    fitness: Any,
    caps: Any,
    rng: CounterRng,
    children: int,
    crossover_rate: float,
    mutation_rate: float,
    tournament_size: int,
) -> Any:
    """``(children, S, K)`` offspring: two tournaments, stage crossover (with probability
    ``crossover_rate``, else the first parent), then :func:`mutate`. Seven draws, in order."""
    xp = namespace(genes)
    first = tournament(fitness, rng, children, tournament_size)
    second = tournament(fitness, rng, children, tournament_size)
    crossed = crossover(genes[first], genes[second], rng.random((children, genes.shape[1])))
    use_cross = rng.random((children,)) < crossover_rate
    offspring = xp.where(use_cross[:, None, None], crossed, genes[first])
    return mutate(offspring, caps, rng, mutation_rate)
