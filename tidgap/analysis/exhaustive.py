"""The proven flush optimum of tiny problems, by enumeration.

With the flush, ``iteration_time = forward_end + backward_span`` and each term depends on
one direction's partitions only (model.md, separability), so each term is minimised on its
own over every per-stage composition of the batch within the caps (``prod_s 2^(U-1)``
rows per direction at most), scored in batches by a flush evaluator. For checking the
search on problems small enough (a few stages of at most about 8 units).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.ticks import tick_problem
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem

#: Individuals scored per call of the evaluator.
CHUNK = 1 << 16


def compositions(units: int, largest: int) -> list[list[int]]:
    """Every ordered partition of ``units`` into parts of ``1..largest``."""
    if units == 0:
        return [[]]
    return [
        [part, *rest]
        for part in range(1, min(units, largest) + 1)
        for rest in compositions(units - part, largest)
    ]


def _best_rows(
    rows: list[list[list[int]]], units: int, term: Callable[[np.ndarray], np.ndarray]
) -> tuple[list[list[int]], int]:
    """The per-stage choice of ``rows[s]`` (sizes in units) with the least ``term`` (ticks)."""
    combos = list(itertools.product(*rows))
    genes = np.zeros((len(combos), len(rows), units), dtype=np.int32)
    for i, combo in enumerate(combos):
        for s, sizes in enumerate(combo):
            genes[i, s, : len(sizes)] = sizes
    scores = np.concatenate([term(genes[i : i + CHUNK]) for i in range(0, len(genes), CHUNK)])
    best = int(np.argmin(scores))
    return [list(sizes) for sizes in combos[best]], int(scores[best])


def flush_optimum(problem: Problem, backend: str = "numba") -> tuple[Plan, float]:
    """The fastest flush plan of ``problem`` (first found on ties) and its iteration time,
    by enumeration on ``backend``'s flush evaluator."""
    ticked = tick_problem(problem)
    evaluator = create_evaluator(ticked, "flush", backend)
    stages, units, unit = problem.num_stages, problem.num_units, problem.unit
    halves = []
    for caps, term in (
        (ticked.forward_caps, evaluator.forward_end),
        (ticked.backward_caps, evaluator.backward_span),
    ):
        rows = [compositions(units, int(caps[s])) for s in range(stages)]
        halves.append(_best_rows(rows, units, term))
    (forward, forward_ticks), (backward, backward_ticks) = halves
    plan = Plan.of(
        [[size * unit for size in row] for row in forward],
        [[size * unit for size in row] for row in backward],
    )
    return plan, ticked.to_time(forward_ticks + backward_ticks)
