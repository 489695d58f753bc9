"""TiDGAP's matrix form in NumPy: a whole population, all microbatches of a stage at once.

``F_k = max(F_{k-1}, R_k) + t_k`` unrolls to ``F_k = T_k + max(F_0, max_{j<=k}(R_j - T_{j-1}))``
with ``T`` the prefix sum of ``t``: a cumulative sum plus a running maximum. The link
recurrence ``A_i = max(F_i, A_{i-1}) + c_i`` unrolls the same way. The upstream microbatch
that microbatch ``k`` waits on is found for every individual at once by one
``searchsorted`` over row-offset prefix sums. Only the loop over stages is Python.
"""

from __future__ import annotations

import numpy as np

#: Individuals computed together: a stage's arrays over a larger population leave the
#: caches (65,536 chromosomes of S = 8, B = 256, K = 32 on the 2-core development VM,
#: 2026-12-06: 4.1e4/s in one piece, 5.4e4/s in chunks of 1024, 5.4e4 of 512 and 5.3e4 of
#: 2048).
CHUNK = 1024


def batched_searchsorted(rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Per row ``p``: ``min{i : rows[p, i] >= queries[p, k]}``, for non-decreasing rows.

    ``rows`` ``(P, K)`` and ``queries`` ``(P, Q)`` hold values in ``0..V``; returns ``(P, Q)``.
    """
    count, width = rows.shape
    span = int(max(rows.max(initial=0), queries.max(initial=0))) + 1
    offsets = np.arange(count, dtype=np.int64)[:, None] * span
    flat = np.searchsorted((rows + offsets).ravel(), (queries + offsets).ravel(), side="left")
    return flat.reshape(queries.shape) - np.arange(count)[:, None] * width


def chain_ends(sizes: np.ndarray, compute: np.ndarray, transfer: np.ndarray) -> np.ndarray:
    """End of each stage's last operation, for every individual, starting at time 0.

    ``sizes``: ``(P, S, K)`` microbatch sizes in units in chain order (zeros pad the end
    of a row); ``compute``: ``(S, U+1)`` ticks per size; ``transfer``: ``(S-1, U+1)``
    ticks per size of the sender. Returns ``(P, S)`` int64 ticks, computed :data:`CHUNK`
    individuals at a time.
    """
    if len(sizes) <= CHUNK:
        return _chunk_ends(sizes, compute, transfer)
    parts = [
        _chunk_ends(sizes[i : i + CHUNK], compute, transfer) for i in range(0, len(sizes), CHUNK)
    ]
    return np.concatenate(parts)


def _chunk_ends(sizes: np.ndarray, compute: np.ndarray, transfer: np.ndarray) -> np.ndarray:
    """:func:`chain_ends` of one chunk of individuals."""
    population, stages, _ = sizes.shape
    used = int(np.count_nonzero(sizes, axis=2).max(initial=1))
    sizes = sizes[:, :, :used]  # columns past every row's last microbatch are no-ops
    ends = np.empty((population, stages), dtype=np.int64)
    upstream_sizes = upstream_prefix = upstream_ends = None
    for s in range(stages):
        own = sizes[:, s, :]
        times = compute[s][own]
        cumulative = np.cumsum(times, axis=1)
        prefix = np.cumsum(own, axis=1)
        if s == 0:
            finish = cumulative
        else:
            cost = transfer[s - 1][upstream_sizes]
            sent = np.cumsum(cost, axis=1)
            arrival = sent + np.maximum.accumulate(upstream_ends - (sent - cost), axis=1)
            waited = np.take_along_axis(
                arrival, batched_searchsorted(upstream_prefix, prefix), axis=1
            )
            slack = np.maximum.accumulate(waited - (cumulative - times), axis=1)
            finish = cumulative + np.maximum(slack, 0)
        ends[:, s] = finish[:, -1]
        upstream_sizes, upstream_prefix, upstream_ends = own, prefix, finish
    return ends
