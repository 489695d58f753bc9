"""A last deterministic local search around the GA's best chromosome.

All neighbours of a chromosome (one unit shifted across a boundary, two neighbouring
microbatches merged, a microbatch halved) are scored as one batch; the best improving
one is taken, until none improves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

#: ``(N, S, K)`` chromosomes -> ``(N,)`` fitness in ticks.
Score = Callable[[np.ndarray], np.ndarray]


def _rows_near(row: np.ndarray, cap: int) -> Iterator[np.ndarray]:
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


def neighbours(genes: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """``(N, S, K)``: every chromosome one step away from ``genes`` ``(S, K)``."""
    found = []
    for s in range(genes.shape[0]):
        for row in _rows_near(genes[s], int(caps[s])):
            candidate = genes.copy()
            candidate[s] = row
            found.append(candidate)
    return np.stack(found) if found else np.empty((0, *genes.shape), dtype=genes.dtype)


def polish(
    genes: np.ndarray, fitness: int, caps: np.ndarray, score: Score
) -> tuple[np.ndarray, int]:
    """Steepest descent from ``genes`` ``(S, K)``; returns the local optimum and its fitness."""
    while True:
        candidates = neighbours(genes, caps)
        if len(candidates) == 0:
            return genes, fitness
        scores = np.asarray(score(candidates))
        best = int(np.argmin(scores))
        if scores[best] >= fitness:
            return genes, fitness
        genes, fitness = candidates[best], int(scores[best])
