"""What each stage holds as ``tidgap run`` runs it, as compiled loops (Numba): the same
``(P, S)`` counts as the array passes of :meth:`tidgap.optimize.run_memory.RunMemory.held`,
the individuals shared out among threads (:mod:`tidgap.fallback_cpu.threads`).

Per stage, with ``P`` / ``Q`` its forward / backward prefix sums in units, ``U`` the
upstream stage's forward sums and ``D`` the downstream stage's backward sums (the stage's
own on the first / last stage, where the bytes that read them are 0): backward ``k`` covers
``lo = Q[k]`` to ``hi = Q[k+1]`` after ``a_k = min(own_k + lead_k, M)`` forwards ending at
``E = P[a_k]``. The stage then keeps inputs from the ``U`` chunk holding ``lo`` to the one
holding ``E``, draws from its ``P`` chunk holding ``lo`` to ``E`` and gradients from the
``D`` chunk holding ``lo`` to the one holding ``hi``; the backward adds ``hi - lo`` samples'
working set, less its input and its draws' views (``DRAW_VIEWS``) where one chunk holds
them, and the batch's task tensors. After its last forward before backward ``k`` (where it
ran one since backward ``k - 1``) it keeps the same inputs and draws, and the gradients
received up to backward ``k - 1``. Each chunk index is a walk that only moves forward as
``k`` grows. A stage that recomputes (a backward boundary not a forward one) counts its
bytes in ``FINE`` units of its activations, rounded up (more than the batch's where it holds
more); one that stores graphs its alive graphs after each forward, the task's tensors and
the received chunks it keeps past its last forward and backward, the same way.
Numba is imported only when this module is.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tidgap.fallback_cpu.numba_cache import CACHING
from tidgap.fallback_cpu.repair_numba import _prefix
from tidgap.fallback_cpu.threads import over_rows
from tidgap.optimize.run_memory import (
    BACKWARD,
    BACKWARD_CHUNK,
    DRAW_VIEWS,
    DRAWS,
    FINE,
    GRAPH_CHUNK,
    GRAPH_SAMPLE,
    INPUT,
    OUTPUT,
    TASK,
    RunMemory,
)


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _start(prefix, index, sample):  # pragma: no cover - compiled
    """The chunk of ``prefix`` holding ``sample``, from ``index`` on: ``prefix[i] <= sample <
    prefix[i + 1]``; returns ``i``."""
    while prefix[index + 1] <= sample:
        index += 1
    return index


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _holder(prefix, index, sample):  # pragma: no cover - compiled
    """``min{i : prefix[i] >= sample}``, walking from ``index`` either way."""
    while prefix[index] < sample:
        index += 1
    while index > 0 and prefix[index - 1] >= sample:
        index -= 1
    return index


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _stage(fp, m, bp, n, up, down, lead, figures, s, unit):  # pragma: no cover - compiled
    """The most bytes stage ``s`` holds at an op's end (prefix sums ``fp`` of ``m`` and
    ``bp`` of ``n`` microbatches, ``up`` / ``down`` its neighbours' sums, ``lead`` its
    ``(K,)`` canonical leads)."""
    received_input = figures[INPUT, s]
    sent = figures[OUTPUT, s]
    drawn = figures[DRAWS, s]
    own = 0
    draw_chunk = 0
    input_chunk = 0
    input_end = 0
    gradient_chunk = 0
    gradient_end = 0
    earlier = 0
    previous = -1
    peak = 0.0
    for k in range(n):
        lo = bp[k]
        hi = bp[k + 1]
        while fp[own] < hi:
            own += 1
        before = min(own + lead[k], m)
        end = fp[before]
        draw_chunk = _start(fp, draw_chunk, lo)
        input_chunk = _start(up, input_chunk, lo)
        gradient_chunk = _start(down, gradient_chunk, lo)
        input_end = _holder(up, input_end, end)
        gradient_end = _holder(down, gradient_end, hi)
        kept = received_input * (up[input_end] - up[input_chunk]) + drawn * (end - fp[draw_chunk])
        work = figures[BACKWARD, s]
        if up[input_chunk + 1] >= hi:
            work -= received_input
        if fp[draw_chunk + 1] >= hi:
            work -= figures[DRAW_VIEWS, s]
        gradients = down[gradient_end] - down[gradient_chunk]
        at_backward = (kept + sent * gradients + (hi - lo) * work) * unit + figures[TASK, s]
        at_backward += figures[BACKWARD_CHUNK, s]
        peak = max(peak, at_backward)
        if before > previous:
            waiting = max(earlier - down[gradient_chunk], 0)
            peak = max(peak, (kept + sent * waiting) * unit)
        earlier = down[gradient_end]
        previous = before
    return peak


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _stored(fp, m, bp, n, up, down, lead, figures, activation, s, unit):  # pragma: no cover
    """What stage ``s``, storing its graphs, holds in ``FINE`` units of ``activation``,
    rounded up: after each forward ``k`` (ending at ``E``, the backwards up to ``hi``
    done), its alive graphs (``E - hi`` samples, ``k + 1`` less the backwarded chunks),
    the task's tensors, the received input chunk reaching past ``E`` and the gradient chunk
    reaching past ``hi``."""
    j = 0
    own = 0
    before = m
    if n > 0:
        while fp[own] < bp[1]:
            own += 1
        before = min(own + lead[0], m)
    input_end = 0
    input_chunk = 0
    gradient_end = 0
    gradient_chunk = 0
    done = 0
    best = 0
    for k in range(m):
        while j < n and before <= k:
            j += 1
            if j < n:
                while fp[own] < bp[j + 1]:
                    own += 1
                before = min(own + lead[j], m)
        end = fp[k + 1]
        last = bp[j]
        input_end = _holder(up, input_end, end)
        kept_input = 0
        if up[input_end] > end:
            input_chunk = _start(up, input_chunk, end)
            kept_input = up[input_end] - up[input_chunk]
        gradient_end = _holder(down, gradient_end, last)
        kept_gradients = 0
        if down[gradient_end] > last:
            gradient_chunk = _start(down, gradient_chunk, last)
            kept_gradients = down[gradient_end] - down[gradient_chunk]
        done = _holder(fp, done, last)
        graphs = figures[GRAPH_SAMPLE, s] * (end - last)
        kept = figures[INPUT, s] * kept_input + figures[OUTPUT, s] * kept_gradients
        held = (graphs + kept) * unit + figures[GRAPH_CHUNK, s] * (k + 1 - done)
        held += figures[TASK, s]
        best = max(best, np.int64(np.ceil(held * FINE / activation)))
    return best


@njit(cache=CACHING, boundscheck=False, nogil=True)
def _recomputes(fp, bp, n):  # pragma: no cover - compiled
    """Whether some backward boundary ``bp[1..n]`` is not a forward boundary."""
    i = 0
    for k in range(1, n + 1):
        while fp[i] < bp[k]:
            i += 1
        if fp[i] != bp[k]:
            return True
    return False


@njit(cache=CACHING, boundscheck=False, nogil=True)  # pragma: no cover - compiled
def _held(forward, backward, lead, peaks, figures, activation, unit, held, first, end):
    """Individuals ``first..end-1``: ``held`` what the limits count, in ``FINE`` units."""
    _, stages, width = forward.shape
    fp = np.empty((stages, width + 1), dtype=np.int64)
    bp = np.empty((stages, width + 1), dtype=np.int64)
    m = np.empty(stages, dtype=np.int64)
    n = np.empty(stages, dtype=np.int64)
    for p in range(first, end):
        for s in range(stages):
            m[s] = _prefix(forward[p, s], fp[s])
            n[s] = _prefix(backward[p, s], bp[s])
            fp[s, m[s] + 1 :] = fp[s, m[s]]
            bp[s, n[s] + 1 :] = bp[s, n[s]]
        for s in range(stages):
            held[p, s] = peaks[p, s] * FINE
            if activation[s] <= 0:
                continue
            up = fp[s - 1] if s > 0 else fp[s]
            down = bp[s + 1] if s < stages - 1 else bp[s]
            row = lead[p, s]
            if _recomputes(fp[s], bp[s], n[s]):
                memory = _stage(fp[s], m[s], bp[s], n[s], up, down, row, figures, s, unit)
                held[p, s] = np.ceil(memory * FINE / activation[s])
            else:
                held[p, s] = _stored(
                    fp[s], m[s], bp[s], n[s], up, down, row, figures, activation[s], s, unit
                )


def held(
    peaks: np.ndarray,
    forward: np.ndarray,
    backward: np.ndarray,
    lead: np.ndarray,
    memory: RunMemory,
) -> np.ndarray:
    """:meth:`~tidgap.optimize.run_memory.RunMemory.held`: ``(P, S)`` int64 units for
    ``(P, S, K)`` sizes (units), canonical leads and the model's ``(P, S)`` ``peaks``."""
    population, stages, _ = forward.shape
    units = np.empty((population, stages), dtype=np.int64)
    arrays = (
        np.ascontiguousarray(forward),
        np.ascontiguousarray(backward),
        np.ascontiguousarray(lead, dtype=np.int64),
        np.ascontiguousarray(peaks, dtype=np.int64),
        np.ascontiguousarray(memory.figures, dtype=np.float64),
        np.ascontiguousarray(memory.activation, dtype=np.float64),
        int(memory.unit),
        units,
    )

    over_rows(_held, population, *arrays)
    return units
