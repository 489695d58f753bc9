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

Run pricing (:mod:`tidgap.backends.run_pricing`'s rule, computed here in the loop): per
stage, once its holder indices are known, whether every backward boundary is a forward
boundary (else it recomputes: its ops at the recompute tables) and the prefix sums of
``Tb_s`` over its forward chunks, whose difference prices a stored-graph backward; as each
op runs, the op before it in the order (a stored-graph forward right after a backward of
its size, the last stage's backward right after the forward of the same samples: the
order tables).

Parallel mapping: the individuals shared out among threads
(:mod:`tidgap.fallback_cpu.threads`); each share allocates its scratch once: ``(S, K+2)``
int64 prefix sums and holder indices (``i`` and ``own`` above: per stage three merges of
two prefix rows, run in lockstep), ``(S, K+1)`` forward ends, ``(S+2, K+1)`` arrivals and
``(S+2,)`` op counts with a padding stage on either side, and ``(S,)`` int64 counters. A
stage's visit keeps its counters in locals and tracks the units it holds, so ``peak_held``
needs no pass of its own. The checks (sizes, rule ``count``) run without branches. Numba is
imported only when this module is (``import tidgap`` does not import it).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tidgap.backends.evaluator import INVALID, not_partitions
from tidgap.backends.ticks import TickedProblem, stage_link_ticks
from tidgap.fallback_cpu.numba_cache import CACHING
from tidgap.fallback_cpu.threads import over_rows
from tidgap.optimize.genome import BACKWARD_OP, FORWARD_OP, NO_OP, ORDER_GENE


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _prefix(row, prefix, num_units):  # pragma: no cover - compiled
    """``prefix[1..K]`` of one row of sizes (``U`` after its last microbatch); its number of
    microbatches ``m``, or -1 unless it partitions ``U``. Without branches: sizes at most
    ``U`` summing to ``U`` with ``m`` non-zero ones are a partition iff the first ``m`` sum
    to ``U`` (a zero among them would leave a size of at least 1 after them)."""
    total = np.int64(0)
    m = 0
    largest = np.uint32(0)
    for k in range(row.shape[0]):
        b = row[k]
        largest = max(largest, b)
        m += b != 0
        total += b
        prefix[k + 1] = total
    return -1 if (largest > num_units) | (total != num_units) | (prefix[m] != num_units) else m


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _holders(r1, q1, c1, o1, r2, q2, c2, o2, r3, q3, c3, o3):  # pragma: no cover - compiled
    """Three merges in lockstep: ``o[k] = min{i : r[i] >= q[k]}`` for ``k = 1..c`` of each
    ``(r, q, c, o)`` (``r`` and ``q`` non-decreasing, ``r[0] = 0`` below every query, ``r``'s
    last prefix ``U`` above none; ``q`` and ``o`` hold one entry past ``c``, written and read
    once a merge is done). Each merge advances without branches (a walk's branches
    mispredict on random partitions) along a chain of dependent loads; three independent
    chains keep the core busy where one waits on its loads."""
    i1 = i2 = i3 = 0
    k1 = k2 = k3 = 1
    while (k1 <= c1) | (k2 <= c2) | (k3 <= c3):
        a1 = k1 <= c1
        a2 = k2 <= c2
        a3 = k3 <= c3
        u1 = r1[i1] < q1[k1]
        u2 = r2[i2] < q2[k2]
        u3 = r3[i3] < q3[k3]
        o1[k1] = i1  # rewritten until the query is passed
        o2[k2] = i2
        o3[k3] = i3
        i1 += u1 & a1
        i2 += u2 & a2
        i3 += u3 & a3
        k1 += (1 - u1) & a1
        k2 += (1 - u2) & a2
        k3 += (1 - u3) & a3


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _ordered_rows(
    forward,
    backward,
    order,
    fc,
    bc,
    ft,
    bt,
    tails,
    unit,
    rf,
    rb,
    fab,
    baf,
    priced,
    ticks,
    peaks,
    first,
    end,
):  # pragma: no cover - compiled
    """Individuals ``first..end-1`` of :func:`ordered_ends` (one thread's share): their
    ``ticks (P,)`` and ``peaks (P, S)`` written in place; returns ``1 +`` the last of them
    whose sizes are not partitions, or 0. ``ft`` / ``bt``: ``(S, U+1)`` link ticks of each
    stage's forwards / backwards (0 for the last / first stage's). With ``priced`` (run
    pricing, :mod:`tidgap.backends.run_pricing`'s rule), a stage some of whose backward
    boundaries are not forward boundaries recomputes, its ops at ``rf`` / ``rb`` ``(S,
    U+1)``, and on any other a backward costs the sum of ``bc`` over the forward chunks it
    covers, a forward right after a backward of its size ``fab``, and on the last stage a
    backward right after the forward of the same samples ``baf`` ``(S, U+1)``."""
    stages, kf = forward.shape[1], forward.shape[2]
    kb = backward.shape[2]
    width = order.shape[2]
    num_units = fc.shape[1] - 1
    last = stages - 1
    pf = np.zeros((stages, kf + 2), dtype=np.int64)
    qb = np.zeros((stages, kb + 2), dtype=np.int64)
    ef = np.zeros((stages, kf + 1), dtype=np.int64)
    upstream = np.zeros((stages, kf + 2), dtype=np.int64)
    own = np.zeros((stages, kb + 2), dtype=np.int64)
    graphs = np.zeros((stages, kf + 1), dtype=np.int64)  # sums of bc over forward chunks
    again = np.zeros(stages, dtype=np.bool_)  # the stage recomputes
    downstream = np.zeros((stages, kb + 2), dtype=np.int64)
    m = np.zeros(stages, dtype=np.int64)
    n = np.zeros(stages, dtype=np.int64)
    position = np.zeros(stages, dtype=np.int64)
    free = np.zeros(stages, dtype=np.int64)
    held = np.zeros(stages, dtype=np.int64)
    most = np.zeros(stages, dtype=np.int64)
    stack = np.zeros(stages, dtype=np.int64)
    queued = np.zeros(stages, dtype=np.bool_)
    # Row s + 1 is stage s; rows 0 and S + 1 are never waited on (all done, arrivals
    # 0), so the first and last stages need no branches.
    af = np.zeros((stages + 2, kf + 1), dtype=np.int64)
    ab = np.zeros((stages + 2, kb + 1), dtype=np.int64)
    nf = np.zeros(stages + 2, dtype=np.int64)
    nb = np.zeros(stages + 2, dtype=np.int64)
    nf[0] = nb[stages + 1] = kf + kb + 1
    bad = 0
    for p in range(first, end):
        partitions = True
        for s in range(stages):
            m[s] = _prefix(forward[p, s], pf[s], num_units)
            n[s] = _prefix(backward[p, s], qb[s], num_units)
            partitions &= (m[s] > 0) & (n[s] > 0)
        if not partitions:
            bad = p + 1
            continue
        # Rule count: M_s forwards and N_s backwards, then padding only.
        counted = True
        remaining = 0
        for s in range(stages):
            total = m[s] + n[s]
            forwards = 0
            backwards = 0
            for position_ in range(width):
                op = order[p, s, position_]
                is_f = op == FORWARD_OP
                is_b = op == BACKWARD_OP
                forwards += is_f
                backwards += is_b
                inside = position_ < total  # an op there, padding after: no branches
                counted &= (inside & (is_f | is_b)) | ((position_ >= total) & (op == NO_OP))
            counted &= (forwards == m[s]) & (backwards == n[s])
            remaining += total
        if not counted:
            continue
        for s in range(stages):
            # The first stage has no upstream, the last no downstream: merges of 0.
            _holders(
                pf[max(s - 1, 0)], pf[s], m[s] * (s > 0), upstream[s],
                pf[s], qb[s], n[s], own[s],
                qb[min(s + 1, last)], qb[s], n[s] * (s < last), downstream[s],
            )  # fmt: skip
            if priced:
                total = np.int64(0)
                for i in range(m[s]):
                    total += bc[s, forward[p, s, i]]
                    graphs[s, i + 1] = total
                stored = True
                for k in range(1, n[s] + 1):
                    stored &= pf[s, own[s, k]] == qb[s, k]
                again[s] = not stored
            nf[s + 1] = 0
            nb[s + 1] = 0
            position[s] = 0
            free[s] = 0
            held[s] = 0
            most[s] = 0
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
            pos = position[s]
            ran = pos
            total = m[s] + n[s]
            done_f = nf[r]
            done_b = nb[r]
            fr = free[s]
            h = held[s]
            peak = most[s]
            last_af = af[r, done_f]
            last_ab = ab[r, done_b]
            up_done = nf[r - 1]
            down_done = nb[r + 1]
            while pos < total:
                if order[p, s, pos] == FORWARD_OP:
                    k = done_f + 1
                    i = upstream[s, k]
                    if up_done < i:
                        break
                    size = forward[p, s, k - 1]
                    if again[s]:
                        cost = rf[s, size]
                    elif (
                        priced
                        and pos > 0
                        and order[p, s, pos - 1] == BACKWARD_OP
                        and backward[p, s, done_b - 1] == size
                    ):  # right after a backward of its size
                        cost = fab[s, size]
                    else:
                        cost = fc[s, size]
                    fr = max(fr, af[r - 1, i]) + cost
                    ef[s, k] = fr
                    last_af = max(fr, last_af) + ft[s, size]
                    af[r, k] = last_af
                    done_f = k
                    h += size
                    peak = max(peak, h)
                else:
                    k = done_b + 1
                    mine = own[s, k]
                    i = downstream[s, k]
                    if (done_f < mine) | (down_done < i):
                        break
                    size = backward[p, s, k - 1]
                    if again[s]:
                        cost = rb[s, size]
                    elif (
                        priced
                        and s == last
                        and pos > 0
                        and order[p, s, pos - 1] == FORWARD_OP
                        and pf[s, done_f - 1] == qb[s, k - 1]
                        and pf[s, done_f] == qb[s, k]
                    ):  # right after the forward of the same samples
                        cost = baf[s, size]
                    elif priced:
                        cost = graphs[s, mine] - graphs[s, own[s, k - 1]]
                    else:
                        cost = bc[s, size]
                    fr = max(max(fr, ef[s, mine]), ab[r + 1, i]) + cost
                    last_ab = max(fr, last_ab) + bt[s, size]
                    ab[r, k] = last_ab
                    done_b = k
                    h -= size
                pos += 1
            nf[r] = done_f
            nb[r] = done_b
            free[s] = fr
            held[s] = h
            most[s] = peak
            position[s] = pos
            if pos > ran:
                remaining -= pos - ran
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
            peaks[p, s] = most[s] * unit
        ticks[p] = best
    return bad


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
    t = ticked
    fc = np.ascontiguousarray(t.forward_compute, dtype=np.int64)
    bc = np.ascontiguousarray(t.backward_compute, dtype=np.int64)
    tables = (
        fc,
        bc,
        *stage_link_ticks(t),
        np.ascontiguousarray(t.tails, dtype=np.int64),
        np.int64(t.unit),
        *t.run_tables(),
        t.run_priced,
    )
    ticks = np.full(population, INVALID, dtype=np.int64)
    peaks = np.zeros((population, forward.shape[1]), dtype=np.int64)

    bad = max(over_rows(_ordered_rows, population, forward, backward, order, *tables, ticks, peaks))
    if bad:
        raise ValueError(not_partitions(int(bad) - 1, t.num_units))
    return ticks, peaks
