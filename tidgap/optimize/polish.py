"""A last deterministic local search around the GA's best chromosome.

All neighbours of a chromosome (one unit shifted across a boundary, two neighbouring
microbatches merged, a microbatch halved) are scored in batches of at most
``batch_bytes``; the best improving one (the first on ties) is taken, with the other
improving ones' changes that still help (:func:`descend`; after a step, the neighbours in
the stages near its changes, until a scan of all finds none), until none improves or the
deadline passes (then the best improving neighbour scored so far, if any, is the last
step). A signal (``interrupted()`` naming one) stops it as the deadline does, so Ctrl-C
ends a search in its polish within a batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np

#: ``(N, S, K)`` chromosomes -> ``(N,)`` fitness in ticks.
Score = Callable[[np.ndarray], np.ndarray]
#: Polled with the deadline: the name of a signal that asks to stop (``"SIGINT"``), or
#: ``None`` (:meth:`tidgap.optimize.interrupts.StopSignals.received`).
Interrupted = Callable[[], str | None]

#: Default size of one batch of candidate chromosomes, in bytes.
BATCH_BYTES = 32 << 20
#: Pipelines this deep or deeper are polished first over the moves of groups of stages
#: (:func:`group_row_moves`), then over single stages'. 10 s windowed searches with them
#: against without, 32-128 stages: 13 of 16 runs faster, one equal, two slower (1.5%,
#: 2.5%); 64 stages 1.0% faster on average over 8 runs, another 64-stage problem 4.3%. 16
#: stages at 20 s: not faster (+0.5%, +0.9%, equal); hetero-8 at 20 s 1% slower at any
#: memory in every run (docs/measurements.md).
GROUP_MOVES_FROM_STAGES = 32


def groups_first(stages: int) -> bool:
    """Whether a polish of ``stages`` stages first descends over the moves of groups of
    stages (:data:`GROUP_MOVES_FROM_STAGES`)."""
    return stages >= GROUP_MOVES_FROM_STAGES


def rows_near(row: np.ndarray, cap: int) -> np.ndarray:
    """Feasible rows one step from ``row`` ``(K,)`` (sizes in units, zero-padded), as
    ``(n, K)``: across each boundary in turn, one unit moved left, one moved right, the two
    microbatches merged; then, if a microbatch is free, each of two units or more halved."""
    width, count = len(row), int(np.count_nonzero(row))
    column = np.arange(width)
    k = np.arange(count - 1)[:, None]
    left, right = row[: count - 1, None], row[1:count, None]
    # Row k of each: the move across boundary k (between microbatches k and k + 1).
    across = [row + step * ((column == k) * 1 - (column == k + 1)) for step in (-1, 1)]
    merged = np.append(row, 0)[np.where(column <= k, column, column + 1)]  # k + 1 dropped
    across.append(merged + np.where(column == k, right, 0))
    valid = [
        _within(left - 1, cap) & _within(right + 1, cap),
        _within(left + 1, cap) & _within(right - 1, cap),
        left + right <= cap,
    ]
    near = [np.stack(across, axis=1)[np.concatenate(valid, axis=1)]]
    if count < width:
        k = np.arange(count)[:, None]
        size = row[:count, None]
        halved = row[np.where(column <= k, column, column - 1)]  # k doubled, the rest on
        halved = np.where(column == k + 1, size - size // 2, halved)
        halved = np.where(column == k, size // 2, halved)
        near.append(halved[row[:count] >= 2])
    return np.concatenate(near).astype(row.dtype, copy=False)


def group_row_moves(rows: np.ndarray, caps: np.ndarray) -> Iterator[np.ndarray]:
    """Steps of several stages at once from ``rows`` ``(S, K)`` (one per stage), as new
    ``(S, K)`` rows: for each row two stages or more share (in the order of their first
    stage), each :func:`rows_near` step of it (within their least of ``caps`` ``(S,)``) on
    all of those stages. A deep pipeline's plan that no stage's own step improves (the best
    1F1B, whose stages wait on each other's equal chunks) often improves when they step
    together."""
    _, first, inverse, counts = np.unique(
        rows, axis=0, return_index=True, return_inverse=True, return_counts=True
    )
    for group in sorted(np.flatnonzero(counts >= 2), key=lambda g: first[g]):
        members = inverse.reshape(-1) == group
        for row in rows_near(rows[first[group]], int(caps[members].min())):
            yield np.where(members[:, None], row, rows)


def in_batches(candidates: Iterable[np.ndarray], batch: int) -> Iterator[np.ndarray]:
    """``candidates`` (arrays of one shape) stacked in batches of at most ``batch``."""
    chunk: list[np.ndarray] = []
    for candidate in candidates:
        chunk.append(candidate)
        if len(chunk) == batch:
            yield np.stack(chunk)
            chunk = []
    if chunk:
        yield np.stack(chunk)


def _within(sizes: np.ndarray, cap: int) -> np.ndarray:
    """Whether each of ``sizes`` is a microbatch size: ``1..cap`` units."""
    return (sizes >= 1) & (sizes <= cap)


#: Moves: the index of one row of a chromosome and the rows put there in turn, ``(n, K)``.
Moves = tuple[tuple[int, ...], np.ndarray]


#: Stages to scan: ``(S,)`` bool, or ``None`` for all.
Focus = np.ndarray | None
#: Candidates near genes: ``batches(genes, focus)`` yields arrays of genes' shape with a
#: leading batch axis, the moves of the focused stages only.
Neighbours = Callable[[np.ndarray, Focus], Iterator[np.ndarray]]


def focused(stages: int, focus: Focus) -> Iterator[int]:
    """The stages of ``range(stages)`` that ``focus`` keeps, in order."""
    return (s for s in range(stages) if focus is None or focus[s])


def neighbour_batches(
    genes: np.ndarray, caps: np.ndarray, batch: int, focus: Focus = None
) -> Iterator[np.ndarray]:
    """Every chromosome one step from ``genes`` ``(S, K)`` in a stage of ``focus``, stage
    by stage, as ``(n, S, K)`` arrays of at most ``batch`` chromosomes."""
    stages = focused(genes.shape[0], focus)
    return moved_batches(genes, (((s,), rows_near(genes[s], int(caps[s]))) for s in stages), batch)


def moved_batches(
    start: np.ndarray, moves: Iterable[Moves], batch: int, split: int = 0
) -> Iterator[np.ndarray]:
    """``start`` with each row of ``moves`` put in its place, in order, as ``(n,
    *start.shape)`` arrays of ``batch`` (the last may be fewer). In memory the batch axis
    follows ``start``'s first ``split`` axes, so each of those sub-arrays is contiguous over
    the batch."""
    blocks: list[Moves] = []
    size = 0
    for index, rows in moves:
        while len(rows):
            taken, rows = rows[: batch - size], rows[batch - size :]
            blocks.append((index, taken))
            size += len(taken)
            if size == batch:
                yield _applied(start, blocks, size, split)
                blocks, size = [], 0
    if size:
        yield _applied(start, blocks, size, split)


def _applied(start: np.ndarray, blocks: list[Moves], size: int, split: int) -> np.ndarray:
    """One batch of :func:`moved_batches`: ``size`` candidates."""
    lead, rest = start.shape[:split], start.shape[split:]
    out = np.empty((*lead, size, *rest), dtype=start.dtype)
    out[...] = start.reshape(*lead, 1, *rest)
    first = 0
    for index, rows in blocks:
        out[(*index[:split], slice(first, first + len(rows)), *index[split:])] = rows
        first += len(rows)
    return np.moveaxis(out, split, 0)


#: The most improving neighbours one step of :func:`descend` keeps to combine.
COMBINED_MOVES = 64
#: After a step, :func:`descend` scans the stages within this many of a changed one.
FOCUS_RADIUS = 3


def descend(
    genes: np.ndarray,
    fitness: int,
    batches: Neighbours,
    score: Score,
    deadline: float | None = None,
    early: bool = False,
    interrupted: Interrupted | None = None,
) -> tuple[np.ndarray, int]:
    """Steepest descent from ``genes`` (stages on the second-last axis) over the candidates
    ``batches(genes, focus)`` yields until a local optimum, ``deadline`` (a
    ``time.perf_counter()`` value) or a signal (``interrupted()``), both checked after every
    batch and every combination tried; returns the genes reached and their fitness.

    Each step scores the candidates, takes the best (the first on ties), then adds the
    other improving candidates' changed rows (best first, up to :data:`COMBINED_MOVES`,
    each changing no row an added one changed) one at a time, each kept where it makes
    the plan faster: a step of a deep pipeline then moves several stages, not one. The
    first scan covers every stage; after a step, the next covers only the stages within
    :data:`FOCUS_RADIUS` of one it changed, and a scan of every stage confirms that no
    candidate improves (a deep pipeline's step then scans a few stages, not all). With
    ``early``, a scan of every stage steps at the end of its first batch holding an
    improving candidate (a deep pipeline's batch holds part of a stage's neighbours, a shallow
    one's all of them). A signal before the first batch returns ``genes`` as they are."""
    if time_to_stop(None, interrupted):
        return genes, fitness
    focus: Focus = None
    while True:
        improving = _Improving(genes, fitness)
        for candidates in batches(genes, focus):
            improving.add(candidates, np.asarray(score(candidates)))
            if time_to_stop(deadline, interrupted):
                return improving.best()
            if early and focus is None and improving.best()[1] < fitness:
                break  # a scan of every stage steps at its first improving batch
        if improving.best()[1] < fitness:
            stepped, fitness = _combined(genes, improving, score, deadline, interrupted)
            genes, focus = stepped, near_changes(genes, stepped)
        elif focus is None:
            return genes, fitness
        else:
            focus = None


def near_changes(before: np.ndarray, after: np.ndarray) -> Focus:
    """``(S,)``: the stages (second-last axis) within :data:`FOCUS_RADIUS` of one whose
    rows differ between ``before`` and ``after``; ``None`` where that is every stage."""
    changed = (before != after).any(axis=-1).reshape(-1, before.shape[-2]).any(axis=0)
    near = changed.copy()
    for shift in range(1, FOCUS_RADIUS + 1):
        near[shift:] |= changed[:-shift]
        near[:-shift] |= changed[shift:]
    return None if near.all() else near


def time_to_stop(deadline: float | None, interrupted: Interrupted | None = None) -> bool:
    """Whether a polish stops now: ``deadline`` (a ``time.perf_counter()`` value) passed or
    ``interrupted()`` names a signal."""
    if deadline is not None and time.perf_counter() >= deadline:
        return True
    return interrupted is not None and interrupted() is not None


class _Improving:
    """The :data:`COMBINED_MOVES` fastest candidates faster than ``fitness`` scored so far
    (``genes``: ``(n, ...)``, fastest first, the first scored on ties; ``scores``:
    ``(n,)``)."""

    def __init__(self, start: np.ndarray, fitness: int) -> None:
        self.start, self.fitness = start, fitness
        self.genes = np.empty((0, *start.shape), dtype=start.dtype)
        self.scores = np.empty(0, dtype=np.int64)

    def add(self, candidates: np.ndarray, scores: np.ndarray) -> None:
        faster = np.flatnonzero(scores < self.fitness)
        genes = np.concatenate([self.genes, candidates[faster]])
        kept = np.concatenate([self.scores, scores[faster].astype(np.int64)])
        order = np.argsort(kept, kind="stable")[:COMBINED_MOVES]
        self.genes, self.scores = genes[order], kept[order]

    def best(self) -> tuple[np.ndarray, int]:
        """The fastest candidate and its fitness; the start where none was faster."""
        if len(self.scores) == 0:
            return self.start, self.fitness
        return self.genes[0], int(self.scores[0])


def _combined(
    start: np.ndarray,
    improving: _Improving,
    score: Score,
    deadline: float | None,
    interrupted: Interrupted | None,
) -> tuple[np.ndarray, int]:
    """The fastest improving candidate with each other one's rows (along the last axis)
    that differ from ``start`` added in turn, where no row added before changed and the
    fitness drops (so each row stays one of a neighbour's)."""
    genes, fitness = improving.best()
    touched = (genes != start).any(axis=-1)
    for other in improving.genes[1:]:
        if time_to_stop(deadline, interrupted):
            break
        changed = (other != start).any(axis=-1)
        if (changed & touched).any():
            continue
        trial = np.where(changed[..., None], other, genes)
        trial_fitness = int(np.asarray(score(trial[None]))[0])
        if trial_fitness < fitness:
            genes, fitness, touched = trial, trial_fitness, touched | changed
    return genes, fitness


def polish(
    genes: np.ndarray,
    fitness: int,
    caps: np.ndarray,
    score: Score,
    deadline: float | None = None,
    batch_bytes: int = BATCH_BYTES,
    interrupted: Interrupted | None = None,
) -> tuple[np.ndarray, int]:
    """:func:`descend` from the chromosome ``genes`` ``(S, K)`` over its partition
    neighbours (:func:`neighbour_batches`; on :data:`GROUP_MOVES_FROM_STAGES` stages or more
    first over :func:`group_row_moves`), in batches of at most ``batch_bytes``, each until a
    local optimum, ``deadline`` or a signal (``interrupted``)."""
    batch = max(1, batch_bytes // max(genes.nbytes, 1))

    def groups(g: np.ndarray, focus: Focus) -> Iterator[np.ndarray]:
        return in_batches(group_row_moves(g, caps), batch)

    def singles(g: np.ndarray, focus: Focus) -> Iterator[np.ndarray]:
        return neighbour_batches(g, caps, batch, focus)

    steps = [groups, singles] if groups_first(genes.shape[0]) else [singles]
    for batches in steps:
        genes, fitness = descend(genes, fitness, batches, score, deadline, interrupted=interrupted)
    return genes, fitness
