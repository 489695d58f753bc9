"""Ordered plans in NumPy: the event simulation of model.md (Ordered plans, Timing),
vectorised over the population.

Stages are swept in turn, down then up (forwards flow down, gradients up); at stage ``s``
every individual whose next op there has its inputs runs it, at once, and those that ran
try their next op, until none at ``s`` can. A sweep in which no individual progresses ends
the simulation; individuals with ops left (a deadlock) or whose order breaks rule
``count`` score :data:`~tidgap.backends.evaluator.INVALID`. All arithmetic is int64
``max`` and ``+`` on ticks, so the results equal
:mod:`tidgap.fallback_cpu.windowed_numba`'s exactly.

State (``K`` the chromosomes' width, 1-based microbatches), stage-major so that one
stage's rows gather by flat index: ``ends`` and ``sent`` ``(S, P * (K+1))`` (``EF``/``EB``
and the arrivals ``A``/``A'`` on the link, index 0 unused / 0), ``done``, ``position``,
``free`` ``(S, P)``.
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
    """``(A, B, K+1)`` non-decreasing ``rows`` and ``(A, B, J)`` ``queries`` ->
    ``min{i : rows[a, b, i] >= queries[a, b, j]}`` per row, ``(A, B, J)``."""
    count = rows.shape[0] * rows.shape[1]
    if count == 0:
        return np.zeros(queries.shape, dtype=np.int64)
    flat = batched_searchsorted(rows.reshape(count, -1), queries.reshape(count, -1))
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


def stage_major(array: np.ndarray) -> np.ndarray:
    """``(P, S, W)`` -> ``(S, P * W)``: row ``s`` holds stage ``s`` of every individual,
    entry ``p * W + w`` (flat indices gather faster than multi-axis ones)."""
    count, stages, width = array.shape
    return np.ascontiguousarray(array.transpose(1, 0, 2)).reshape(stages, count * width)


@dataclass
class _Run:
    """The simulation state of a population (see the module docstring), stage-major: row
    ``s`` of a table holds stage ``s``, entry ``p * W + k`` (``W`` its width) or ``p``."""

    ticked: TickedProblem
    sizes: tuple[np.ndarray, np.ndarray]  # forward, backward sizes (S, P*K) int64
    order: np.ndarray  # (S, P*L) int8
    widths: tuple[int, int, int]  # K_f + 1, K_b + 1, L
    length: np.ndarray  # (S, P) M_s + N_s
    upstream: np.ndarray  # (S, P*(Kf+1)): forward k of s waits for A[s-1][upstream]
    own: np.ndarray  # (S, P*(Kb+1)): backward k of s waits for EF[s][own]
    downstream: np.ndarray  # (S, P*(Kb+1)): backward k of s waits for A'[s+1][downstream]
    ends: tuple[np.ndarray, np.ndarray]  # EF (S, P*(Kf+1)), EB (S, P*(Kb+1))
    sent: tuple[np.ndarray, np.ndarray]  # A, A', as EF, EB
    done: tuple[np.ndarray, np.ndarray]  # forwards, backwards done (S, P)
    position: np.ndarray  # (S, P)
    free: np.ndarray  # (S, P)

    def forward(self, who: np.ndarray, s: int) -> np.ndarray:
        """Run forward ``k`` of stage ``s`` for the individuals ``who`` whose input is
        there; returns those."""
        t, last, width = self.ticked, self.ticked.num_stages - 1, self.widths[0]
        k = self.done[0][s, who] + 1
        if s > 0:
            i = self.upstream[s, who * width + k]
            ready = self.done[0][s - 1, who] >= i
            who, k, i = who[ready], k[ready], i[ready]
        at = who * width + k
        start = self.free[s, who]
        if s > 0:
            start = np.maximum(start, self.sent[0][s - 1, who * width + i])
        size = self.sizes[0][s, at - who - 1]
        end = start + t.forward_compute[s][size]
        self.ends[0][s, at] = end
        if s < last:
            previous = self.sent[0][s, at - 1]
            self.sent[0][s, at] = np.maximum(end, previous) + t.forward_transfer[s][size]
        self.done[0][s, who] = k
        self.free[s, who] = end
        return who

    def backward(self, who: np.ndarray, s: int) -> np.ndarray:
        """Run backward ``k`` of stage ``s`` for the individuals ``who`` whose inputs are
        there; returns those."""
        t, last = self.ticked, self.ticked.num_stages - 1
        width_f, width = self.widths[0], self.widths[1]
        k = self.done[1][s, who] + 1
        at = who * width + k
        own = self.own[s, at]
        ready = self.done[0][s, who] >= own
        if s < last:
            i = self.downstream[s, at]
            ready &= self.done[1][s + 1, who] >= i
            i = i[ready]
        who, k, at, own = who[ready], k[ready], at[ready], own[ready]
        start = np.maximum(self.free[s, who], self.ends[0][s, who * width_f + own])
        if s < last:
            start = np.maximum(start, self.sent[1][s + 1, who * width + i])
        size = self.sizes[1][s, at - who - 1]
        end = start + t.backward_compute[s][size]
        self.ends[1][s, at] = end
        if s > 0:
            previous = self.sent[1][s, at - 1]
            self.sent[1][s, at] = np.maximum(end, previous) + t.backward_transfer[s - 1][size]
        self.done[1][s, who] = k
        self.free[s, who] = end
        return who

    def stage(self, who: np.ndarray, s: int) -> bool:
        """Stage ``s`` of the individuals ``who`` runs ops until each waits; whether any
        ran."""
        progressed = False
        while True:
            who = who[self.position[s, who] < self.length[s, who]]
            op = self.order[s, who * self.widths[2] + self.position[s, who]]
            ran = np.concatenate(
                (self.forward(who[op == FORWARD_OP], s), self.backward(who[op == BACKWARD_OP], s))
            )
            if not len(ran):
                return progressed
            self.position[s, ran] += 1
            progressed = True
            who = ran


def ordered_ends(
    forward: np.ndarray, backward: np.ndarray, order: np.ndarray, ticked: TickedProblem
) -> tuple[np.ndarray, np.ndarray]:
    """Iteration ticks ``(P,)`` and ``peak_held`` ``(P, S)`` (samples) of every individual.

    ``forward`` / ``backward``: ``(P, S, K)`` sizes in units; ``order``: ``(P, S, L)`` op
    codes. :data:`~tidgap.backends.evaluator.INVALID` and 0 where the order cannot finish.
    Sweeps run the stages down, then up (forwards flow down, gradients up).
    """
    forward, backward, order = np.asarray(forward), np.asarray(backward), np.asarray(order)
    count, stages = forward.shape[:2]
    U = ticked.num_units
    P, Q = prefix_sums(forward, U), prefix_sums(backward, U)
    forwards = np.count_nonzero(forward, axis=2)
    backwards = np.count_nonzero(backward, axis=2)
    valid = counts_hold(order, forwards, backwards)
    zeros = np.zeros((stages, count), np.int64)
    Ps, Qs = (np.ascontiguousarray(x.transpose(1, 0, 2)) for x in (P, Q))  # (S, P, K+1)
    none = np.zeros((1, *Ps.shape[1:]), np.int64), np.zeros((1, *Qs.shape[1:]), np.int64)
    run = _Run(
        ticked=ticked,
        sizes=(stage_major(forward.astype(np.int64)), stage_major(backward.astype(np.int64))),
        order=stage_major(order.astype(np.int8)),
        widths=(P.shape[2], Q.shape[2], order.shape[2]),
        length=(forwards + backwards).T.copy(),
        upstream=np.concatenate((none[0], holders(Ps[:-1], Ps[1:]))).reshape(stages, -1),
        own=holders(Ps, Qs).reshape(stages, -1),
        downstream=np.concatenate((holders(Qs[1:], Qs[:-1]), none[1])).reshape(stages, -1),
        ends=(np.zeros_like(Ps).reshape(stages, -1), np.zeros_like(Qs).reshape(stages, -1)),
        sent=(np.zeros_like(Ps).reshape(stages, -1), np.zeros_like(Qs).reshape(stages, -1)),
        done=(zeros.copy(), zeros.copy()),
        position=zeros.copy(),
        free=zeros.copy(),
    )
    everyone = np.flatnonzero(valid)
    sweep = [*range(stages), *reversed(range(stages))]
    while any([run.stage(everyone, s) for s in sweep]):
        pass
    finished = valid & (run.position == run.length).all(axis=0)
    last = np.take_along_axis(
        run.ends[1].reshape(stages, count, -1), backwards.T[..., None], axis=2
    )[..., 0].T
    ticks = np.where(finished, (last + ticked.tails).max(axis=1, initial=0), INVALID)
    held = np.where(finished[:, None], peaks(order, P, Q) * ticked.unit, 0)
    return ticks.astype(np.int64), held.astype(np.int64)
