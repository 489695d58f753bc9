"""The chain recurrence as compiled loops (Numba): same contract and results as the matrix form.

For every individual ``p`` and stage ``s`` of a chain that starts at time 0, with sizes
``b_k`` (units) of the stage's microbatches in order (a row stops at its first zero)::

    F_k = max(F_{k-1}, R_k) + compute[s][b_k]                         F_0 = 0
    R_k = A_up[i],  i = first upstream microbatch whose prefix sum reaches this one's
    A_up[i] = max(F_up[i], A_up[i-1]) + transfer[s-1][b_up_i]         A_up[0] = -inf

(``R_k = 0`` on stage 0), and ``ends[p, s]`` is ``F`` of the stage's last microbatch. The
upstream microbatch is found by a two-pointer walk: both prefix sums only grow, so the
upstream pointer advances monotonically and each link's arrivals ``A_up`` are computed on
the fly, once each, as the walk passes them.

Parallel mapping: ``prange`` over chunks of individuals (a few chunks per thread for
balance); each chunk owns a ``(2, K)`` scratch of int64 end times (the previous and the
current stage's ``F``, swapped by stage parity) allocated once per chunk; within an
individual the stages and microbatches run sequentially. Everything is int64 arithmetic
(``max`` and ``+`` only), so the results equal :mod:`tidgap.fallback_cpu.matrix_form`'s
exactly. A size outside ``0..U`` (the tables' range) raises ``ValueError`` instead of
reading out of bounds. Numba is imported only when this module is.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

#: Below every reachable end time: ``max(F, _NEG_INF) == F`` (``A_up[0] = -inf``).
_NEG_INF = np.int64(np.iinfo(np.int64).min)

#: At most this many individuals share one scratch allocation (one ``prange`` iteration).
_MAX_CHUNK = 64


@njit(parallel=True, cache=True, boundscheck=False, nogil=True)
def _chain_ends_kernel(sizes, compute, transfer, chunk):  # pragma: no cover - compiled
    population, stages, width = sizes.shape
    largest = compute.shape[1] - 1
    ends = np.empty((population, stages), dtype=np.int64)
    num_chunks = (population + chunk - 1) // chunk
    bad = np.zeros(num_chunks, dtype=np.int64)  # per chunk: 1 + index of a bad individual
    for c in prange(num_chunks):
        first = c * chunk
        last = min(first + chunk, population)
        finish = np.empty((2, width), dtype=np.int64)  # F of the previous / current stage
        for p in range(first, last):
            row = sizes[p]
            # Stage 0: nothing to wait for.
            f = np.int64(0)
            count = 0
            for k in range(width):
                b = row[0, k]
                if b <= 0 or b > largest:
                    if b != 0:
                        bad[c] = p + 1
                    break
                f += compute[0, b]
                finish[0, k] = f
                count = k + 1
            ends[p, 0] = f
            upstream_count = count
            for s in range(1, stages):
                cur = s & 1
                prev = cur ^ 1
                f = np.int64(0)
                arrival = _NEG_INF  # A_up of the last upstream microbatch walked past
                own_prefix = np.int64(0)
                up_prefix = np.int64(0)
                i = 0  # next upstream microbatch
                count = 0
                for k in range(width):
                    b = row[s, k]
                    if b <= 0 or b > largest:
                        if b != 0:
                            bad[c] = p + 1
                        break
                    own_prefix += b
                    while up_prefix < own_prefix and i < upstream_count:
                        bu = row[s - 1, i]
                        up_prefix += bu
                        fu = finish[prev, i]
                        if fu > arrival:
                            arrival = fu
                        arrival += transfer[s - 1, bu]
                        i += 1
                    if arrival > f:
                        f = arrival
                    f += compute[s, b]
                    finish[cur, k] = f
                    count = k + 1
                ends[p, s] = f
                upstream_count = count
    return ends, bad.max()


def chain_ends(sizes: np.ndarray, compute: np.ndarray, transfer: np.ndarray) -> np.ndarray:
    """End of each stage's last operation, for every individual, starting at time 0.

    ``sizes``: ``(P, S, K)`` microbatch sizes in units in chain order (zeros pad the end
    of a row); ``compute``: ``(S, U+1)`` ticks per size; ``transfer``: ``(S-1, U+1)``
    ticks per size of the sender. Returns ``(P, S)`` int64 ticks, equal to
    :func:`tidgap.fallback_cpu.matrix_form.chain_ends`.
    """
    sizes = np.ascontiguousarray(sizes, dtype=np.int32)
    compute = np.ascontiguousarray(compute, dtype=np.int64)
    transfer = np.ascontiguousarray(transfer, dtype=np.int64)
    if sizes.ndim != 3 or compute.ndim != 2 or transfer.ndim != 2:
        raise ValueError("expected sizes (P, S, K), compute (S, U+1), transfer (S-1, U+1)")
    population, stages, _ = sizes.shape
    if compute.shape[0] != stages or transfer.shape[0] != max(stages - 1, 0):
        raise ValueError(
            f"{stages} stage(s) need {stages} compute row(s) and {max(stages - 1, 0)} "
            f"transfer row(s), got {compute.shape[0]} and {transfer.shape[0]}"
        )
    if transfer.shape[1] != compute.shape[1] and transfer.shape[0]:
        raise ValueError(f"compute has {compute.shape[1]} sizes, transfer {transfer.shape[1]}")
    if population == 0:
        return np.empty((0, stages), dtype=np.int64)
    threads = numba.get_num_threads()
    chunk = max(1, min(_MAX_CHUNK, -(-population // (4 * threads))))
    ends, bad = _chain_ends_kernel(sizes, compute, transfer, chunk)
    if bad:
        raise ValueError(
            f"individual {bad - 1} has a microbatch size outside 0..{compute.shape[1] - 1}"
        )
    return ends
