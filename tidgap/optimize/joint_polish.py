"""A last deterministic local search around the joint GA's best plan within a memory level.

The neighbours of an individual are the plans one step away in one gene of one stage: a
partition step of :mod:`tidgap.optimize.polish` (one unit across a boundary, two
microbatches merged, one halved) on the forward or the backward row, or one backward (or
every backward from one on) run one forward earlier or later. All are repaired, scored in
one batch and penalised under the level; the best improving one is taken until none
improves, ``steps`` run out or the deadline passes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from tidgap.backends.xp import namespace, to_host
from tidgap.optimize.joint import JointSpace
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.limits import MemoryLevel, penalised
from tidgap.optimize.polish import rows_near

#: Most descent steps without a deadline.
MAX_STEPS = 200


def lead_rows_near(lead: np.ndarray, backwards: int) -> Iterator[np.ndarray]:
    """Lead rows one step from ``lead`` ``(K,)``: one entry ``k < backwards`` or the tail
    from ``k`` on moved by one."""
    for k in range(backwards):
        for step in (-1, 1):
            single, tail = lead.copy(), lead.copy()
            single[k] += step
            tail[k:backwards] += step
            yield single
            if k > 0:
                yield tail


def neighbours(individual: JointGenes, space: JointSpace) -> JointGenes:
    """Every individual one step from ``individual`` (``(1, S, K)`` host genes), unrepaired."""
    forward, backward, lead = (
        to_host(a)[0] for a in (individual.forward, individual.backward, individual.lead)
    )
    caps = (to_host(space.forward_caps), to_host(space.backward_caps))
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for s in range(forward.shape[0]):
        for row in rows_near(forward[s], int(caps[0][s])):
            found.append((_with_row(forward, s, row), backward, lead))
        for row in rows_near(backward[s], int(caps[1][s])):
            found.append((forward, _with_row(backward, s, row), lead))
        for row in lead_rows_near(lead[s], int((backward[s] > 0).sum())):
            found.append((forward, backward, _with_row(lead, s, row)))
    xp = namespace(space.forward_caps)
    return JointGenes(*(xp.asarray(np.stack(part)) for part in zip(*found, strict=True)))


def _with_row(genes: np.ndarray, s: int, row: np.ndarray) -> np.ndarray:
    """A copy of ``genes`` ``(S, K)`` with row ``s`` replaced."""
    changed = genes.copy()
    changed[s] = row
    return changed


def joint_polish(
    individual: JointGenes,
    ticks: int,
    level: MemoryLevel,
    space: JointSpace,
    deadline: float | None = None,
) -> tuple[JointGenes, int]:
    """Steepest descent from ``individual`` (``(1, S, K)`` repaired genes, ``ticks`` its time,
    within ``level``) among plans within ``level``; returns the individual reached and its
    time in ticks."""
    xp = namespace(space.forward_caps)
    held = xp.asarray(level.held, dtype=xp.int64)
    for _ in range(MAX_STEPS):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        candidates = neighbours(individual, space).repaired(space.repair)
        times, peaks = space.evaluate(candidates)
        fitness = to_host(penalised(times, peaks, held))
        best = int(np.argmin(fitness))
        if int(fitness[best]) >= ticks:
            break
        individual, ticks = candidates.take(slice(best, best + 1)), int(fitness[best])
    return individual, ticks
