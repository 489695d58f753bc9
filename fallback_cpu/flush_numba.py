"""The chain recurrence as compiled loops (Numba): same contract and results as the matrix form.

For every individual ``p`` and stage ``s`` of a chain that starts at time 0, with sizes
``b_k`` (units) of the stage's microbatches in order (a row stops at its first zero)::

    F_k = max(F_{k-1}, R_k) + compute[s][b_k]                         F_0 = 0
    R_k = A_up[i],  i = first upstream microbatch whose prefix sum reaches this one's
    A_up[i] = max(F_up[i], A_up[i-1]) + transfer[s-1][b_up_i]         A_up[0] = -inf

(``R_k = 0`` on stage 0), and ``ends[p, s]`` is ``F`` of the stage's last microbatch.

Per stage, the upstream stage's end times are turned into arrivals ``A_up`` in place, then a
two-pointer walk over the upstream and own prefix sums (both only grow) pairs every own
microbatch with the upstream microbatch it waits for, in ``n_up + n_own - 1`` steps. The
walk is branch-free: each step either advances the upstream pointer or finishes one own
microbatch, chosen by selects marked unpredictable (LLVM would otherwise turn them into
branches that mispredict on random partitions, several times slower).

Parallel mapping: the individuals shared out among threads
(:mod:`tidgap.fallback_cpu.threads`); each share allocates its scratch once, ``(2, K+1)``
int64 end times and prefix sums (the previous and the current stage, swapped by stage
parity); within an individual the stages and microbatches run sequentially. All
arithmetic is int64 ``max`` and ``+``, so the results equal
:mod:`tidgap.fallback_cpu.flush_numpy`'s exactly (ticks are non-negative, so no difference
overflows). An individual that is not a valid chain (a size outside ``0..U``, stages whose
sizes sum differently, an empty row among non-empty ones) raises ``ValueError`` rather than
reading out of bounds. Numba is imported only when this module is (``import tidgap`` does
not import it).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from tidgap.fallback_cpu.numba_cache import CACHING
from tidgap.fallback_cpu.threads import over_rows


def _unpredictable(builder, instruction):
    """Mark a select ``!unpredictable`` so the backend keeps it a conditional move."""
    instruction.set_metadata("unpredictable", builder.module.add_metadata([]))
    return instruction


@intrinsic
def _max(typingctx, x, y):  # pragma: no cover - compiled
    """``max(x, y)`` for non-negative ``x, y`` (``x - y`` cannot overflow), as a cmov."""
    if not (isinstance(x, types.Integer) and x == y):
        return None

    def codegen(context, builder, signature, args):
        a, b = args
        difference = builder.sub(a, b)  # not `a > b`: LLVM would rewrite that to smax
        positive = builder.icmp_signed(">", difference, difference.type(0))
        return _unpredictable(builder, builder.select(positive, a, b))

    return x(x, y), codegen


@intrinsic
def _pick(typingctx, condition, x, y):  # pragma: no cover - compiled
    """``x if condition else y``, as a cmov."""
    if not (isinstance(condition, types.Boolean) and isinstance(x, types.Integer) and x == y):
        return None

    def codegen(context, builder, signature, args):
        return _unpredictable(builder, builder.select(*args))

    return x(condition, x, y), codegen


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _chain_ends_rows(sizes, compute, transfer, ends, first, end):  # pragma: no cover - compiled
    """``ends[first:end]`` ``(P, S)`` written; ``1 +`` the index of the last invalid
    individual among them (0 when none)."""
    _, stages, width = sizes.shape
    largest = compute.shape[1] - 1
    one = np.uint64(1)
    bad = 0
    finish = np.zeros((2, width + 1), dtype=np.int64)  # F (then A_up in place) per stage
    prefix = np.zeros((2, width + 1), dtype=np.int64)  # prefix sums per stage
    for p in range(first, end):
        row = sizes[p]
        invalid = False
        # Stage 0: nothing to wait for.
        own, done, sums, table = row[0], finish[0], prefix[0], compute[0]
        f = np.int64(0)
        total = np.int64(0)
        n = 0
        for k in range(width):
            b = own[k]
            if b == 0:
                break
            if b > largest:
                invalid = True
                break
            f += table[b]
            done[k] = f
            total += b
            sums[k] = total
            n = k + 1
        ends[p, 0] = f
        for s in range(1, stages):
            cur = s & 1
            prev = cur ^ 1
            upstream, arrivals, up_sums = row[s - 1], finish[prev], prefix[prev]
            own, done, sums = row[s], finish[cur], prefix[cur]
            table, link = compute[s], transfer[s - 1]
            # Own prefix sums (and the row's length).
            q = np.int64(0)
            m = 0
            for k in range(width):
                b = own[k]
                if b == 0:
                    break
                if b > largest:
                    invalid = True
                    break
                q += b
                sums[k] = q
                m = k + 1
            # Both rows must cover the same samples (or both be empty); otherwise the
            # walk is skipped (no out-of-bounds reads) and the individual reported.
            consistent = (m > 0) & (n > 0) & (q == up_sums[max(n, 1) - 1])
            invalid |= not (consistent | ((m == 0) & (n == 0)))
            steps = n + m - 1 if consistent else 0
            # Upstream end times -> arrivals, in place.
            a = arrivals[0]
            for i in range(n):
                a = _max(arrivals[i], a) + link[upstream[i]]
                arrivals[i] = a
            # Two-pointer walk: advance upstream (take) or finish own microbatch k.
            i = np.uint64(0)
            k = np.uint64(0)
            qi = up_sums[0]
            qk = sums[0]
            f = np.int64(0)
            for _ in range(steps):
                take = qi < qk
                candidate = _max(f, arrivals[i]) + table[own[k]]
                next_qi = up_sums[i + one]
                next_qk = sums[k + one]
                f = _pick(take, f, candidate)
                done[k] = f
                qi = _pick(take, next_qi, qi)
                qk = _pick(take, qk, next_qk)
                step = np.uint64(take)
                i += step
                k += one - step
            ends[p, s] = f
            n = m
        if invalid:
            bad = p + 1
    return bad


def chain_ends(sizes: np.ndarray, compute: np.ndarray, transfer: np.ndarray) -> np.ndarray:
    """End of each stage's last operation, for every individual, starting at time 0.

    ``sizes``: ``(P, S, K)`` microbatch sizes in units in chain order (zeros pad the end
    of a row); ``compute``: ``(S, U+1)`` ticks per size; ``transfer``: ``(S-1, U+1)``
    ticks per size of the sender. Returns ``(P, S)`` int64 ticks, equal to
    :func:`tidgap.fallback_cpu.flush_numpy.chain_ends`.
    """
    sizes = np.ascontiguousarray(sizes, dtype=np.int32)
    compute = np.ascontiguousarray(compute, dtype=np.int64)
    transfer = np.ascontiguousarray(transfer, dtype=np.int64)
    if sizes.ndim != 3 or compute.ndim != 2 or transfer.ndim != 2:
        raise ValueError("expected sizes (P, S, K), compute (S, U+1), transfer (S-1, U+1)")
    population, stages, _ = sizes.shape
    links = max(stages - 1, 0)
    if compute.shape[0] != stages or transfer.shape[0] != links:
        raise ValueError(
            f"{stages} stage(s) need {stages} compute row(s) and {links} transfer row(s), "
            f"got {compute.shape[0]} and {transfer.shape[0]}"
        )
    if links and transfer.shape[1] != compute.shape[1]:
        raise ValueError(f"compute has {compute.shape[1]} sizes, transfer {transfer.shape[1]}")
    if population == 0 or stages == 0:
        return np.zeros((population, stages), dtype=np.int64)
    ends = np.zeros((population, stages), dtype=np.int64)
    unsigned = sizes.view(np.uint32)  # a negative size reads as too large: reported
    bad = max(
        over_rows(_chain_ends_rows, population, unsigned, compute, transfer, ends, cheap=True)
    )
    if bad:
        raise ValueError(
            f"individual {bad - 1} is not a chain of partitions: sizes must lie in "
            f"0..{compute.shape[1] - 1}, zeros only after a row's microbatches, and every "
            "stage's sizes must have the same sum"
        )
    return ends
