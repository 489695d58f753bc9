"""The joint GA's repair as compiled loops (Numba): the same leads and op codes as
:func:`tidgap.optimize.order_genes.canonical`, one individual per iteration, the individuals
shared out among threads (:mod:`tidgap.fallback_cpu.threads`).

Per individual and stage ``s`` (from ``S-1`` down to 0; 1-based ``k``; ``P``/``Q`` the
forward/backward prefix sums in units): ``own[k] = min{i : P[s][i] >= Q[s][k]}``,
``a[k] = min(max(own[k] + lead[k-1], 0), M_s)`` made non-decreasing, then raised to the
least value that meets rules 1 and 2 (model.md, Ordered plans):
``a[k] >= min{i : P[s][i] >= max(Q[s][k], P[s+1][a[s+1][j]])}``, ``j = min{j : Q[s+1][j] >=
Q[s][k]}``, and ``a[k] >= a[k-1]``. The canonical lead is ``a[k] - own[k]`` (0 after
``N_s``); the ``k``-th ``B`` sits at ``a[k] + k - 1`` in the order. Each holder index is a
walk that only moves forward, as ``k`` grows. Numba is imported only when this module is.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tidgap.fallback_cpu.numba_cache import CACHING
from tidgap.fallback_cpu.threads import over_rows
from tidgap.optimize.genome import BACKWARD_OP, FORWARD_OP, GENE, NO_OP, ORDER_GENE


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _prefix(row, out):  # pragma: no cover - compiled
    """``out[0..m]`` prefix sums of one row of sizes; returns ``m``."""
    out[0] = 0
    m = 0
    for k in range(row.shape[0]):
        if row[k] == 0:
            break
        out[k + 1] = out[k] + row[k]
        m = k + 1
    return m


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _individual(forward, backward, lead, out_lead, codes, fp, bp, before):  # pragma: no cover
    """Repair one individual: ``(S, K)`` genes in, canonical ``out_lead`` and ``codes`` out;
    ``fp``/``bp`` ``(S, K+1)`` and ``before`` ``(S, K)`` scratch."""
    stages, width = forward.shape
    for s in range(stages - 1, -1, -1):  # stage s reads stage s+1's sums, made just before
        m = _prefix(forward[s], fp[s])
        n = _prefix(backward[s], bp[s])
        own = 0
        least = 0
        upstream = 0
        previous = 0
        for k in range(1, n + 1):
            q = bp[s, k]
            while fp[s, own] < q:
                own += 1
            value = own + lead[s, k - 1]
            value = min(max(value, 0), m)
            target = q
            if s < stages - 1:
                while bp[s + 1, upstream] < q:
                    upstream += 1
                needed = fp[s + 1, before[s + 1, upstream - 1]]
                target = max(target, needed)
            while fp[s, least] < target:
                least += 1
            value = max(value, least, previous)
            before[s, k - 1] = value
            out_lead[s, k - 1] = value - own
            previous = value
        for k in range(n, width):
            before[s, k] = m
            out_lead[s, k] = 0
        for t in range(2 * width):
            codes[s, t] = FORWARD_OP if t < m + n else NO_OP
        for k in range(n):
            codes[s, before[s, k] + k] = BACKWARD_OP


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _canonical(forward, backward, lead, out_lead, codes, first, end):  # pragma: no cover
    """Individuals ``first..end-1``."""
    _, stages, width = forward.shape
    fp = np.empty((stages, width + 1), dtype=np.int64)
    bp = np.empty((stages, width + 1), dtype=np.int64)
    before = np.empty((stages, width), dtype=np.int64)
    for p in range(first, end):
        _individual(forward[p], backward[p], lead[p], out_lead[p], codes[p], fp, bp, before)


def canonical(
    forward: np.ndarray, backward: np.ndarray, lead: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(lead, codes)`` of :func:`tidgap.optimize.order_genes.canonical`: ``(P, S, K)`` int32
    canonical leads and ``(P, S, 2K)`` int8 op codes of the repaired orders."""
    population, stages, width = forward.shape
    out_lead = np.empty((population, stages, width), dtype=GENE)
    codes = np.empty((population, stages, 2 * width), dtype=ORDER_GENE)
    rows = (
        np.ascontiguousarray(forward),
        np.ascontiguousarray(backward),
        np.ascontiguousarray(lead, dtype=GENE),
    )

    over_rows(_canonical, population, *rows, out_lead, codes)
    return out_lead, codes
