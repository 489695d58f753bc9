"""The order gene of the joint GA: per stage and backward, its *lead* over the forwards it
needs, and the lowering of leads to valid explicit orders, over ``xp``.

With ``a[s][k]`` the forwards stage ``s`` runs before its ``k``-th backward (model.md,
Ordered plans) and ``own[s][k] = min{i : P[s][i] >= Q[s][k]}`` the forwards that backward
needs (rule 1), the gene is ``lead[s][k-1] = a[s][k] - own[s][k]``: ``(P, S, K)`` int32,
entries after a stage's ``N_s`` backwards ignored. Leads express every order exactly
(1F1B(m) on stage ``s`` leads by ``min(S-s-1, m-k)``; a flush stage by ``M_s - own``), and
they keep their meaning when a partition mutation moves boundaries, which ``a`` would not.

Lowering (:func:`lower`): ``a = own + lead`` clipped to ``0..M_s`` and made non-decreasing,
then model.md's repair (:func:`repair_before`, the vectorised twin of
:func:`tidgap.schedules.ir.repair`), then op codes for the evaluators
(:func:`order_codes`). :func:`canonical` writes the repaired leads back, so every gene in a
population is valid as it stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tidgap.backends.xp import namespace, running_max
from tidgap.model.plan import Plan
from tidgap.optimize.genome import BACKWARD_OP, FORWARD_OP, GENE, NO_OP, ORDER_GENE
from tidgap.optimize.operators import microbatch_counts
from tidgap.schedules.ir import Order, forwards_before, prefix_sums
from tidgap.schedules.ir import holder as holder_of


def prefix(genes: Any) -> Any:
    """``(P, S, K)`` sizes -> ``(P, S, K+1)`` int64 prefix sums, ``[..., 0] = 0`` (padding
    repeats the total)."""
    xp = namespace(genes)
    sums = xp.cumsum(genes.astype(xp.int64), axis=-1)
    return xp.concatenate([xp.zeros(sums.shape[:-1] + (1,), dtype=xp.int64), sums], axis=-1)


def holder(prefixes: Any, samples: Any) -> Any:
    """``min{i : prefixes[r, i] >= samples[r, q]}`` for ``(R, K+1)`` non-decreasing
    non-negative rows and ``(R, Q)`` queries at most a row's last entry: ``(R, Q)`` int64.

    One ``searchsorted`` over all rows: row ``r`` is shifted by ``r * (top + 1)``, so the
    flattened rows stay sorted and each query lands in its own row.
    """
    xp = namespace(prefixes)
    rows, width = prefixes.shape
    step = int(prefixes.max()) + 1 if prefixes.size else 1
    shift = xp.arange(rows, dtype=xp.int64)[:, None] * step
    flat = (prefixes + shift).reshape(-1)
    found = xp.searchsorted(flat, (samples + shift).reshape(-1), side="left")
    return found.reshape(samples.shape) - xp.arange(rows, dtype=xp.int64)[:, None] * width


def holder_per_stage(prefixes: Any, samples: Any) -> Any:
    """:func:`holder` over ``(P, S, K+1)`` and ``(P, S, Q)``: stages flattened into rows."""
    population, stages, width = prefixes.shape
    found = holder(
        prefixes.reshape(population * stages, width), samples.reshape(population * stages, -1)
    )
    return found.reshape(samples.shape)


def own_forwards(forward_prefix: Any, backward_prefix: Any) -> Any:
    """``(P, S, K)`` ``own[s][k]``: the forwards that hold backward ``k``'s last sample."""
    return holder_per_stage(forward_prefix, backward_prefix[..., 1:])


def recomputing_stages(forward: Any, backward: Any) -> Any:
    """``(P, S)`` bool: the stage has a backward boundary that is not one of its forward
    boundaries (its backward would recompute forwards: :func:`tidgap.runtime.lowering.recomputes`),
    for ``(P, S, K)`` sizes."""
    xp = namespace(forward)
    forward_prefix, backward_prefix = prefix(forward), prefix(backward)
    own = own_forwards(forward_prefix, backward_prefix)
    boundary = xp.take_along_axis(forward_prefix, own, axis=-1)
    return (boundary != backward_prefix[..., 1:]).any(axis=2)


def misaligned(forward: Any, backward: Any) -> Any:
    """``(P,)`` bool: some stage recomputes (:func:`recomputing_stages`)."""
    return recomputing_stages(forward, backward).any(axis=1)


def repair_before(forward_prefix: Any, backward_prefix: Any, before: Any) -> Any:
    """model.md's repair on ``before`` (``(P, S, K)`` ``a[s][k]``, non-decreasing, at most
    ``M_s``; padding ``M_s``), given the partitions' ``(P, S, K+1)`` :func:`prefix` sums: for
    ``s = S-1`` down to 0, each ``a[s][k]`` raised to the least value that meets rules 1 and
    2 and is at least ``a[s][k-1]``. Valid orders are unchanged."""
    xp = namespace(before)
    before = before.astype(xp.int64)
    stages = before.shape[1]
    raised = [None] * stages
    for s in reversed(range(stages)):
        target = backward_prefix[:, s, 1:]
        if s < stages - 1:
            waits_for = holder(backward_prefix[:, s + 1], target)
            upstream = xp.take_along_axis(raised[s + 1], waits_for - 1, axis=1)
            needed = xp.take_along_axis(forward_prefix[:, s + 1], upstream, axis=1)
            target = xp.maximum(target, needed)
        least = holder(forward_prefix[:, s], target)
        raised[s] = running_max(xp.maximum(before[:, s], least))
    return xp.stack(raised, axis=1)


def lower(forward: Any, backward: Any, lead: Any) -> tuple[Any, Any]:
    """``(before, own)``: the valid ``a[s][k]`` that ``lead`` stands for (``own + lead``
    clipped to ``0..M_s``, made non-decreasing, repaired; padding ``M_s``) and ``own``, both
    ``(P, S, K)`` int64."""
    xp = namespace(lead)
    forward_prefix, backward_prefix = prefix(forward), prefix(backward)
    own = own_forwards(forward_prefix, backward_prefix)
    forwards = microbatch_counts(forward)[..., None]
    column = xp.arange(lead.shape[-1])[None, None, :]
    before = xp.clip(own + lead.astype(xp.int64), 0, forwards)
    before = xp.where(column < microbatch_counts(backward)[..., None], before, forwards)
    before = running_max(before)
    return repair_before(forward_prefix, backward_prefix, before), own


def canonical(forward: Any, backward: Any, lead: Any) -> tuple[Any, Any]:
    """``(lead, codes)``: the leads of the valid order ``lead`` lowers to (padding 0) and that
    order's ``(P, S, 2K)`` op codes."""
    xp = namespace(lead)
    before, own = lower(forward, backward, lead)
    backwards = microbatch_counts(backward)
    column = xp.arange(lead.shape[-1])[None, None, :]
    lead = xp.where(column < backwards[..., None], before - own, 0).astype(GENE)
    return lead, order_codes(before, microbatch_counts(forward), backwards)


def order_codes(before: Any, forwards: Any, backwards: Any) -> Any:
    """``(P, S, 2K)`` int8 op codes of ``before`` (``(P, S, K)`` ``a[s][k]``) with ``M_s``
    forwards and ``N_s`` backwards (``(P, S)`` each): the ``k``-th ``B`` (0-based) sits at
    ``a[s][k+1] + k``, the ``F``s fill the other places up to ``M_s + N_s``, then
    :data:`NO_OP`."""
    xp = namespace(before)
    population, stages, width = before.shape
    length = 2 * width
    column = xp.arange(length + 1)[None, None, :]
    codes = xp.where(column < (forwards + backwards)[..., None], FORWARD_OP, NO_OP)
    codes = codes.astype(ORDER_GENE)
    k = xp.arange(width)[None, None, :]
    places = xp.where(k < backwards[..., None], before + k, length)
    rows = xp.arange(population * stages, dtype=xp.int64).reshape(population, stages, 1)
    codes.reshape(-1)[(rows * (length + 1) + places).reshape(-1)] = BACKWARD_OP
    return xp.ascontiguousarray(codes[..., :length])


def encode_lead(plan: Plan, width: int) -> np.ndarray:
    """A plan's order (``plan.stage_order()``) as ``(S, width)`` leads (padding 0)."""
    return order_lead(plan.forward, plan.backward, plan.stage_order(), width)


def order_lead(
    forward: Sequence[Sequence[int]], backward: Sequence[Sequence[int]], order: Order, width: int
) -> np.ndarray:
    """:func:`encode_lead` of the plan with partitions ``forward`` and ``backward`` (per
    stage, in samples) and ``order``, without building it (a windowed search's window-order
    seeds: one partition in each level's order)."""
    genes = np.zeros((len(forward), width), dtype=GENE)
    # once per distinct stage (partitions and letters): an equal plan's stages share their
    # partitions, and a deep pipeline's all but its last few their letters (at 256 stages
    # the seeds' encoding took 2 s, then 1 s with the partitions alone shared)
    leads: dict[tuple[tuple[int, ...], tuple[int, ...], str], np.ndarray] = {}
    for s, letters in enumerate(order.stages):
        key = (tuple(forward[s]), tuple(backward[s]), letters)
        lead = leads.get(key)
        if lead is None:
            starts, ends = prefix_sums(key[0]), prefix_sums(key[1])
            own = [holder_of(starts, q) for q in ends[1:]]
            lead = leads[key] = np.subtract(forwards_before(letters)[1:], own)
        genes[s, : len(lead)] = lead
    return genes
