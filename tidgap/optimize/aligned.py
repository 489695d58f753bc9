"""Flush plans that recompute nothing: backward chromosomes that coarsen their forward ones.

A stage's backward runs on its forwards' stored graphs when every backward boundary is one
of its forward boundaries (:func:`tidgap.runtime.lowering.recomputes`,
:func:`tidgap.optimize.order_genes.misaligned`): each backward microbatch then merges whole
forward microbatches. Such a backward is written by its *cuts*: ``(P, S, K)`` bool, entry
``c`` true where the backward cuts after forward microbatch ``c + 1`` (entries from
``M_s - 1`` on are ignored: the end is always a boundary). Chromosomes are ``(P, S, K)``
int32 sizes in units, zero padded (:mod:`tidgap.optimize.genome`), on NumPy or CuPy (``xp``).

- :func:`coarsen`: cuts -> the backward chromosome, adding the fewest cuts (greedy, each as
  late as possible) that keep every backward microbatch within the backward cap;
- :func:`snap`: any backward chromosome's boundaries snapped to the nearest forward
  boundary, as cuts (then :func:`coarsen`: the repair of a backward onto a forward);
- :func:`aligned_search`: the best coarsening of one forward chromosome, by backward span;
- :func:`aligned_pair`: the best (forward, coarsening) pair among candidate forwards;
- :func:`mirrored_start`: the best candidate as both partitions (a mirrored plan).

With the flush ``iteration = forward_end + backward_span`` (model.md, separability), so a
pair's time is the sum of its two halves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tidgap.backends.xp import namespace, to_host
from tidgap.optimize.genome import GENE
from tidgap.optimize.operators import equal_rows, microbatch_counts
from tidgap.optimize.order_genes import own_forwards, prefix
from tidgap.optimize.polish import Focus, Interrupted, descend, focused, time_to_stop
from tidgap.optimize.rng import CounterRng, uniform_int

#: ``(P, S, K)`` chromosomes (in the array module of the search) -> ``(P,)`` int64 ticks.
Score = Callable[[Any], Any]


def fits(forward: Any, caps: Any) -> Any:
    """``(P,)`` bool: every forward microbatch of ``(P, S, K)`` ``forward`` is within the
    ``(S,)`` backward ``caps`` (units), so some backward coarsens it."""
    xp = namespace(forward)
    return (forward <= xp.asarray(caps)[None, :, None]).all(axis=(1, 2))


def coarsen(forward: Any, cuts: Any, caps: Any) -> tuple[Any, Any]:
    """``(backward, cuts)``: the ``(P, S, K)`` backward chromosomes that merge ``forward``'s
    microbatches between ``cuts`` (module docstring), and their canonical cuts (the given
    ones at interior boundaries, plus those the caps forced).

    Greedy, left to right: a cut is added after a forward microbatch only where the next
    one would take the backward microbatch over its stage's cap (``(S,)`` units), which
    adds the fewest cuts. Every backward microbatch is within the cap where every forward
    microbatch is (:func:`fits`); elsewhere the result breaks the cap.
    """
    xp = namespace(forward)
    population, stages, width = forward.shape
    rows = population * stages
    boundary = prefix(forward).reshape(rows, width + 1)
    wanted = cuts.reshape(rows, width)
    count = microbatch_counts(forward).reshape(rows)
    cap = xp.broadcast_to(xp.asarray(caps, dtype=xp.int64)[None, :], (population, stages))
    cap = cap.reshape(rows)
    last = xp.zeros(rows, dtype=xp.int64)
    sizes = xp.zeros((rows, width), dtype=xp.int64)
    kept = xp.zeros((rows, width), dtype=bool)
    for j in range(1, width + 1):
        interior = j < count
        following = boundary[:, min(j + 1, width)]
        cut = (count == j) | (interior & (wanted[:, j - 1] | (following - last > cap)))
        sizes[:, j - 1] = xp.where(cut, boundary[:, j] - last, 0)
        kept[:, j - 1] = cut & interior
        last = xp.where(cut, boundary[:, j], last)
    packed = xp.argsort((sizes == 0).astype(xp.int8), axis=1, kind="stable")
    backward = xp.take_along_axis(sizes, packed, axis=1).astype(GENE)
    return backward.reshape(forward.shape), kept.reshape(forward.shape)


def snap(forward: Any, backward: Any) -> Any:
    """``(P, S, K)`` cuts: each interior backward boundary moved to the nearest forward
    boundary of its stage (the later one on a tie); boundaries that land on a stage's
    start or end are dropped."""
    xp = namespace(forward)
    population, stages, width = forward.shape
    forward_prefix, backward_prefix = prefix(forward), prefix(backward)
    later = own_forwards(forward_prefix, backward_prefix)
    target = backward_prefix[..., 1:]
    above = xp.take_along_axis(forward_prefix, later, axis=-1)
    below = xp.take_along_axis(forward_prefix, xp.maximum(later - 1, 0), axis=-1)
    nearest = xp.where(target - below < above - target, later - 1, later)
    interior = xp.arange(width)[None, None, :] < (microbatch_counts(backward) - 1)[..., None]
    nearest = xp.where(interior, nearest, 0)
    rows = xp.arange(population * stages, dtype=xp.int64).reshape(population, stages, 1)
    wanted = xp.zeros((population, stages, width + 1), dtype=bool)
    wanted.reshape(-1)[(rows * (width + 1) + nearest).reshape(-1)] = True
    return xp.ascontiguousarray(wanted[..., 1:])


def _equal(units: int, counts: Any, stages: int, width: int) -> Any:
    """``(n, S, K)`` equal partitions of ``units`` into each of ``counts``, on every stage."""
    xp = namespace(counts)
    rows = equal_rows(units, counts, width)
    return xp.ascontiguousarray(xp.broadcast_to(rows[:, None, :], (len(counts), stages, width)))


def _seed_cuts(forward: Any, backward: Any) -> Any:
    """``(n, S, K)`` cuts of the seeds of :func:`aligned_search` for ``(S, K)`` ``forward``:
    the forward partition itself, the repair of ``backward``, and the repair of every equal
    partition (1 to ``K`` microbatches, so every equal backward that coarsens ``forward``)."""
    xp = namespace(forward)
    stages, width = forward.shape
    units = int(forward[0].sum())
    counts = xp.arange(1, min(width, units) + 1, dtype=xp.int64)
    others = xp.concatenate([backward[None], _equal(units, counts, stages, width)])
    forwards = xp.ascontiguousarray(xp.broadcast_to(forward, others.shape))
    every = xp.ones((1, stages, width), dtype=bool)
    return xp.concatenate([every, snap(forwards, others)])


def _flip(cuts: Any, counts: Any, u: Any) -> Any:
    """Each of ``(n, S, K)`` ``cuts`` with one interior cut flipped (a merge or a split at a
    forward boundary): stage from ``u[:, 0]``, boundary from ``u[:, 1]``; stages of one
    forward microbatch are left as they are. ``counts``: ``(S,)`` forward microbatches."""
    xp = namespace(cuts)
    n, stages, width = cuts.shape
    stage = uniform_int(u[:, 0], 0, stages)
    interior = counts[stage] - 1
    column = uniform_int(u[:, 1], 0, xp.maximum(interior, 1))
    hit = (xp.arange(stages)[None, :, None] == stage[:, None, None]) & (
        xp.arange(width)[None, None, :] == column[:, None, None]
    )
    return cuts ^ (hit & (interior > 0)[:, None, None])


def _neighbours(
    cuts: np.ndarray, counts: np.ndarray, batch: int, focus: Focus = None
) -> Iterator[np.ndarray]:
    """Every ``(S, K)`` cuts one move from ``cuts`` in a stage of ``focus``: one interior
    cut flipped (merge or split), or one cut moved to a neighbouring forward boundary;
    ``(n, S, K)`` batches of at most ``batch``."""
    moves = []
    for s in focused(len(counts), focus):
        count = counts[s]
        for c in range(int(count) - 1):
            moves.append([(s, c)])
            if cuts[s, c] and c + 1 < count - 1 and not cuts[s, c + 1]:
                moves.append([(s, c), (s, c + 1)])
            if cuts[s, c] and c > 0 and not cuts[s, c - 1]:
                moves.append([(s, c), (s, c - 1)])
    for start in range(0, len(moves), batch):
        chunk = moves[start : start + batch]
        out = np.repeat(cuts[None], len(chunk), axis=0)
        for i, move in enumerate(chunk):
            for s, c in move:
                out[i, s, c] = not out[i, s, c]
        yield out


def _cut_score(forward: Any, caps: Any, score: Score) -> Score:
    """The backward span of ``(n, S, K)`` cuts, each coarsening ``(S, K)`` ``forward``."""
    xp = namespace(forward)

    def scored(cuts: Any) -> Any:
        cuts = xp.asarray(cuts)
        forwards = xp.ascontiguousarray(xp.broadcast_to(forward, cuts.shape))
        return score(coarsen(forwards, cuts, caps)[0])

    return scored


def _canonical(forward: Any, cuts: Any, caps: Any) -> np.ndarray:
    """The canonical ``(S, K)`` cuts (:func:`coarsen`) of ``(S, K)`` ``cuts``, on the host."""
    xp = namespace(forward)
    return to_host(coarsen(forward[None], xp.asarray(cuts)[None], caps)[1][0])


def seeded(forward: Any, backward: Any, caps: Any, score: Score) -> tuple[np.ndarray, int]:
    """The best seed of :func:`aligned_search` (no search): its canonical ``(S, K)`` cuts on
    the host and its backward span in ticks (the first on ties)."""
    cuts = _seed_cuts(forward, backward)
    ticks = to_host(_cut_score(forward, caps, score)(cuts))
    best = int(np.argmin(ticks))
    return _canonical(forward, cuts[best], caps), int(ticks[best])


def aligned_search(
    forward: Any,
    backward: Any,
    caps: Any,
    score: Score,
    rng: CounterRng,
    *,
    rounds: int = 16,
    batch: int = 64,
    deadline: float | None = None,
    interrupted: Interrupted | None = None,
) -> tuple[np.ndarray, int]:
    """The fastest backward chromosome found among the coarsenings of ``(S, K)`` ``forward``
    (fixed): ``(S, K)`` int32 sizes on the host and its backward span in ticks.

    ``backward``: ``(S, K)``, the dual GA's best backward; ``caps``: ``(S,)`` backward caps
    in units; ``score``: the separable evaluator's ``backward_span`` (in ``rng.xp``'s arrays).
    Seeded with the forward partition itself, the repair of ``backward`` and the repairs
    of the equal partitions (:func:`snap`, then :func:`coarsen`); the best seed is improved
    by an iterated steepest descent (:func:`tidgap.optimize.polish.descend`) over moves at forward
    boundaries (merge two backward microbatches, split one, move a boundary to the next
    forward boundary): ``rounds`` times, ``batch`` copies of the best, each with one to
    three random cuts flipped, are scored and the best descends; it replaces the best if
    faster. Never slower than a seed; the same ``rng`` state gives the same result (a
    ``deadline``, a ``time.perf_counter()`` value, or a signal, ``interrupted()``, may stop
    it sooner).
    ``ValueError`` if ``forward`` breaks a backward cap (no coarsening exists).
    """
    xp = rng.xp
    forward, backward = xp.asarray(forward), xp.asarray(backward)
    if not bool(fits(forward[None], caps)[0]):
        raise ValueError("a forward microbatch is over its stage's backward cap: no coarsening")
    counts = microbatch_counts(forward)
    host_counts = to_host(counts)
    cut_score = _cut_score(forward, caps, score)

    def host_score(cuts: np.ndarray) -> np.ndarray:
        return to_host(cut_score(cuts))

    def improve(cuts: np.ndarray, ticks: int) -> tuple[np.ndarray, int]:
        return descend(
            cuts,
            ticks,
            lambda g, f: _neighbours(g, host_counts, batch, f),
            host_score,
            deadline,
            interrupted=interrupted,
        )

    best, ticks = improve(*seeded(forward, backward, caps, score))
    for _ in range(rounds):
        if time_to_stop(deadline, interrupted):
            break
        kicked = xp.broadcast_to(xp.asarray(best), (batch, *best.shape))
        flips = rng.integers(1, 4, (batch,))
        for step in range(3):
            flipped = _flip(kicked, counts, rng.random((batch, 2)))
            kicked = xp.where((flips > step)[:, None, None], flipped, kicked)
        kicked_ticks = to_host(cut_score(kicked))
        start = int(np.argmin(kicked_ticks))
        kicked_best = _canonical(forward, kicked[start], caps)
        found, found_ticks = improve(kicked_best, int(kicked_ticks[start]))
        if found_ticks < ticks:
            best, ticks = found, found_ticks
    chromosome = coarsen(forward[None], xp.asarray(best)[None], caps)[0][0]
    return to_host(chromosome), ticks


@dataclass(frozen=True)
class AlignedPair:
    """A flush plan that recomputes nothing: ``(S, K)`` chromosomes on the host, every
    backward boundary a forward boundary, and their halves of the iteration in ticks."""

    forward: np.ndarray
    backward: np.ndarray
    forward_ticks: int
    backward_ticks: int

    @property
    def ticks(self) -> int:
        """The iteration time in ticks: ``forward_end + backward_span``."""
        return self.forward_ticks + self.backward_ticks


def _candidates(forwards: Any, forward_caps: Any, backward_caps: Any) -> Any:
    """``(n, S, K)``: ``forwards``, then the equal partitions within both caps on every
    stage; duplicates (after the first) and chromosomes over a cap left out."""
    xp = namespace(forwards)
    _, stages, width = forwards.shape
    units = int(forwards[0, 0].sum())
    least = int(to_host(xp.minimum(xp.asarray(forward_caps), xp.asarray(backward_caps))).min())
    counts = xp.arange(-(-units // least), min(width, units) + 1, dtype=xp.int64)
    every = xp.concatenate([forwards.astype(GENE), _equal(units, counts, stages, width)])
    every = every[fits(every, forward_caps) & fits(every, backward_caps)]
    if len(every) == 0:
        return every
    _, first = np.unique(to_host(every).reshape(len(every), -1), axis=0, return_index=True)
    return every[xp.asarray(np.sort(first))]


#: How many of :func:`aligned_pair`'s best-seeded candidates :func:`aligned_search` refines.
REFINED = 4


def aligned_pair(
    forwards: Any,
    forward_caps: Any,
    forward_score: Score,
    backward: Any,
    backward_caps: Any,
    backward_score: Score,
    rng: CounterRng,
    *,
    deadline: float | None = None,
    interrupted: Interrupted | None = None,
) -> AlignedPair:
    """The fastest pair found of a forward chromosome and a coarsening of it.

    ``forwards``: ``(n, S, K)`` candidates (the dual GA's best forwards, best first) within
    the ``(S,)`` ``forward_caps``; the equal partitions within both caps join them, so the
    result is never slower than the best pair of equal partitions that recomputes nothing.
    ``backward``: ``(S, K)``, the dual GA's best backward. Every candidate is scored with its
    best seed (:func:`seeded`, forward time plus seed span); the :data:`REFINED` best of
    them (first on ties) get :func:`aligned_search` (until ``deadline`` or a signal,
    ``interrupted``); the least total wins (the first on ties).
    ``ValueError`` if every candidate breaks a backward cap.
    """
    xp = rng.xp
    candidates = _candidates(xp.asarray(forwards), forward_caps, backward_caps)
    if len(candidates) == 0:
        raise ValueError("every forward candidate is over a backward cap: none can be aligned")
    backward = xp.asarray(backward)
    forward_ticks = to_host(forward_score(candidates)).astype(np.int64)
    totals = [
        int(forward_ticks[i]) + seeded(candidates[i], backward, backward_caps, backward_score)[1]
        for i in range(len(candidates))
    ]
    best: AlignedPair | None = None
    for i in np.argsort(totals, kind="stable")[:REFINED]:
        chromosome, ticks = aligned_search(
            candidates[i],
            backward,
            backward_caps,
            backward_score,
            rng,
            deadline=deadline,
            interrupted=interrupted,
        )
        pair = AlignedPair(to_host(candidates[i]), chromosome, int(forward_ticks[i]), ticks)
        if best is None or pair.ticks < best.ticks:
            best = pair
    assert best is not None
    return best


def mirrored_start(
    chromosomes: Any, forward_caps: Any, backward_caps: Any, score: Score
) -> tuple[Any, int]:
    """The best of ``chromosomes`` ``(n, S, K)`` and the equal partitions within both
    ``(S,)`` caps as both partitions of a plan: ``((S, K) chromosome, its ticks)`` by
    ``score`` (forward plus backward time), the first on ties. ``ValueError`` if every
    candidate is over a cap."""
    candidates = _candidates(
        namespace(chromosomes).asarray(chromosomes), forward_caps, backward_caps
    )
    if len(candidates) == 0:
        raise ValueError("every candidate is over a cap: none can be mirrored")
    ticks = to_host(score(candidates)).astype(np.int64)
    best = int(np.argmin(ticks))
    return candidates[best], int(ticks[best])
