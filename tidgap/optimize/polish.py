"""A last deterministic local search around the GA's best chromosome.

All neighbours of a chromosome (one unit shifted across a boundary, two neighbouring
microbatches merged, a microbatch halved) are scored in batches of at most
``batch_bytes``; the best improving one (the first on ties) is taken, until none
improves or the deadline passes (then the best improving neighbour scored so far, if
any, is the last step).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np

#: ``(N, S, K)`` chromosomes -> ``(N,)`` fitness in ticks.
Score = Callable[[np.ndarray], np.ndarray]

#: Default size of one batch of candidate chromosomes, in bytes.
BATCH_BYTES = 32 << 20


def rows_near(row: np.ndarray, cap: int) -> Iterator[np.ndarray]:
    """Feasible rows one step from ``row`` (sizes in units, zero-padded)."""
    sizes = [int(u) for u in row if u > 0]
    width = len(row)
    for k in range(len(sizes) - 1):
        for step in (-1, 1):
            left, right = sizes[k] + step, sizes[k + 1] - step
            if 1 <= left <= cap and 1 <= right <= cap:
                yield _padded([*sizes[:k], left, right, *sizes[k + 2 :]], width)
        if sizes[k] + sizes[k + 1] <= cap:
            yield _padded([*sizes[:k], sizes[k] + sizes[k + 1], *sizes[k + 2 :]], width)
    if len(sizes) < width:
        for k, size in enumerate(sizes):
            if size >= 2:
                yield _padded([*sizes[:k], size // 2, size - size // 2, *sizes[k + 1 :]], width)


def _padded(sizes: list[int], width: int) -> np.ndarray:
    row = np.zeros(width, dtype=np.int32)
    row[: len(sizes)] = sizes
    return row


def neighbour_batches(genes: np.ndarray, caps: np.ndarray, batch: int) -> Iterator[np.ndarray]:
    """Every chromosome one step away from ``genes`` ``(S, K)``, stage by stage, as
    ``(n, S, K)`` arrays of at most ``batch`` chromosomes."""
    found: list[np.ndarray] = []
    for s in range(genes.shape[0]):
        for row in rows_near(genes[s], int(caps[s])):
            candidate = genes.copy()
            candidate[s] = row
            found.append(candidate)
            if len(found) == batch:
                yield np.stack(found)
                found = []
    if found:
        yield np.stack(found)


def descend(
    genes: np.ndarray,
    fitness: int,
    batches: Callable[[np.ndarray], Iterator[np.ndarray]],
    score: Score,
    deadline: float | None = None,
) -> tuple[np.ndarray, int]:
    """Steepest descent from ``genes`` over the candidates ``batches(genes)`` yields (arrays
    of genes' shape with a leading batch axis) until a local optimum or ``deadline`` (a
    ``time.perf_counter()`` value, checked after every batch); returns the genes reached and
    their fitness."""
    while True:
        best, best_fitness = genes, fitness
        for candidates in batches(genes):
            scores = np.asarray(score(candidates))
            index = int(np.argmin(scores))
            if scores[index] < best_fitness:
                best, best_fitness = candidates[index], int(scores[index])
            if deadline is not None and time.perf_counter() >= deadline:
                return best, best_fitness
        if best_fitness >= fitness:
            return genes, fitness
        genes, fitness = best, best_fitness


def polish(
    genes: np.ndarray,
    fitness: int,
    caps: np.ndarray,
    score: Score,
    deadline: float | None = None,
    batch_bytes: int = BATCH_BYTES,
) -> tuple[np.ndarray, int]:
    """:func:`descend` from the chromosome ``genes`` ``(S, K)`` over its partition
    neighbours (:func:`neighbour_batches`), in batches of at most ``batch_bytes``."""
    batch = max(1, batch_bytes // max(genes.nbytes, 1))
    return descend(genes, fitness, lambda g: neighbour_batches(g, caps, batch), score, deadline)
