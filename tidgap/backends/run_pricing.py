"""Each op's compute ticks when plans are priced as ``tidgap run`` runs them
(:data:`~tidgap.backends.ticks.RUN_PRICING`), for a whole population at once, in NumPy or
CuPy: what the NumPy ordered evaluator uses in place of the tables. The Numba kernel
(:mod:`tidgap.fallback_cpu.windowed_numba`) and the CUDA kernels (``windowed_sim.cuh``)
compute the same rule inside their loops (Numba six times faster than these array passes
at ``P = 512``); the contract tests hold them equal.

Per individual and stage, with ``P`` / ``Q`` the forward / backward prefix sums in units:

- *stored graphs* when every ``Q[k]`` is some ``P[i]``: forward ``k`` costs ``Tf_s(f_k)``,
  backward ``k`` the sum of ``Tb_s`` over the forward chunks it covers (those between
  ``Q[k-1]`` and ``Q[k]``): ``G(Q[k]) - G(Q[k-1])`` with ``G(P[i]) = sum_{j<=i} Tb_s(f_j)``;
- *recomputing* otherwise: forward ``k`` costs ``Rf_s(f_k)``, backward ``k`` ``Rb_s(c_k)``
  (``recompute_forward`` / ``recompute_backward`` of the ticked problem).

A mirrored stage (``c = f``) costs what model.md says. Transfers are the model's.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from tidgap.backends.ticks import TickedProblem

#: At most this many ``(individual, stage, unit)`` entries in one chunk's boundary table.
CHUNK_ENTRIES = 1 << 22


def op_ticks(forward: Any, backward: Any, ticked: TickedProblem, xp: ModuleType) -> tuple:
    """``(P, S, K)`` forward and backward sizes (units) -> ``(P, S, K)`` int64 compute ticks
    of each forward and each backward (0 after a row's last microbatch), in ``xp``.

    Sizes outside ``0..U`` are clipped (the evaluators refuse such rows)."""
    if not ticked.run_priced:
        raise ValueError("op_ticks needs a problem ticked with run pricing")
    count, stages, _ = forward.shape
    per_individual = max(1, stages * (ticked.num_units + 1))
    chunk = max(1, CHUNK_ENTRIES // per_individual)
    parts = [
        _chunk_ticks(forward[start : start + chunk], backward[start : start + chunk], ticked, xp)
        for start in range(0, count, chunk)
    ]
    if len(parts) == 1:
        return parts[0]
    return tuple(xp.concatenate([part[i] for part in parts]) for i in range(2))


def _chunk_ticks(forward: Any, backward: Any, ticked: TickedProblem, xp: ModuleType) -> tuple:
    """:func:`op_ticks` of one chunk of individuals."""
    U = ticked.num_units
    count, stages, _ = forward.shape
    f = xp.clip(xp.asarray(forward, dtype=xp.int64), 0, U)
    b = xp.clip(xp.asarray(backward, dtype=xp.int64), 0, U)
    fc, bc, rf, rb = (
        xp.asarray(table, dtype=xp.int64)
        for table in (
            ticked.forward_compute,
            ticked.backward_compute,
            ticked.recompute_forward,
            ticked.recompute_backward,
        )
    )
    individual = xp.arange(count)[:, None, None]
    stage = xp.arange(stages)[None, :, None]
    # G at each forward boundary, -1 at a unit that is none (0 at unit 0).
    graphs = xp.full((count, stages, U + 1), -1, dtype=xp.int64)
    graphs[..., 0] = 0
    graphs[individual, stage, xp.clip(xp.cumsum(f, axis=2), 0, U)] = xp.cumsum(bc[stage, f], axis=2)
    covered = graphs[individual, stage, xp.clip(xp.cumsum(b, axis=2), 0, U)]
    stored = (covered >= 0).all(axis=2, keepdims=True)
    before = xp.concatenate((xp.zeros_like(covered[..., :1]), covered[..., :-1]), axis=2)
    forward_ticks = xp.where(stored, fc[stage, f], rf[stage, f])
    backward_ticks = xp.where(stored, covered - before, rb[stage, b])
    return forward_ticks, backward_ticks
