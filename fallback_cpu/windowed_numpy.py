"""Ordered plans in NumPy: the event simulation of model.md (Ordered plans, Timing),
vectorised over the population and the stages at once.

A *pair* is one stage of one individual. Each round, every pair whose next op has its
inputs runs it, all at once (an op's end depends only on its inputs, not on when it is
simulated, so rounds give the sweeps' results); a round in which no pair can run ends the
simulation. Individuals with ops left (a deadlock) or whose order breaks rule ``count``
score :data:`~tidgap.backends.evaluator.INVALID`. All arithmetic is int64 ``max`` and
``+`` on ticks, so the results equal :mod:`tidgap.fallback_cpu.windowed_numba`'s exactly.

State, flat over pairs ``q = (s + 1) * P + p`` (stages ``-1`` and ``S`` are zero padding,
so the first and last stages need no branches), ``W = (K_f + 1) + (K_b + 1)`` slots per
pair, slot ``t * (K_f + 1) + k`` for the ``k``-th (1-based) op of type ``t`` (0 forward,
1 backward): ``times`` ``(N, 2W)``, ends ``EF | EB`` then arrivals on the link ``A | A'``
(slot 0 of each: 0; ``EB`` is written, never read: a finished stage's last backward ends
at its ``free``); ``done`` ``(2, N)`` ops of each type done; ``position``, ``free``
``(N,)``. Static, ``(N, W)``: the two waits' holder indices and each op's entry in the
duration tables. The active pairs' next ops (:meth:`_Rounds.next_ops`) are kept beside
them, so a round checks its waits with two small gathers.
"""

from __future__ import annotations

import numpy as np

from tidgap.backends.evaluator import INVALID, not_partitions
from tidgap.backends.ticks import TickedProblem, stage_link_ticks
from tidgap.optimize.genome import BACKWARD_OP, FORWARD_OP, NO_OP


def prefix_sums(sizes: np.ndarray, num_units: int) -> tuple[np.ndarray, np.ndarray]:
    """``(P, S, K)`` int64 sizes in units -> ``(P, S, K+1)`` prefix sums and ``(P, S)``
    microbatch counts; ``ValueError`` unless every row is a partition of ``num_units``
    (sizes in ``0..U``, zeros only at the end: the first ``count`` sum to ``U``)."""
    prefix = np.zeros((*sizes.shape[:2], sizes.shape[2] + 1), dtype=np.int64)
    np.cumsum(sizes, axis=2, out=prefix[:, :, 1:])
    short = prefix[:, :, 1:] < num_units  # before the microbatch that completes the row
    bad = (
        (sizes.view(np.uint64) > num_units)  # negatives read as too large
        | (short & (sizes == 0))  # a zero before the row is complete
    ).any(axis=(1, 2)) | (prefix[:, :, -1] != num_units).any(axis=1)
    if bad.any():
        raise ValueError(not_partitions(int(np.argmax(bad)), num_units))
    used = short.sum(axis=2, dtype=np.int64) + 1
    return prefix, used


def count_dtype(width: int) -> type[np.signedinteger]:
    """The smallest dtype used for microbatch indices and counts up to ``width``."""
    return np.int8 if width < 127 else np.int64


def unit_holders(sizes: np.ndarray, num_units: int) -> np.ndarray:
    """``(..., K)`` partitions of ``U = num_units`` -> ``(..., U+1)``: entry ``v`` is
    ``min{i : prefix[i] >= v}`` (the microbatch holding unit ``v``; 0 for ``v = 0``), one
    ``repeat`` of the microbatch indices by their sizes."""
    width = sizes.shape[-1]
    dtype = count_dtype(width)
    counts = np.ones((*sizes.shape[:-1], width + 1), dtype=np.int64)
    counts[..., 1:] = sizes
    indices = np.broadcast_to(np.arange(width + 1, dtype=dtype), counts.shape)
    return np.repeat(indices.ravel(), counts.ravel()).reshape(*sizes.shape[:-1], num_units + 1)


def holders(table: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``(A, B, U+1)`` :func:`unit_holders` and ``(A, B, J)`` prefix sums ->
    ``min{i : prefix[a, b, i] >= queries[a, b, j]}``, ``(A, B, J)`` (``table``'s dtype)."""
    rows = np.arange(table.shape[0] * table.shape[1], dtype=np.int64).reshape(table.shape[:2])
    flat = rows[..., None] * table.shape[2] + queries
    return table.ravel()[flat]


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
    """``(P, S)`` units held at most after any op: ``P[s][i] - Q[s][j]`` with ``i``
    forwards and ``j`` backwards done (model.md, Memory). Past a row's ops (and in rows that
    break rule ``count``, whose peaks are not used) the indices are clipped to the tables."""
    i = np.cumsum(order == FORWARD_OP, axis=2, dtype=np.intp)
    j = np.arange(1, order.shape[2] + 1, dtype=np.intp) - i
    np.minimum(i, P.shape[2] - 1, out=i)
    np.minimum(j, Q.shape[2] - 1, out=j)
    held = np.take_along_axis(P, i, axis=2) - np.take_along_axis(Q, j, axis=2)
    return held.max(axis=2, initial=0)


def padded(stages: np.ndarray, below: int, above: int) -> np.ndarray:
    """``(S', P, ...)`` -> ``(below + S' + above, P, ...)`` with zero stages around it."""
    out = np.zeros((below + len(stages) + above, *stages.shape[1:]), dtype=stages.dtype)
    out[below : below + len(stages)] = stages
    return out


def slot_tables(
    forward: np.ndarray, backward: np.ndarray, P: np.ndarray, Q: np.ndarray, U: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per slot, ``(S+2, P, W)`` each: the holder indices of the first and second waits
    (a forward ``k`` of ``s`` waits for ``A[s-1][i]``, a backward for ``EF[s][own]`` and
    ``A'[s+1][i]``; 0 where there is no wait, its slot 0 being 0), and the op's entry
    ``(t S + s)(U+1) + size`` in the flat duration tables of :func:`cost_tables`."""
    count, stages, _ = forward.shape
    width_f = P.shape[2]
    Ps, Qs = P.transpose(1, 0, 2), Q.transpose(1, 0, 2)  # (S, P, K+1)
    Hf = unit_holders(forward.transpose(1, 0, 2), U)
    shape = (stages + 2, count, width_f + Q.shape[2])
    dtype = count_dtype(max(forward.shape[2], backward.shape[2]))
    first, second = np.zeros(shape, dtype=dtype), np.zeros(shape, dtype=dtype)
    cost = np.zeros(shape, dtype=np.int32 if 2 * stages * (U + 1) < 2**31 else np.int64)
    first[2 : stages + 1, :, :width_f] = holders(Hf[:-1], Ps[1:])
    first[1 : stages + 1, :, width_f:] = holders(Hf, Qs)
    second[1:stages, :, width_f:] = holders(
        unit_holders(backward[:, 1:].transpose(1, 0, 2), U), Qs[:-1]
    )
    base = np.arange(stages, dtype=np.int64)[:, None, None] * (U + 1)
    cost[1 : stages + 1, :, 1:width_f] = forward.transpose(1, 0, 2) + base
    cost[1 : stages + 1, :, width_f + 1 :] = backward.transpose(1, 0, 2) + (base + stages * (U + 1))
    return first, second, cost


def cost_tables(ticked: TickedProblem) -> tuple[np.ndarray, np.ndarray]:
    """Flat ``(2S (U+1),)`` compute and link ticks: forwards then backwards per stage;
    the link of the last stage's forwards and the first stage's backwards is 0."""
    compute = np.concatenate((ticked.forward_compute, ticked.backward_compute))
    transfer = np.concatenate(stage_link_ticks(ticked))
    return compute.astype(np.int64).ravel(), transfer.ravel()


class _Rounds:
    """The state of :func:`simulate` (see the module docstring), flat."""

    def __init__(
        self,
        order: np.ndarray,
        first: np.ndarray,
        second: np.ndarray,
        rows: np.ndarray,
        widths: tuple[int, int],
        ticked: TickedProblem,
    ) -> None:
        self.count, self.L = order.shape
        self.width_f, self.W = widths
        self.population = self.count // (ticked.num_stages + 2)
        self.compute, self.transfer = cost_tables(ticked)
        self.first, self.second, self.rows = first.ravel(), second.ravel(), rows.ravel()
        self.order = order.ravel()
        self.times = np.zeros(self.count * 2 * self.W, dtype=np.int64)
        self.done = np.zeros(2 * self.count, dtype=first.dtype)  # counts, like the waits
        self.position = np.zeros(self.count, dtype=np.int64)
        self.free = np.zeros(self.count, dtype=np.int64)

    def next_ops(self, q: np.ndarray) -> tuple[np.ndarray, ...]:
        """The next op of the pairs ``q``: its type ``t``, slot index ``at`` into the
        ``(N, W)`` tables, the index into ``done`` of the forwards its first wait counts,
        and the two counts it waits for."""
        t = self.order[q * self.L + self.position[q]].astype(np.int64)
        at = q * self.W + t * self.width_f + self.done[t * self.count + q] + 1
        return t, at, q - self.population * (1 - t), self.first[at], self.second[at]

    def run(
        self,
        q: np.ndarray,
        t: np.ndarray,
        at: np.ndarray,
        counted: np.ndarray,
        h1: np.ndarray,
        h2: np.ndarray,
    ) -> None:
        """Run the next op of the pairs ``q`` (their inputs are there), as
        :meth:`next_ops` gives it."""
        W, times = self.W, self.times
        start = np.maximum(self.free[q], times[counted * (2 * W) + W * (1 - t) + h1])
        below = (2 * W) * self.population + W + self.width_f  # A'[s+1][0] from pair s
        start = np.maximum(start, times[q * (2 * W) + below + h2])
        cost = self.rows[at]
        end = start + self.compute[cost]
        slot = at + q * W
        times[slot] = end
        times[slot + W] = np.maximum(end, times[slot + W - 1]) + self.transfer[cost]
        self.done[t * self.count + q] += 1
        self.free[q] = end
        self.position[q] += 1


def simulate(
    order: np.ndarray,
    length: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    rows: np.ndarray,
    widths: tuple[int, int],
    ticked: TickedProblem,
) -> tuple[np.ndarray, np.ndarray]:
    """Run rounds until none can; returns each pair's ``free`` (the end of its last op
    run) and ``position`` (ops run), ``(N,)`` each.

    ``order`` ``(N, L)`` op codes, ``length`` ``(N,)`` ops per pair (0: nothing to run),
    ``first`` / ``second`` / ``rows`` ``(N, W)`` as :func:`slot_tables` gives them. The
    next op of each active pair is kept beside it, renewed only for pairs that ran."""
    state = _Rounds(order, first, second, rows, widths, ticked)
    active = np.flatnonzero(length)
    below = state.count + active + state.population  # backwards done one stage below
    ops = list(state.next_ops(active))
    never = np.iinfo(ops[3].dtype).max  # the first wait of a finished pair: above any count
    finished = 0  # finished pairs still among the active ones
    done = state.done
    while len(active) > finished:
        t, at, counted, h1, h2 = ops
        ready = np.flatnonzero((done[counted] >= h1) & (done[below] >= h2))
        if not len(ready):
            break
        q = active[ready]
        state.run(q, *(x[ready] for x in ops))
        more = state.position[q] < length[q]
        if not more.all():
            h1[ready[~more]] = never
            finished += len(q) - np.count_nonzero(more)
            ready, q = ready[more], q[more]
        for x, renewed in zip(ops, state.next_ops(q), strict=True):
            x[ready] = renewed
        if 4 * finished > len(active):
            keep = state.position[active] < length[active]
            active, below = active[keep], below[keep]
            ops = [x[keep] for x in ops]
            finished = 0
    return state.free, state.position


def ordered_ends(
    forward: np.ndarray, backward: np.ndarray, order: np.ndarray, ticked: TickedProblem
) -> tuple[np.ndarray, np.ndarray]:
    """Iteration ticks ``(P,)`` and ``peak_held`` ``(P, S)`` (samples) of every individual.

    ``forward`` / ``backward``: ``(P, S, K)`` sizes in units; ``order``: ``(P, S, L)`` op
    codes. :data:`~tidgap.backends.evaluator.INVALID` and 0 where the order cannot finish.
    """
    forward, backward = np.asarray(forward, dtype=np.int64), np.asarray(backward, dtype=np.int64)
    order = np.asarray(order)
    count, stages = forward.shape[:2]
    U = ticked.num_units
    (P, forwards), (Q, backwards) = prefix_sums(forward, U), prefix_sums(backward, U)
    valid = counts_hold(order, forwards, backwards)
    # Past the most microbatches any row uses there are only zeros (and NO_OP): cut them.
    kf, kb = int(forwards.max(initial=1)), int(backwards.max(initial=1))
    forward, backward, order = forward[..., :kf], backward[..., :kb], order[..., : kf + kb]
    P, Q = P[..., : kf + 1], Q[..., : kb + 1]
    length = np.where(valid[:, None], forwards + backwards, 0).T  # (S, P)
    tables = slot_tables(forward, backward, P, Q, U)
    width_f, width = P.shape[2], tables[0].shape[2]
    free, position = simulate(
        padded(order.transpose(1, 0, 2), 1, 1).reshape(-1, order.shape[2]),
        padded(length, 1, 1).ravel(),
        *(table.reshape(-1, width) for table in tables),
        (width_f, width),
        ticked,
    )
    real = slice(count, (stages + 1) * count)
    finished = valid & (position[real] == length.ravel()).reshape(stages, count).all(axis=0)
    # A finished stage's last op is its last backward (it waits for every forward).
    last = free[real].reshape(stages, count).T
    ticks = np.where(finished, (last + ticked.tails).max(axis=1, initial=0), INVALID)
    held = np.where(finished[:, None], peaks(order, P, Q) * ticked.unit, 0)
    return ticks.astype(np.int64), held.astype(np.int64)
