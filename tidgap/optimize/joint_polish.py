"""A last deterministic local search around the joint GA's best plan within a memory level.

On a deep pipeline (:data:`~tidgap.optimize.polish.GROUP_MOVES_FROM_STAGES`) it first
moves groups of stages at once (:func:`group_moves`: every stage sharing a partition row
takes the same step; every stage's lead the same step), to a local optimum of those moves,
then single stages: on 128 stages none of the first 18,088 single-stage moves from the
best 1F1B is faster, while moves of all stages at once are.

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

On a pipeline shallower than that, the final polish (not the seeds') then descends again
from each of a few kicks (:func:`first_unit_kicks`), slower plans that move every stage at
once, and goes on from the first descent that ends faster (:func:`kicked`).
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
    group_row_moves,
    groups_first,
    in_batches,
    moved_batches,
    rows_near,
    time_to_stop,
)

#: Bytes per gene of a candidate in a batch, with the repair's int64 temporaries.
BYTES_PER_CANDIDATE_GENE = 96
#: A batch's bytes, temporaries included: the polish's workspace that the memory guard
#: counts (:data:`~tidgap.optimize.memory.WORKSPACE_BYTES`). Larger batches than
#: :data:`~tidgap.optimize.polish.BATCH_BYTES` (28 -> 108 candidates at 64 stages) halve
#: the calls, and keep both cores busy in each (a 64-stage polish 7.2-7.5 -> 5.1 s).
JOINT_BATCH_BYTES = 4 * BATCH_BYTES


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
    leads: move ``j`` is each stage's own move ``j`` (for each ``k`` in turn, entry ``k``
    moved down by one, then every entry from ``k`` on, then the same moved up), on each
    stage that has it (more than ``k`` backwards, ``backwards`` ``(S,)``; the others keep
    their rows)."""
    own = [lead_rows_near(row, int(count)) for row, count in zip(lead, backwards, strict=True)]
    moved = np.repeat(lead[None], max((len(rows) for rows in own), default=0), axis=0)
    for s, rows in enumerate(own):
        moved[: len(rows), s] = rows
    return moved


def group_moves(
    stacked: np.ndarray, caps: tuple[np.ndarray, np.ndarray], genes: tuple[int, ...]
) -> Iterator[np.ndarray]:
    """Individuals ``(3, S, K)`` some steps of several stages at once from ``stacked``: for
    each partition gene of ``genes`` (0 forward, 1 backward) its
    :func:`~tidgap.optimize.polish.group_row_moves`, then :func:`lead_group_moves`."""
    for gene in genes:
        for rows in group_row_moves(stacked[gene], caps[gene]):
            candidate = stacked.copy()
            candidate[gene] = rows
            yield candidate
    backwards = (stacked[1] > 0).sum(axis=1)
    for lead in lead_group_moves(stacked[2], backwards):
        candidate = stacked.copy()
        candidate[2] = lead
        yield candidate


def split_first(rows: np.ndarray) -> np.ndarray:
    """``rows`` ``(S, K)`` (sizes in units, zero-padded) with each first microbatch of two
    units or more split into one unit and the rest, where the row has a free microbatch."""
    split = rows.copy()
    if rows.shape[1] < 2:  # one microbatch a row (--max-microbatches 1): none free
        return split
    movable = (rows[:, 0] >= 2) & (rows[:, -1] == 0)
    split[movable, 2:] = rows[movable, 1:-1]
    split[movable, 1] = rows[movable, 0] - 1
    split[movable, 0] = 1
    return split


def first_unit_kicks(stacked: np.ndarray, genes: tuple[int, ...]) -> list[np.ndarray]:
    """Individuals ``(3, S, K)`` from ``stacked``: for each partition gene of ``genes`` (0
    forward, 1 backward) that it changes, :func:`split_first` on every stage at once (a
    split backward's lead entries shift with it), then all of those splits together where
    there are several. A one-unit first microbatch shortens the fill of every stage; one
    stage's split alone does not, so no step of the polish reaches it (s11 within 1F1B's
    memory: the forward split of the landed 357.67 ms is 358.07 ms, descended 356.43)."""
    kicks = []
    for gene in genes:
        rows = split_first(stacked[gene])
        moved = (rows != stacked[gene]).any(axis=1)
        if not moved.any():
            continue
        kick = stacked.copy()
        kick[gene] = rows
        if gene == 1:
            kick[2, moved, 1:] = stacked[2, moved, :-1]
        kicks.append(kick)
    if len(kicks) > 1:
        together = stacked.copy()
        for kick in kicks:
            together = np.where(kick != stacked, kick, together)
        kicks.append(together)
    return kicks


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
        """The moves of groups of stages (:func:`group_moves`; every one, whatever
        ``focus``)."""
        return in_batches(group_moves(stacked, self.caps, self.space.partition_genes), self.batch)


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
    groups: bool | None = None,
    kicks: bool | None = None,
) -> tuple[JointGenes, int]:
    """Steepest descent from ``individual`` (``(1, S, K)`` repaired genes, ``ticks`` its time,
    within ``level``) among plans within ``level``: where ``groups`` (by default on
    :data:`~tidgap.optimize.polish.GROUP_MOVES_FROM_STAGES` stages or more) first over the
    moves of groups of stages, then over single stages' moves, each until a local optimum,
    then (with ``kicks``, by default below that depth: a kick's descent moves single
    stages, 47 -> 98 s of polish at 32 stages) on from there :func:`kicked`, until
    ``deadline`` or a signal (``interrupted``); returns the individual reached (repaired)
    and its time in ticks."""
    polish = _Polish(level, space, individual.forward[0].size * 3)
    neighbours = [polish.batches]
    deep = groups_first(individual.forward.shape[1])
    groups = deep if groups is None else groups
    kicks = not deep if kicks is None else kicks
    if groups:
        neighbours.insert(0, polish.group_batches)
    for batches in neighbours:
        found, ticks = descend(
            _stacked(individual), ticks, batches, polish.score, deadline, True, interrupted
        )
        individual = unstacked(found[None], space)
    if not kicks:
        return individual, ticks
    return kicked(individual, ticks, polish, deadline, interrupted)


def kicked(
    individual: JointGenes,
    ticks: int,
    polish: _Polish,
    deadline: float | None = None,
    interrupted: Interrupted | None = None,
) -> tuple[JointGenes, int]:
    """From ``individual`` (``(1, S, K)`` repaired genes at a local optimum, ``ticks`` its
    time), a descent over single stages' moves from each of its :func:`first_unit_kicks` in
    turn; the first that ends faster is taken and kicked again, until none does,
    ``deadline`` or a signal (``interrupted``). Returns the individual and its ticks."""
    genes = polish.space.partition_genes
    kicks = first_unit_kicks(_stacked(individual), genes)
    while kicks and not time_to_stop(deadline, interrupted):
        kick = kicks.pop(0)
        start = int(polish.score(kick[None])[0])
        found, found_ticks = descend(
            kick, start, polish.batches, polish.score, deadline, True, interrupted
        )
        if found_ticks < ticks:
            individual, ticks = unstacked(found[None], polish.space), found_ticks
            kicks = first_unit_kicks(_stacked(individual), genes)
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
