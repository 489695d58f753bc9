"""Compiled loops (Numba) for the work before a search: baselines, global DP, lower bound.

Each kernel computes what its pure-Python reference computes, with the same float64
operations on the same operands, so the results are bit-identical (``max(a, b)`` is
written ``b if b > a else a``, Python's ``max``):

- :func:`baseline_times`: GPipe(m), 1F1B(m) and PipeDream(m) for every feasible ``m`` at
  once (references :func:`tidgap.schedules.baselines.gpipe`,
  :func:`~tidgap.schedules.baselines.one_f_one_b`, :func:`~tidgap.schedules.baselines.pipedream`);
- :func:`chain_dps`: the global DP of each direction (reference
  :func:`tidgap.optimize.heuristics.chain_dp`);
- :func:`least_total`: ``W(U)`` of the lower bound (no Python twin: tested against the
  least over every partition, enumerated, in ``tests/analysis/test_report.py``).

**Lanes.** Baselines run up to :data:`LANES` consecutive microbatch counts side by side,
the lane innermost so the loops vectorise (every hot loop runs all ``LANES`` lanes; unused
ones compute zeros). Lane ``i`` with ``m`` microbatches, ``U = q m + r``, runs its ``r``
large microbatches, then small ones: each lane keeps its current times and switches them
when it reaches microbatch ``r`` (no per-step select). GPipe and PipeDream lanes read
their result when they finish their ``m``-th step and then run on harmlessly; a 1F1B lane
past its last microbatch in a direction runs no-ops (time 0, transfers ``-inf``). Blocks
are dealt, largest first, to one thread per CPU (the kernels release the GIL:
:mod:`tidgap.fallback_cpu.threads`).

**1F1B by levels.** Give each operation a *level*: with ``w_s = min(S-s-1, m)``, stage
``s`` runs ``F_j`` at level ``s + j`` for ``j <= w_s`` and ``s + 2j`` for ``j > w_s``, and
``B_j`` at level ``2S - 1 - s + 2j`` (its start time if every operation took one time unit
and transfers were free). Along a stage's 1F1B order the levels grow; ``F_j`` of stage
``s-1`` and ``B_j`` of stage ``s+1`` come at a lower level than the operation that waits
for them; a stage has at most one operation per level (warm-up forwards end by level
``S-1``, later forwards and the backwards have opposite parities). So sweeping the levels
in order computes every operation after its inputs, in the event simulation's order per
stage and per link: the same values. Within a level stages go from ``S-1`` down to ``0``;
then one slot per link and direction holds everything in flight: activations sent at
level ``L`` are received at ``L + 1``, except ``F_{w_s}``'s, received before ``F_{w_s+1}``
is sent; gradients are received at the next level. ``w_s`` is the same for every lane of
a block because a block holds either one count or counts ``m >= S-1`` only.

Numba is imported only when this module is; :func:`warm_up` compiles everything (or
loads it from Numba's cache) on tiny inputs.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tidgap.fallback_cpu.numba_cache import CACHING
from tidgap.fallback_cpu.rows import copy_row, copy_rows
from tidgap.fallback_cpu.threads import in_threads, thread_count

#: Microbatch counts per block of lanes.
LANES = 64


@njit(cache=CACHING, inline="always")
def _max(a, b):  # pragma: no cover - compiled
    """Python's ``max(a, b)``: ``b`` only if it is greater."""
    return b if b > a else a


@njit(cache=CACHING)
def _lanes(times, first, n, width=LANES):  # pragma: no cover - compiled
    """``times[0, x, first + lane]`` (the large microbatch's time) as ``(rows, width)``, 0
    in the lanes from ``n`` on (they run along unread, so that every hot loop has
    ``width`` iterations and vectorises)."""
    rows = times.shape[1]
    out = np.zeros((rows, width))
    for x in range(rows):
        for lane in range(n):
            out[x, lane] = times[0, x, first + lane]
    return out


@njit(cache=CACHING)
def _to_small(current, times, first, lane):  # pragma: no cover - compiled
    """Lane ``lane`` switches every row of ``current`` to its small microbatch's time."""
    for x in range(current.shape[0]):
        current[x, lane] = times[1, x, first + lane]


@njit(cache=CACHING)
def _ascending(values):  # pragma: no cover - compiled
    """Indices that sort ``values`` (at most :data:`LANES` of them) ascending, by insertion:
    ``np.argsort`` would compile Numba's quicksort and its ``kind`` strings (about 2 s of a
    first run's compile)."""
    order = np.arange(values.shape[0])
    for i in range(1, values.shape[0]):
        k = order[i]
        j = i
        while j > 0 and values[order[j - 1]] > values[k]:
            order[j] = order[j - 1]
            j -= 1
        order[j] = k
    return order


@njit(cache=CACHING)
def _gpipe(ms, rs, first, n, tf, tb, cf, cb, tails, out):  # pragma: no cover - compiled
    """GPipe of lanes ``first..first+n-1``: per microbatch ``k`` and stage ``s``, ``F = max(F,
    R) + Tf``, then ``R`` of ``s+1`` ``= A = max(F, A) + Cf``; the same backward from each
    lane's forward end. ``ready[s]`` is ``R`` of stage ``s`` (0 where nothing is sent)."""
    S = tf.shape[1]
    top = ms[first + n - 1]
    t, c = _lanes(tf, first, n), _lanes(cf, first, n)
    ends = np.zeros((S, LANES))
    ready = np.full((S, LANES), -np.inf)
    ready[0] = 0.0
    forward_end = np.zeros(LANES)
    for k in range(top):
        for lane in range(n):
            if k == rs[first + lane]:
                _to_small(t, tf, first, lane)
                _to_small(c, cf, first, lane)
        for s in range(S - 1):
            for lane in range(LANES):
                end = _max(ends[s, lane], ready[s, lane]) + t[s, lane]
                ends[s, lane] = end
                ready[s + 1, lane] = _max(end, ready[s + 1, lane]) + c[s, lane]
        for lane in range(n):
            ends[S - 1, lane] = _max(ends[S - 1, lane], ready[S - 1, lane]) + t[S - 1, lane]
            if k + 1 == ms[first + lane]:
                forward_end[lane] = ends[S - 1, lane]
    t, c = _lanes(tb, first, n), _lanes(cb, first, n)
    for s in range(S):
        copy_row(ends[s], forward_end)  # G[s][0] = forward_end
    ready[:] = -np.inf
    ready[S - 1] = 0.0
    for k in range(top):
        for lane in range(n):
            if k == rs[first + lane]:
                _to_small(t, tb, first, lane)
                _to_small(c, cb, first, lane)
        for x in range(S - 1):
            s = S - 1 - x  # from the last stage down (a descending range does not vectorise)
            for lane in range(LANES):
                end = _max(ends[s, lane], ready[s, lane]) + t[s, lane]
                ends[s, lane] = end
                ready[s - 1, lane] = _max(end, ready[s - 1, lane]) + c[s - 1, lane]
        for lane in range(n):
            ends[0, lane] = _max(ends[0, lane], ready[0, lane]) + t[0, lane]
            if k + 1 == ms[first + lane]:
                best = ends[0, lane] + tails[0]
                for s in range(1, S):
                    best = _max(best, ends[s, lane] + tails[s])
                out[first + lane] = best


@njit(cache=CACHING)
def _pipedream(ms, rs, first, n, tf, tb, cf, cb, tails, out):  # pragma: no cover - compiled
    """PipeDream of lanes ``first..first+n-1``: per resource, its times summed in order
    (a stage's terms are ``Tf_s(b) + Tb_s(b)``)."""
    S = tf.shape[1]
    top = ms[first + n - 1]
    step = _lanes(tf, first, n) + _lanes(tb, first, n)
    forward, backward = _lanes(cf, first, n), _lanes(cb, first, n)
    busy = np.zeros((S, LANES))
    sent = np.zeros((S, LANES))
    returned = np.zeros((S, LANES))
    for k in range(top):
        for lane in range(n):
            if k == rs[first + lane]:
                for s in range(S):
                    step[s, lane] = tf[1, s, first + lane] + tb[1, s, first + lane]
                _to_small(forward, cf, first, lane)
                _to_small(backward, cb, first, lane)
        for s in range(S):
            for lane in range(LANES):
                busy[s, lane] = busy[s, lane] + step[s, lane]
        for s in range(S - 1):
            for lane in range(LANES):
                sent[s, lane] = sent[s, lane] + forward[s, lane]
                returned[s, lane] = returned[s, lane] + backward[s, lane]
        for lane in range(n):
            if k + 1 == ms[first + lane]:
                best = busy[0, lane] + tails[0]
                for s in range(1, S):
                    best = _max(best, busy[s, lane] + tails[s])
                for s in range(S - 1):
                    best = _max(best, sent[s, lane])
                    best = _max(best, returned[s, lane])
                out[first + lane] = best


@njit(cache=CACHING)
def _switch(
    s, j, first, m, rs, order, small, done, ops, links, op_times, link_times, link
):  # pragma: no cover - compiled
    """Before stage ``s``'s operation ``j`` of one direction (1F1B of lanes ``first..``,
    counts ``m``): the lanes whose remainder ``rs`` (in ``order``, ascending) is at most
    ``j`` move to the small microbatch's times, ``op_times[1, s]`` and, where ``link >= 0``,
    ``link_times[1, link]``; the lanes whose count is at most ``j`` run nothing (0, and
    ``-inf`` for the link). ``small`` / ``done``: per stage, how many lanes moved so far."""
    n = len(m)
    while small[s] < n and rs[first + order[small[s]]] <= j:
        lane = order[small[s]]
        ops[s, lane] = op_times[1, s, first + lane]
        if link >= 0:
            links[s, lane] = link_times[1, link, first + lane]
        small[s] += 1
    while done[s] < n and m[done[s]] <= j:
        ops[s, done[s]] = 0.0
        links[s, done[s]] = -np.inf
        done[s] += 1


@njit(cache=CACHING)
def _one_f_one_b(ms, rs, first, n, width, tf, tb, cf, cb, tails, out):  # pragma: no cover
    """1F1B of lanes ``first..first+n-1`` (``width >= n`` lanes run), level by level (module
    docstring). At each level only the stages that may run an operation are visited (in the
    same descending order): a backward ``B_j`` at level ``L`` needs ``0 <= j < top``, so
    ``2S-1-L <= s < 2S-1-L+2 top``; a forward ``F_j`` needs ``d = L - s`` with ``0 <= d``
    and ``j < top`` (``j = d <= w <= top`` or ``j = d // 2``), so ``L-2 top < s <= L``.

    ``free[s]``: when stage ``s`` is free; ``activations[s]``: arrival at stage ``s`` of the
    last activations sent to it (row 0 stays 0, row ``S`` takes the last stage's unused
    sends); ``gradients[s + 1]``: the same for gradients sent to stage ``s`` (row ``S``
    stays ``-inf``: the last stage's ``B_j`` waits only for its own ``F_j``, its previous
    operation; row 0 takes stage 0's unused sends); ``link_b[s]``: ``Cb_{s-1}``, the
    transfer of stage ``s``'s backward. A lane past its last microbatch in a direction
    runs no-ops: time 0, transfers ``-inf`` (what it sends arrives at ``-inf``, and the
    receiver's ``max`` keeps its own time).
    """
    S = tf.shape[1]
    m = ms[first : first + n]
    top = m[n - 1]
    by_remainder = _ascending(rs[first : first + n])
    f, b = _lanes(tf, first, n, width), _lanes(tb, first, n, width)
    link_f, link_b = np.zeros((S, width)), np.zeros((S, width))
    copy_rows(link_f[: S - 1], _lanes(cf, first, n, width))
    copy_rows(link_b[1:], _lanes(cb, first, n, width))
    small_f = np.zeros(S, dtype=np.int64)  # lanes (in remainder order) on small forwards
    small_b = np.zeros(S, dtype=np.int64)
    done_f = np.zeros(S, dtype=np.int64)  # lanes (in count order) past their forwards
    done_b = np.zeros(S, dtype=np.int64)
    free = np.zeros((S, width))
    activations = np.zeros((S + 1, width))
    gradients = np.zeros((S + 1, width))
    gradients[S] = -np.inf
    for level in range(2 * S + 2 * top - 2):
        # Backward window [b_lo, b_hi], forward window [f_lo, f_hi], each clipped to the
        # stages; visited from the higher down, as one range where they overlap or touch.
        b_lo, b_hi = max(0, 2 * S - 1 - level), min(S - 1, 2 * S - 2 - level + 2 * top)
        f_lo, f_hi = max(0, level - 2 * top + 1), min(S - 1, level)
        if b_hi < b_lo:
            b_lo, b_hi, f_lo, f_hi = f_lo, f_hi, 0, -1
        elif f_lo <= f_hi:
            if b_lo > f_hi + 1:  # backward window above, disjoint: stays as is
                pass
            elif f_lo > b_hi + 1:  # forward window above, disjoint: swap
                b_lo, b_hi, f_lo, f_hi = f_lo, f_hi, b_lo, b_hi
            else:  # overlapping or adjacent: one range
                b_lo, b_hi = min(b_lo, f_lo), max(b_hi, f_hi)
                f_lo, f_hi = 0, -1
        for part in range(2):
            hi, lo = (b_hi, b_lo) if part == 0 else (f_hi, f_lo)
            for t in range(hi - lo + 1):
                s = hi - t  # from the highest stage down (a descending range does not vectorise)
                d = level - s
                e = level - (2 * S - 1 - s)
                if e >= 0 and e % 2 == 0:
                    j = e // 2
                    if j >= top:
                        continue
                    link = s - 1  # -1 on the first stage: no link
                    _switch(
                        s, j, first, m, rs, by_remainder, small_b, done_b, b, link_b, tb, cb, link
                    )
                    for lane in range(width):
                        end = _max(free[s, lane], gradients[s + 1, lane]) + b[s, lane]
                        free[s, lane] = end
                        gradients[s, lane] = _max(end, gradients[s, lane]) + link_b[s, lane]
                elif d >= 0:
                    w = min(S - 1 - s, m[0])
                    j = d if d <= w else (d // 2 if d % 2 == 0 and d // 2 > w else -1)
                    if j < 0 or j >= top:
                        continue
                    link = s if s < S - 1 else -1  # the last stage sends nothing
                    _switch(
                        s, j, first, m, rs, by_remainder, small_f, done_f, f, link_f, tf, cf, link
                    )
                    for lane in range(width):
                        end = _max(free[s, lane], activations[s, lane]) + f[s, lane]
                        free[s, lane] = end
                        activations[s + 1, lane] = (
                            _max(end, activations[s + 1, lane]) + link_f[s, lane]
                        )
    for lane in range(n):
        best = free[0, lane] + tails[0]
        for s in range(1, S):
            best = _max(best, free[s, lane] + tails[s])
        out[first + lane] = best


@njit(cache=CACHING, nogil=True)
def _row_blocks(row, ms, rs, starts, blocks, tf, tb, cf, cb, tails, out):  # pragma: no cover
    """Row ``row`` of :data:`tidgap.schedules.baselines.BASELINE_ROWS` (0 GPipe, 1 1F1B,
    2 PipeDream) of each block ``b`` of ``blocks``: counts ``starts[b]..starts[b+1]-1``, into
    ``out`` ``(M,)``. A 1F1B block of one count runs one lane, not :data:`LANES`. Releases
    the GIL, so threads can share the blocks."""
    for block in blocks:
        first = starts[block]
        n = starts[block + 1] - first
        if row == 0:
            _gpipe(ms, rs, first, n, tf, tb, cf, cb, tails, out)
        elif row == 1:
            width = 1 if n == 1 else LANES
            _one_f_one_b(ms, rs, first, n, width, tf, tb, cf, cb, tails, out)
        else:
            _pipedream(ms, rs, first, n, tf, tb, cf, cb, tails, out)


def baseline_times(
    ms: np.ndarray,
    forward: np.ndarray,
    backward: np.ndarray,
    forward_transfer: np.ndarray,
    backward_transfer: np.ndarray,
    tails: np.ndarray,
    num_units: int,
    wanted: np.ndarray | None = None,
) -> np.ndarray:
    """GPipe(m), 1F1B(m), PipeDream(m) for ascending counts ``ms`` (``(M,)``), as ``(3, M)``;
    where ``wanted`` (``(3, M)`` bool) is given, only its entries, the others ``inf``.

    ``forward[0, s, i]`` / ``forward[1, s, i]``: ``Tf_s`` of the large / small microbatch
    of ``ms[i]`` equal microbatches of ``num_units`` units (``(2, S, M)``); ``backward`` the
    same for ``Tb_s``; ``forward_transfer`` / ``backward_transfer``: ``Cf_s`` / ``Cb_s`` of
    the sender's sizes (``(2, S-1, M)``); ``tails`` ``(S,)``. Times in the problem's unit,
    equal to the references bit for bit.

    Each row runs its wanted counts in blocks of :data:`LANES` (GPipe and PipeDream lanes
    need not share anything); 1F1B runs one block of one lane per count below ``S-1``
    (their warm-ups differ).
    """
    ms = np.ascontiguousarray(ms, dtype=np.int64)
    stages = forward.shape[1]
    out = np.full((3, len(ms)), np.inf)
    if wanted is None:
        wanted = np.ones((3, len(ms)), dtype=bool)
    arrays = [
        np.ascontiguousarray(a, dtype=np.float64)
        for a in (forward, backward, forward_transfer, backward_transfer)
    ]
    ends = np.ascontiguousarray(tails, dtype=np.float64)
    rows, tasks = [], []
    for row in range(3):
        keep = np.flatnonzero(wanted[row])
        if not len(keep):
            continue
        sub = ms[keep]
        singles = int(np.searchsorted(sub, stages - 1)) if row == 1 else 0
        starts = np.unique(
            np.r_[np.arange(singles + 1), np.arange(singles, len(sub), LANES), len(sub)]
        )
        starts = starts.astype(np.int64)
        tables = (
            arrays if len(keep) == len(ms) else [np.ascontiguousarray(a[..., keep]) for a in arrays]
        )
        rows.append((row, keep, (sub, num_units % sub, starts), tables, np.empty(len(keep))))
        # Work ~ lanes run * largest count (a single 1F1B count runs one lane).
        lanes = (
            np.where(np.diff(starts) == 1, 1, LANES)
            if row == 1
            else np.full(len(starts) - 1, LANES)
        )
        for block, work in enumerate(lanes * sub[starts[1:] - 1]):
            tasks.append((-int(work), len(rows) - 1, block))
    tasks.sort()  # largest first (ties: by row, then block)
    threads = min(thread_count(), len(tasks))
    shares = [tasks[t::threads] for t in range(threads)]

    def run(share: list[tuple[int, int, int]]) -> None:
        for r, (row, _keep, (sub, remainders, starts), tables, times) in enumerate(rows):
            # Contiguous, so that the kernel is compiled for one layout.
            blocks = np.array([block for _work, k, block in share if k == r], dtype=np.int64)
            if len(blocks):
                _row_blocks(row, sub, remainders, starts, blocks, *tables, ends, times)

    if threads:
        in_threads(run, shares)
    for row, keep, _counts, _tables, times in rows:
        out[row, keep] = times
    return out


@njit(cache=CACHING, nogil=True)
def _chain_dp_kernel(compute, links, tails, most, num_units, last):  # pragma: no cover
    """``last[u]`` for ``u = 1..U``: the last microbatch (units) of the best state of ``u``,
    microbatches of ``1..most`` units (the first ``most`` columns of the tables).

    States are stored by column ``U - u`` so the candidates ``u - j``, ``j = 1, 2, ...``,
    are contiguous; per position ``p`` all candidates advance together (vectorised), each
    accumulating its rank ``(max_p(E_p + tail_p), sum_p E_p)`` in position order. ``links``
    has a row for the last position too (its value is never used).
    """
    P = compute.shape[0]
    U = num_units
    ends = np.zeros((P, U + 1))
    arrivals = np.full((P, U + 1), -np.inf)
    ready = np.zeros(most)
    finish = np.zeros(most)
    total = np.zeros(most)
    for u in range(1, U + 1):
        v = U - u
        count = min(u, most)
        ready[:count] = 0.0
        finish[:count] = -np.inf
        total[:count] = 0.0
        for p in range(P):
            before, sent = ends[p, v + 1 :], arrivals[p, v + 1 :]  # views: contiguous loads
            for i in range(count):
                end = _max(before[i], ready[i]) + compute[p, i]
                finish[i] = _max(finish[i], end + tails[p])
                total[i] = total[i] + end
                ready[i] = _max(end, sent[i]) + links[p, i]
        best = 0
        for i in range(1, count):  # ties on both keys go to the larger last microbatch
            if finish[i] < finish[best] or (finish[i] == finish[best] and total[i] <= total[best]):
                best = i
        start = 0.0
        for p in range(P):
            end = _max(ends[p, v + 1 + best], start) + compute[p, best]
            ends[p, v] = end
            start = _max(end, arrivals[p, v + 1 + best]) + links[p, best]
            arrivals[p, v] = start
        last[u] = best + 1


def chain_dps(
    compute: list[np.ndarray], links: list[np.ndarray], tails: list[np.ndarray], num_units: int
) -> list[list[int]]:
    """The greedy DP partition of ``num_units`` units (sizes in units, in order) of each
    chain, the chains in parallel.

    Chain ``c``: ``compute[c][p, j-1]`` / ``links[c][p, j-1]`` is position ``p``'s compute /
    transfer time of a microbatch of ``j`` units (``(P, J_c)`` / ``(P-1, J_c)``, ``J_c`` its
    cap in units); ``tails[c]`` ``(P,)``. Equal to :func:`tidgap.optimize.heuristics.chain_dp`'s
    partitions, bit for bit.
    """
    P = compute[0].shape[0]
    mosts = np.array([table.shape[1] for table in compute], dtype=np.int64)
    stacked = np.zeros((2, len(mosts), P, int(mosts.max())))
    for c, (times, transfers) in enumerate(zip(compute, links, strict=True)):
        stacked[0, c, :, : mosts[c]] = times
        stacked[1, c, : P - 1, : mosts[c]] = transfers
    ends = np.array(tails, dtype=np.float64).reshape(-1, P)
    lasts = np.zeros((len(mosts), num_units + 1), dtype=np.int64)

    def run(share: np.ndarray) -> None:
        for c in share:
            _chain_dp_kernel(stacked[0, c], stacked[1, c], ends[c], mosts[c], num_units, lasts[c])

    threads = min(thread_count(), len(mosts))
    in_threads(run, [np.arange(t, len(mosts), threads) for t in range(threads)])
    partitions = []
    for last in lasts:
        partition: list[int] = []
        u = num_units
        while u:
            partition.append(int(last[u]))
            u -= int(last[u])
        partitions.append(partition[::-1])
    return partitions


@njit(cache=CACHING)
def _least_total_kernel(times, num_units):  # pragma: no cover - compiled
    """``W(U)``, ``W(u) = min_{j <= min(u, J)} W(u - j) + times[j-1]``, ``W`` by ``U - u``."""
    most = len(times)
    U = num_units
    reverse = np.zeros(U + 1)
    for u in range(1, U + 1):
        before = reverse[U - u + 1 :]  # W(u - 1), W(u - 2), ...: contiguous loads
        best = before[0] + times[0]
        for i in range(1, min(u, most)):
            best = min(best, before[i] + times[i])
        reverse[U - u] = best
    return reverse[0]


def least_total(times: np.ndarray, num_units: int) -> float:
    """``W(U)``: the least ``sum t(part)`` over partitions of ``U`` units into parts of at most
    ``len(times)`` units, ``times[j-1]`` the time of a part of ``j`` units (``O(U J)``)."""
    return float(_least_total_kernel(np.ascontiguousarray(times, dtype=np.float64), num_units))


def warm_up() -> None:
    """Compile every kernel of this module (or load it from Numba's cache) on tiny inputs."""
    ms = np.arange(1, 4)
    times = np.ones((2, 3, 3))
    baseline_times(ms, times, times, times[:, :2], times[:, :2], np.zeros(3), 3)
    chain_dps([np.ones((3, 2))], [np.ones((2, 2))], [np.zeros(3)], 3)
    least_total(np.ones(2), 3)
