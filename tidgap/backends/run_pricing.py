"""Each op's compute ticks when plans are priced as ``tidgap run`` runs them
(:data:`~tidgap.backends.ticks.RUN_PRICING`), for a whole population at once in NumPy:
what the NumPy ordered evaluator uses in place of the tables. The Numba kernel
(:mod:`tidgap.fallback_cpu.windowed_numba`) and the CUDA kernels (``windowed_sim.cuh``)
compute the same rule inside their loops (Numba six times faster than these array passes
at ``P = 512``); the contract tests hold them equal.

Per individual and stage, with ``P`` / ``Q`` the forward / backward prefix sums in units:

- *stored graphs* when every ``Q[k]`` is some ``P[i]``: forward ``k`` costs ``Tf_s(f_k)``,
  backward ``k`` the sum of ``Tb_s`` over the forward chunks it covers (those between
  ``Q[k-1]`` and ``Q[k]``): ``G(Q[k]) - G(Q[k-1])`` with ``G(P[i]) = sum_{j<=i} Tb_s(f_j)``;
- *recomputing* otherwise: forward ``k`` costs ``Rf_s(f_k)``, backward ``k`` ``Rb_s(c_k)``
  (``recompute_forward`` / ``recompute_backward`` of the ticked problem).

On a stored-graph stage the op before also counts (:func:`order_dependent_ticks`, from
the order gene): a forward right after a backward of its size costs ``Tfb_s(f_k)``, and on
the last stage a backward right after the forward of the same samples ``Tbf_s(c_k)``
(``forward_after_backward`` / ``backward_after_forward`` of the ticked problem: the
calibration's order tables, else ``Tf_s`` / ``Tb_s`` again).

A mirrored stage (``c = f``) of a problem without order tables costs what model.md says.
Transfers are the model's.
"""

from __future__ import annotations

import numpy as np

from tidgap.backends.ticks import TickedProblem

#: At most this many ``(individual, stage, unit)`` entries in one chunk's boundary table.
CHUNK_ENTRIES = 1 << 22


def op_ticks(
    forward: np.ndarray, backward: np.ndarray, ticked: TickedProblem
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(P, S, K)`` forward and backward sizes (units) -> ``(P, S, K)`` int64 compute ticks
    of each forward and each backward (0 after a row's last microbatch) whatever the op
    before them, and ``(P, S)`` whether the stage stores its graphs (else it recomputes).

    Sizes outside ``0..U`` are clipped (the evaluators refuse such rows)."""
    if not ticked.run_priced:
        raise ValueError("op_ticks needs a problem ticked with run pricing")
    count, stages, _ = forward.shape
    chunk = max(1, CHUNK_ENTRIES // max(1, stages * (ticked.num_units + 1)))
    parts = [
        _chunk_ticks(forward[start : start + chunk], backward[start : start + chunk], ticked)
        for start in range(0, count, chunk)
    ]
    return tuple(np.concatenate(part) for part in zip(*parts, strict=True))  # type: ignore[return-value]


def order_dependent_ticks(
    op_compute: np.ndarray,
    is_forward: np.ndarray,
    size: np.ndarray,
    held: np.ndarray,
    stored: np.ndarray,
    ticked: TickedProblem,
) -> np.ndarray:
    """``op_compute`` with the ops timed by the op before them repriced.

    Per pair ``q = p S + s`` and op ``n`` of its order, ``(N, L)`` each: ``op_compute``, the
    ticks of :func:`op_ticks`; ``is_forward``; ``size`` in units; ``held``, the units held
    after the op; ``stored`` ``(N,)``, whether the pair stores its graphs. Forward ``n`` after
    a backward of its size costs ``forward_after_backward``; on the last stage a backward
    after a
    forward of the same samples (nothing held before that forward nor after the backward)
    ``backward_after_forward``. Without order tables, ``op_compute`` itself (those ops
    cost what :func:`op_ticks` gave them)."""
    if ticked.forward_after_backward is None and ticked.backward_after_forward is None:
        return op_compute
    _, _, after_backward, after_forward = ticked.run_tables()
    stages = ticked.num_stages
    stage = np.arange(len(op_compute)) % stages
    previous_forward = np.zeros_like(is_forward)
    previous_forward[:, 1:] = is_forward[:, :-1]
    previous_backward = np.zeros_like(is_forward)
    previous_backward[:, 1:] = ~is_forward[:, :-1] & (size[:, :-1] == size[:, 1:])
    held_before_previous = np.zeros_like(held)
    held_before_previous[:, 2:] = held[:, :-2]
    alternate = stored[:, None] & (is_forward & previous_backward)
    own = (
        stored[:, None]
        & (stage == stages - 1)[:, None]
        & ~is_forward
        & previous_forward
        & (held == 0)
        & (held_before_previous == 0)
    )
    clipped = np.clip(size, 0, ticked.num_units)
    priced = np.where(alternate, after_backward[stage[:, None], clipped], op_compute)
    return np.where(own, after_forward[stage[:, None], clipped], priced)


def _chunk_ticks(
    forward: np.ndarray, backward: np.ndarray, ticked: TickedProblem
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`op_ticks` of one chunk of individuals."""
    U = ticked.num_units
    count, stages, _ = forward.shape
    f = np.clip(forward.astype(np.int64), 0, U)
    b = np.clip(backward.astype(np.int64), 0, U)
    individual = np.arange(count)[:, None, None]
    stage = np.arange(stages)[None, :, None]
    # G at each forward boundary, -1 at a unit that is none (0 at unit 0).
    graphs = np.full((count, stages, U + 1), -1, dtype=np.int64)
    graphs[..., 0] = 0
    graphs[individual, stage, np.minimum(f.cumsum(axis=2), U)] = ticked.backward_compute[
        stage, f
    ].cumsum(axis=2)
    covered = graphs[individual, stage, np.minimum(b.cumsum(axis=2), U)]
    stored = (covered >= 0).all(axis=2, keepdims=True)
    before = np.concatenate((np.zeros_like(covered[..., :1]), covered[..., :-1]), axis=2)
    forward_ticks = np.where(
        stored, ticked.forward_compute[stage, f], ticked.recompute_forward[stage, f]
    )
    backward_ticks = np.where(stored, covered - before, ticked.recompute_backward[stage, b])
    return forward_ticks, backward_ticks, stored[..., 0]
