"""Ordered plans as compiled loops (Numba): one event simulation per individual (model.md,
Ordered plans, Timing), the same results as :mod:`tidgap.fallback_cpu.windowed_numpy`.

Per individual ``p`` (1-based microbatches ``k``; ``P``/``Q`` the forward/backward prefix
sums in units)::

    forward k of s:   start = max(free_s, A[s-1][i]),  i = min{i : P[s-1][i] >= P[s][k]}
                      EF[s][k] = start + Tf_s(f_k)
                      A[s][k]  = max(EF[s][k], A[s][k-1]) + Cf_s(f_k)          A[s][0] = 0
    backward k of s:  start = max(free_s, EF[s][own], A'[s+1][i]),
                      own = min{i : P[s][i] >= Q[s][k]},  i = min{i : Q[s+1][i] >= Q[s][k]}
                      EB[s][k] = start + Tb_s(c_k)
                      A'[s][k] = max(EB[s][k], A'[s][k-1]) + Cb_{s-1}(c_k)     A'[s][0] = 0

(``A[s][0] = 0`` stands for ``-inf``: ticks are non-negative.) A worklist of stages drives
the loop: a stage runs ops until one waits for an input not yet computed, and a stage that
ran puts its two neighbours (the only stages it can unblock) back on the list; the loop
ends when the list is empty. An individual with ops left (deadlock: rules 1 or 2 broken)
or whose order row breaks rule ``count`` scores ``INVALID`` with ``peak_held`` 0. Sizes
that are not partitions of ``U`` raise ``ValueError``.

Parallel mapping: ``prange`` over chunks of individuals (a few per thread); each chunk
allocates its scratch once: ``(S, K+1)`` int64 prefix sums, end times and the holder
indices (``i`` and ``own`` above, each a merge of two prefix rows advanced without
branches: a walk mispredicts on random partitions), ``(S+2, K+1)`` arrivals and ``(S+2,)``
op counts with a padding stage on either side, and ``(S,)`` int64 counters; ``peak_held``
is a branch-free pass over the order. Numba is imported only when this module is
(``import tidgap`` does not import it).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from tidgap.backends.evaluator import INVALID, not_partitions
from tidgap.backends.ticks import TickedProblem, stage_link_ticks
from tidgap.optimize.genome import BACKWARD_OP, FORWARD_OP, NO_OP, ORDER_GENE

#: At most this many individuals share one scratch allocation (one ``prange`` iteration).
_MAX_CHUNK = 64


@njit(cache=True, boundscheck=False, nogil=True)
def _prefix(row, prefix, num_units):  # pragma: no cover - compiled
    """``prefix[1..m]`` of one row of sizes; ``m``, or -1 unless it partitions ``U``."""
    total = 0
    m = 0
    for k in range(row.shape[0]):
        b = row[k]
        if b == 0:
            break
        if b > num_units:
            return -1
        total += b
        prefix[k + 1] = total
        m = k + 1
    for k in range(m, row.shape[0]):
        if row[k] != 0:
            return -1
    return m if total == num_units else -1


@njit(cache=True, boundscheck=False, nogil=True)
def _holders(rows, queries, count, out):  # pragma: no cover - compiled
    """``out[k] = min{i : rows[i] >= queries[k]}`` for ``k = 1..count`` (both non-decreasing,
    ``rows[0] = 0`` below every query, the row's last prefix ``U`` above none): one merge of
    the two, advanced without branches (a walk's branches mispredict on random partitions)."""
    i = 0
    k = 1
    while k <= count:
        under = rows[i] < queries[k]
        out[k] = i  # rewritten until the query is passed
        i += under
        k += 1 - under


@njit(parallel=True, cache=True, boundscheck=False, nogil=True)
def _ordered_kernel(
    forward, backward, order, fc, bc, ft, bt, tails, unit, chunk
):  # pragma: no cover - compiled
    """``ticks (P,)``, ``peaks (P, S)`` and ``1 +`` the index of an individual whose sizes
    are not partitions (0 when none). ``ft`` / ``bt``: ``(S, U+1)`` link ticks of each
    stage's forwards / backwards (0 for the last / first stage's)."""
    population, stages, kf = forward.shape
    kb = backward.shape[2]
    width = order.shape[2]
    num_units = fc.shape[1] - 1
    last = stages - 1
    ticks = np.full(population, INVALID, dtype=np.int64)
    peaks = np.zeros((population, stages), dtype=np.int64)
    num_chunks = (population + chunk - 1) // chunk
    bad = np.zeros(num_chunks, dtype=np.int64)
    for c in prange(num_chunks):
        pf = np.zeros((stages, kf + 1), dtype=np.int64)
        qb = np.zeros((stages, kb + 1), dtype=np.int64)
        ef = np.zeros((stages, kf + 1), dtype=np.int64)
        upstream = np.zeros((stages, kf + 1), dtype=np.int64)
        own = np.zeros((stages, kb + 1), dtype=np.int64)
        downstream = np.zeros((stages, kb + 1), dtype=np.int64)
        m = np.zeros(stages, dtype=np.int64)
        n = np.zeros(stages, dtype=np.int64)
        position = np.zeros(stages, dtype=np.int64)
        free = np.zeros(stages, dtype=np.int64)
        stack = np.zeros(stages, dtype=np.int64)
        queued = np.zeros(stages, dtype=np.bool_)
        # Row s + 1 is stage s; rows 0 and S + 1 are never waited on (all done, arrivals
        # 0), so the first and last stages need no branches.
        af = np.zeros((stages + 2, kf + 1), dtype=np.int64)
        ab = np.zeros((stages + 2, kb + 1), dtype=np.int64)
        nf = np.zeros(stages + 2, dtype=np.int64)
        nb = np.zeros(stages + 2, dtype=np.int64)
        nf[0] = nb[stages + 1] = kf + kb + 1
        for p in range(c * chunk, min((c + 1) * chunk, population)):
            partitions = True
            for s in range(stages):
                m[s] = _prefix(forward[p, s], pf[s], num_units)
                n[s] = _prefix(backward[p, s], qb[s], num_units)
                partitions &= (m[s] > 0) & (n[s] > 0)
            if not partitions:
                bad[c] = p + 1
                continue
            # Rule count: M_s forwards and N_s backwards, then padding only.
            counted = True
            remaining = 0
            for s in range(stages):
                forwards = 0
                ops = 0
                for position_ in range(width):
                    op = order[p, s, position_]
                    if op == NO_OP:
                        break
                    ops += 1
                    forwards += op == FORWARD_OP
                    counted &= (op == FORWARD_OP) | (op == BACKWARD_OP)
                for rest in range(ops, width):
                    counted &= order[p, s, rest] == NO_OP
                counted &= (forwards == m[s]) & (ops == m[s] + n[s])
                remaining += ops
            if not counted:
                continue
            for s in range(stages):
                if s > 0:
                    _holders(pf[s - 1], pf[s], m[s], upstream[s])
                _holders(pf[s], qb[s], n[s], own[s])
                if s < last:
                    _holders(qb[s + 1], qb[s], n[s], downstream[s])
                nf[s + 1] = 0
                nb[s + 1] = 0
                position[s] = 0
                free[s] = 0
            # A worklist of stages: one that ran an op may unblock its neighbours.
            top = 0
            for s in range(last, -1, -1):
                stack[top] = s
                queued[s] = True
                top += 1
            while top > 0:
                top -= 1
                s = stack[top]
                queued[s] = False
                r = s + 1
                ran = position[s]
                while position[s] < m[s] + n[s]:
                    if order[p, s, position[s]] == FORWARD_OP:
                        k = nf[r] + 1
                        i = upstream[s, k]
                        if nf[r - 1] < i:
                            break
                        size = forward[p, s, k - 1]
                        end = max(free[s], af[r - 1, i]) + fc[s, size]
                        ef[s, k] = end
                        af[r, k] = max(end, af[r, k - 1]) + ft[s, size]
                        nf[r] = k
                    else:
                        k = nb[r] + 1
                        mine = own[s, k]
                        i = downstream[s, k]
                        if (nf[r] < mine) | (nb[r + 1] < i):
                            break
                        size = backward[p, s, k - 1]
                        end = max(free[s], ef[s, mine], ab[r + 1, i]) + bc[s, size]
                        ab[r, k] = max(end, ab[r, k - 1]) + bt[s, size]
                        nb[r] = k
                    free[s] = end
                    position[s] += 1
                if position[s] > ran:
                    remaining -= position[s] - ran
                    if s > 0 and not queued[s - 1]:
                        stack[top] = s - 1
                        queued[s - 1] = True
                        top += 1
                    if s < last and not queued[s + 1]:
                        stack[top] = s + 1
                        queued[s + 1] = True
                        top += 1
            if remaining > 0:
                continue
            best = np.int64(0)
            for s in range(stages):
                best = max(best, free[s] + tails[s])  # its last op: its last backward
                # Held after each op; after a backward it is below its value after the
                # last forward, so the most over all ops is the most over the forwards.
                i = 0
                j = 0
                peak = np.int64(0)
                for position_ in range(m[s] + n[s]):
                    forward_op = order[p, s, position_] == FORWARD_OP
                    i += forward_op
                    j += 1 - forward_op
                    peak = max(peak, pf[s, i] - qb[s, j])
                peaks[p, s] = peak * unit
            ticks[p] = best
    return ticks, peaks, bad.max()


def ordered_ends(
    forward: np.ndarray, backward: np.ndarray, order: np.ndarray, ticked: TickedProblem
) -> tuple[np.ndarray, np.ndarray]:
    """Iteration ticks ``(P,)`` and ``peak_held`` ``(P, S)`` (samples) of every individual.

    ``forward`` / ``backward``: ``(P, S, K)`` sizes in units; ``order``: ``(P, S, L)`` op
    codes. ``INVALID`` and 0 where the order cannot finish; equal to
    :func:`tidgap.fallback_cpu.windowed_numpy.ordered_ends`.
    """
    # Viewed unsigned, a negative size reads as too large and is reported, not indexed.
    forward = np.ascontiguousarray(forward, dtype=np.int32).view(np.uint32)
    backward = np.ascontiguousarray(backward, dtype=np.int32).view(np.uint32)
    order = np.ascontiguousarray(order, dtype=ORDER_GENE)
    population = len(forward)
    if population == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, forward.shape[1]), dtype=np.int64)
    chunk = max(1, min(_MAX_CHUNK, -(-population // (4 * numba.get_num_threads()))))
    t = ticked
    ticks, peaks, bad = _ordered_kernel(
        forward,
        backward,
        order,
        np.ascontiguousarray(t.forward_compute, dtype=np.int64),
        np.ascontiguousarray(t.backward_compute, dtype=np.int64),
        *stage_link_ticks(t),
        np.ascontiguousarray(t.tails, dtype=np.int64),
        np.int64(t.unit),
        chunk,
    )
    if bad:
        raise ValueError(not_partitions(int(bad) - 1, t.num_units))
    return ticks, peaks
