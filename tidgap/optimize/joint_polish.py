"""A last deterministic local search around the joint GA's best plan within a memory level.

On a deep pipeline (:data:`GROUP_MOVES_FROM_STAGES`) it first moves groups of stages at
once (:func:`group_batches`: every stage sharing a partition row takes the same step;
every stage's lead the same step), to a local optimum of those moves, then single stages:
a plan that one stage's step cannot improve (the best 1F1B, whose stages wait on each
other's equal chunks: on 128 stages none of the first 18,088 single-stage moves from it is
faster) often improves when all of them step together.

An individual is stacked as one ``(3, S, K)`` int32 array (forward, backward, lead). Its
neighbours are the plans one step away in one gene of one stage: a partition step of
:mod:`tidgap.optimize.polish` (one unit across a boundary, two microbatches merged, one
halved) on the forward or the backward row, or one backward (or every backward from one
on) run one forward earlier or later. They are streamed in batches of at most
:data:`JOINT_BATCH_BYTES`, repaired, scored and penalised under the level;
:func:`~tidgap.optimize.polish.descend` takes the best improving one, with the other
improving ones' rows (forward, backward or lead of a stage) that still help, until none
improves or the deadline passes; a scan of every stage steps at its first batch holding an
improving one (``early``: on 64 stages a batch holds about 110 of the scan's 11,800).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from tidgap.backends.xp import namespace, to_host
from tidgap.optimize.joint import JointSpace
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.limits import MemoryLevel, penalised
from tidgap.optimize.polish import (
    BATCH_BYTES,
    Focus,
    Interrupted,
    Moves,
    descend,
    focused,
    moved_batches,
    rows_near,
)

#: Bytes per gene of a candidate in a batch, with the repair's int64 temporaries.
BYTES_PER_CANDIDATE_GENE = 96
#: A batch's bytes, temporaries included: the polish's workspace that the memory guard
#: counts (:data:`~tidgap.optimize.memory.WORKSPACE_BYTES`). Larger batches than
#: :data:`~tidgap.optimize.polish.BATCH_BYTES` (28 -> 108 candidates at 64 stages) halve
#: the calls, and keep both cores busy in each (a 64-stage polish 7.2-7.5 -> 5.1 s).
JOINT_BATCH_BYTES = 4 * BATCH_BYTES
#: The polish moves groups of stages first on pipelines this deep or deeper. 10 s searches
#: with them against without, 32-128 stages: 13 of 16 runs faster, one equal, two slower
#: (1.5%, 2.5%); 64 stages 1.0% faster on average over 8 runs, another 64-stage problem
#: 4.3%. 16 stages at 20 s: not faster (+0.5%, +0.9%, equal); hetero-8 at 20 s 1% slower
#: at any memory in every run (docs/measurements.md).
GROUP_MOVES_FROM_STAGES = 32


def lead_rows_near(lead: np.ndarray, backwards: int) -> np.ndarray:
    """Lead rows one step from ``lead`` ``(K,)``, as ``(n, K)``: for each ``k < backwards``
    in turn, entry ``k`` moved down by one, then every entry from ``k`` on (``k >= 1``;
    from 0 all of them move, ``k = 0`` alone when there is one backward), then the same
    moved up."""
    column = np.arange(len(lead))
    k = np.arange(backwards)[:, None]
    single, tail = column == k, (column >= k) & (column < backwards)
    moved = np.stack([lead + step * part for step in (-1, 1) for part in (single, tail)], 1)
    kept = np.array([True, False, True, False]) | (k > 0)  # no tail move from k = 0
    return moved[kept].astype(lead.dtype, copy=False)


def stacked_moves(
    stacked: np.ndarray,
    caps: tuple[np.ndarray, np.ndarray],
    genes: tuple[int, ...] = (0, 1),
    focus: Focus = None,
) -> Iterator[Moves]:
    """The moves one step from ``stacked`` ``(3, S, K)`` in the stages of ``focus``, stage
    by stage (each a ``(gene, stage)`` row and its new values); the partition steps move
    the rows ``genes`` (0 forward, 1 backward)."""
    forward, backward, lead = stacked
    for s in focused(forward.shape[0], focus):
        for gene in genes:
            yield (gene, s), rows_near(stacked[gene, s], int(caps[gene][s]))
        yield (2, s), lead_rows_near(lead[s], int((backward[s] > 0).sum()))


def lead_group_moves(lead: np.ndarray, backwards: np.ndarray) -> np.ndarray:
    """The steps of :func:`lead_rows_near` taken on every stage at once, as ``(n, S, K)``
    leads: for each ``k`` in turn, entry ``k`` moved down by one, then every entry from
    ``k`` on (``k >= 1``), then the same moved up, on each stage with more than ``k``
    backwards (``backwards`` ``(S,)``; the others keep their rows)."""
    column = np.arange(lead.shape[1])
    moved = []
    for k in range(int(backwards.max(initial=0))):
        has = (backwards > k)[:, None]
        single = has & (column == k)
        tail = has & (column >= k) & (column < backwards[:, None])
        parts = [single] if k == 0 else [single, tail]
        moved += [lead + step * part for step in (-1, 1) for part in parts]
    return np.asarray(moved, dtype=lead.dtype).reshape(-1, *lead.shape)


def group_moves(
    stacked: np.ndarray, caps: tuple[np.ndarray, np.ndarray], genes: tuple[int, ...]
) -> Iterator[tuple[int, np.ndarray]]:
    """Steps of several stages at once from ``stacked`` ``(3, S, K)``, each a gene and its
    new ``(S, K)`` rows: for each partition gene of ``genes`` (0 forward, 1 backward) and
    each row two stages or more share (in the order of their first stage), every
    :func:`~tidgap.optimize.polish.rows_near` step of it on all of those stages (within
    their least cap); then :func:`lead_group_moves`."""
    for gene in genes:
        rows = stacked[gene]
        _, first, inverse, counts = np.unique(
            rows, axis=0, return_index=True, return_inverse=True, return_counts=True
        )
        for group in sorted(np.flatnonzero(counts >= 2), key=lambda g: first[g]):
            members = (inverse.reshape(-1) == group)[:, None]
            cap = int(caps[gene][members[:, 0]].min())
            for row in rows_near(rows[first[group]], cap):
                yield gene, np.where(members, row, rows)
    backwards = (stacked[1] > 0).sum(axis=1)
    for lead in lead_group_moves(stacked[2], backwards):
        yield 2, lead


def group_batches(
    stacked: np.ndarray, caps: tuple[np.ndarray, np.ndarray], batch: int, genes: tuple[int, ...]
) -> Iterator[np.ndarray]:
    """Every individual of :func:`group_moves` from ``stacked`` in ``(n, 3, S, K)``
    batches of at most ``batch``."""
    chunk = []
    for gene, rows in group_moves(stacked, caps, genes):
        candidate = stacked.copy()
        candidate[gene] = rows
        chunk.append(candidate)
        if len(chunk) == batch:
            yield np.stack(chunk)
            chunk = []
    if chunk:
        yield np.stack(chunk)


def stacked_neighbours(
    stacked: np.ndarray,
    caps: tuple[np.ndarray, np.ndarray],
    batch: int,
    genes: tuple[int, ...],
    focus: Focus = None,
) -> Iterator[np.ndarray]:
    """Every individual one step from ``stacked`` in the stages of ``focus``
    (:func:`stacked_moves`) in ``(n, 3, S, K)`` batches of at most ``batch``, each gene
    contiguous over the batch."""
    return moved_batches(stacked, stacked_moves(stacked, caps, genes, focus), batch, split=1)


def unstacked(stacked: np.ndarray, space: JointSpace) -> JointGenes:
    """``(n, 3, S, K)`` host individuals as repaired genes on the space's ``xp``."""
    xp = namespace(space.forward_caps)
    genes = JointGenes(*(xp.asarray(np.ascontiguousarray(stacked[:, i])) for i in range(3)))
    return space.repaired(genes)


class _Polish:
    """What a polish of individuals within ``level`` scores with: ``score`` (penalised
    ticks of ``(n, 3, S, K)`` host candidates) and ``batches`` (their neighbours)."""

    def __init__(self, level: MemoryLevel, space: JointSpace, size: int) -> None:
        self.space, self.held = space, space.limit(level)
        self.caps = (to_host(space.forward_caps), to_host(space.backward_caps))
        self.batch = max(1, JOINT_BATCH_BYTES // (size * BYTES_PER_CANDIDATE_GENE))

    def score(self, candidates: np.ndarray) -> np.ndarray:
        times, peaks = self.space.evaluate(unstacked(candidates, self.space))
        return to_host(penalised(times, peaks, self.held))

    def batches(self, stacked: np.ndarray, focus: Focus) -> Iterator[np.ndarray]:
        genes = self.space.partition_genes
        return stacked_neighbours(stacked, self.caps, self.batch, genes, focus)

    def group_batches(self, stacked: np.ndarray, focus: Focus) -> Iterator[np.ndarray]:
        """The moves of groups of stages (:func:`group_batches`; every one, whatever
        ``focus``)."""
        return group_batches(stacked, self.caps, self.batch, self.space.partition_genes)


def _stacked(individual: JointGenes) -> np.ndarray:
    """``(1, S, K)`` genes as one host ``(3, S, K)`` array."""
    return np.stack(
        [to_host(g)[0] for g in (individual.forward, individual.backward, individual.lead)]
    )


def joint_polish(
    individual: JointGenes,
    ticks: int,
    level: MemoryLevel,
    space: JointSpace,
    deadline: float | None = None,
    interrupted: Interrupted | None = None,
) -> tuple[JointGenes, int]:
    """Steepest descent from ``individual`` (``(1, S, K)`` repaired genes, ``ticks`` its time,
    within ``level``) among plans within ``level``: on :data:`GROUP_MOVES_FROM_STAGES` stages
    or more first over the moves of groups of stages, then over single stages' moves, each
    until a local optimum, ``deadline`` or a signal (``interrupted``); returns the
    individual reached (repaired) and its time in ticks."""
    polish = _Polish(level, space, individual.forward[0].size * 3)
    neighbours = [polish.batches]
    if individual.forward.shape[1] >= GROUP_MOVES_FROM_STAGES:
        neighbours.insert(0, polish.group_batches)
    for batches in neighbours:
        found, ticks = descend(
            _stacked(individual), ticks, batches, polish.score, deadline, True, interrupted
        )
        individual = unstacked(found[None], space)
    return individual, ticks


def scan_seconds(individual: JointGenes, level: MemoryLevel, space: JointSpace) -> float:
    """About how long :func:`joint_polish` takes to score every neighbour of
    ``individual`` once (a scan of every stage), in seconds: its first batch timed,
    times the batches of the scan."""
    start = _stacked(individual)
    polish = _Polish(level, space, start.size)
    count = sum(len(rows) for _, rows in stacked_moves(start, polish.caps, space.partition_genes))
    first = next(polish.batches(start, None))
    began = time.perf_counter()
    polish.score(first)
    return (time.perf_counter() - began) * count / len(first)
