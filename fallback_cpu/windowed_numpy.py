"""Ordered plans in NumPy: the event simulation of model.md (Ordered plans, Timing),
vectorised over the population.

Stages are swept in turn, as in the reference simulator; at stage ``s`` every individual
whose next op there has its inputs runs it, at once, and those that ran try their next op,
until none at ``s`` can. A sweep in which no individual progresses ends the simulation;
individuals with ops left (a deadlock) or whose order breaks rule ``count`` score
:data:`~tidgap.backends.evaluator.INVALID`. All arithmetic is int64 ``max`` and ``+`` on
ticks, so the results equal :mod:`tidgap.fallback_cpu.windowed_numba`'s exactly.

Arrays per individual and stage (``K`` the chromosomes' width, 1-based microbatches):
``ends`` and ``sent`` ``(P, S, K+1)`` (``EF``/``EB`` and the arrivals ``A``/``A'`` on the
link, index 0 unused / 0), ``done``, ``position``, ``free`` ``(P, S)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tidgap.backends.evaluator import INVALID, not_partitions
from tidgap.backends.ticks import TickedProblem
from tidgap.fallback_cpu.flush_numpy import batched_searchsorted
from tidgap.optimize.genome import BACKWARD_OP, FORWARD_OP, NO_OP


def prefix_sums(sizes: np.ndarray, num_units: int) -> np.ndarray:
    """``(P, S, K)`` sizes in units -> ``(P, S, K+1)`` prefix sums; ``ValueError`` unless
    every row is a partition of ``num_units`` (sizes in ``0..U``, zeros only at the end)."""
    sizes = sizes.astype(np.int64)
    prefix = np.zeros((*sizes.shape[:2], sizes.shape[2] + 1), dtype=np.int64)
    np.cumsum(sizes, axis=2, out=prefix[:, :, 1:])
    used = np.count_nonzero(sizes, axis=2)
    leading = np.arange(sizes.shape[2]) < used[..., None]
    bad = (
        (sizes < 0).any(axis=2)
        | (sizes > num_units).any(axis=2)
        | ((sizes > 0) != leading).any(axis=2)
        | (prefix[:, :, -1] != num_units)
    ).any(axis=1)
    if bad.any():
        raise ValueError(not_partitions(int(np.argmax(bad)), num_units))
    return prefix


def holders(rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``(P, S', K+1)`` non-decreasing ``rows`` and ``(P, S', J)`` ``queries`` ->
    ``min{i : rows[p, s, i] >= queries[p, s, j]}`` per row, ``(P, S', J)``."""
    count, stages = rows.shape[:2]
    if stages == 0:
        return np.zeros(queries.shape, dtype=np.int64)
    flat = batched_searchsorted(
        rows.reshape(count * stages, -1), queries.reshape(count * stages, -1)
    )
    return flat.reshape(queries.shape)


def counts_hold(order: np.ndarray, forwards: np.ndarray, backwards: np.ndarray) -> np.ndarray:
    """``(P,)`` bool: every stage's order row holds exactly ``M_s`` forwards and ``N_s``
    backwards, then :data:`NO_OP` only."""
    length = forwards + backwards
    padding = np.arange(order.shape[2]) >= length[..., None]
    return (
        ((order == FORWARD_OP).sum(axis=2) == forwards)
        & ((order == BACKWARD_OP).sum(axis=2) == backwards)
        & ((order == NO_OP) == padding).all(axis=2)
    ).all(axis=1)


def peaks(order: np.ndarray, P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """``(P, S)`` units held at most after any forward: ``P[s][i] - Q[s][j]`` with ``i``
    forwards done and ``j`` backwards before it (model.md, Memory)."""
    is_forward = order == FORWARD_OP
    i = np.cumsum(is_forward, axis=2)
    j = np.cumsum(order == BACKWARD_OP, axis=2)
    width_p, width_q = P.shape[2] - 1, Q.shape[2] - 1
    held = np.take_along_axis(P, np.minimum(i, width_p), axis=2) - np.take_along_axis(
        Q, np.minimum(j, width_q), axis=2
    )
    return np.where(is_forward, held, 0).max(axis=2, initial=0)


@dataclass
class _Run:
    """The simulation state of a population (see the module docstring)."""

    ticked: TickedProblem
    sizes: tuple[np.ndarray, np.ndarray]  # forward, backward sizes (P, S, K) int64
    order: np.ndarray  # (P, S, L) int8
    length: np.ndarray  # (P, S) M_s + N_s
    upstream: np.ndarray  # (P, S, Kf+1): forward k of s waits for A[s-1][upstream]
    own: np.ndarray  # (P, S, Kb+1): backward k of s waits for EF[s][own]
    downstream: np.ndarray  # (P, S, Kb+1): backward k of s waits for A'[s+1][downstream]
    ends: tuple[np.ndarray, np.ndarray]  # EF, EB
    sent: tuple[np.ndarray, np.ndarray]  # A, A'
    done: tuple[np.ndarray, np.ndarray]  # forwards, backwards done (P, S)
    position: np.ndarray  # (P, S)
    free: np.ndarray  # (P, S)

    def forward(self, who: np.ndarray, s: int) -> np.ndarray:
        """Run forward ``k`` of stage ``s`` for the individuals ``who`` whose input is
        there; returns those."""
        t, last = self.ticked, self.ticked.num_stages - 1
        k = self.done[0][who, s] + 1
        start = self.free[who, s]
        if s > 0:
            i = self.upstream[who, s, k]
            ready = self.done[0][who, s - 1] >= i
            who, k, i, start = who[ready], k[ready], i[ready], start[ready]
            start = np.maximum(start, self.sent[0][who, s - 1, i])
        size = self.sizes[0][who, s, k - 1]
        end = start + t.forward_compute[s][size]
        self.ends[0][who, s, k] = end
        if s < last:
            previous = self.sent[0][who, s, k - 1]
            self.sent[0][who, s, k] = np.maximum(end, previous) + t.forward_transfer[s][size]
        self.done[0][who, s] = k
        self.free[who, s] = end
        return who

    def backward(self, who: np.ndarray, s: int) -> np.ndarray:
        """Run backward ``k`` of stage ``s`` for the individuals ``who`` whose inputs are
        there; returns those."""
        t, last = self.ticked, self.ticked.num_stages - 1
        k = self.done[1][who, s] + 1
        own = self.own[who, s, k]
        ready = self.done[0][who, s] >= own
        if s < last:
            i = self.downstream[who, s, k]
            ready &= self.done[1][who, s + 1] >= i
            i = i[ready]
        who, k, own = who[ready], k[ready], own[ready]
        start = np.maximum(self.free[who, s], self.ends[0][who, s, own])
        if s < last:
            start = np.maximum(start, self.sent[1][who, s + 1, i])
        size = self.sizes[1][who, s, k - 1]
        end = start + t.backward_compute[s][size]
        self.ends[1][who, s, k] = end
        if s > 0:
            previous = self.sent[1][who, s, k - 1]
            self.sent[1][who, s, k] = np.maximum(end, previous) + t.backward_transfer[s - 1][size]
        self.done[1][who, s] = k
        self.free[who, s] = end
        return who

    def stage(self, who: np.ndarray, s: int) -> bool:
        """Stage ``s`` of the individuals ``who`` runs ops until each waits; whether any
        ran."""
        progressed = False
        while True:
            who = who[self.position[who, s] < self.length[who, s]]
            op = self.order[who, s, self.position[who, s]]
            ran = np.concatenate(
                (self.forward(who[op == FORWARD_OP], s), self.backward(who[op == BACKWARD_OP], s))
            )
            if not len(ran):
                return progressed
            self.position[ran, s] += 1
            progressed = True
            who = ran


def ordered_ends(
    forward: np.ndarray, backward: np.ndarray, order: np.ndarray, ticked: TickedProblem
) -> tuple[np.ndarray, np.ndarray]:
    """Iteration ticks ``(P,)`` and ``peak_held`` ``(P, S)`` (samples) of every individual.

    ``forward`` / ``backward``: ``(P, S, K)`` sizes in units; ``order``: ``(P, S, L)`` op
    codes. :data:`~tidgap.backends.evaluator.INVALID` and 0 where the order cannot finish.
    """
    forward, backward, order = np.asarray(forward), np.asarray(backward), np.asarray(order)
    count, stages = forward.shape[:2]
    U = ticked.num_units
    P, Q = prefix_sums(forward, U), prefix_sums(backward, U)
    forwards = np.count_nonzero(forward, axis=2)
    backwards = np.count_nonzero(backward, axis=2)
    valid = counts_hold(order, forwards, backwards)
    run = _Run(
        ticked=ticked,
        sizes=(forward.astype(np.int64), backward.astype(np.int64)),
        order=order,
        length=forwards + backwards,
        upstream=np.concatenate((np.zeros_like(P[:, :1]), holders(P[:, :-1], P[:, 1:])), axis=1),
        own=holders(P, Q),
        downstream=np.concatenate((holders(Q[:, 1:], Q[:, :-1]), np.zeros_like(Q[:, :1])), axis=1),
        ends=(np.zeros_like(P), np.zeros_like(Q)),
        sent=(np.zeros_like(P), np.zeros_like(Q)),
        done=(np.zeros((count, stages), np.int64), np.zeros((count, stages), np.int64)),
        position=np.zeros((count, stages), np.int64),
        free=np.zeros((count, stages), np.int64),
    )
    everyone = np.flatnonzero(valid)
    while any([run.stage(everyone, s) for s in range(stages)]):
        pass
    finished = valid & (run.position == run.length).all(axis=1)
    last = np.take_along_axis(run.ends[1], backwards[..., None], axis=2)[..., 0]
    ticks = np.where(finished, (last + ticked.tails).max(axis=1, initial=0), INVALID)
    held = np.where(finished[:, None], peaks(order, P, Q) * ticked.unit, 0)
    return ticks.astype(np.int64), held.astype(np.int64)
