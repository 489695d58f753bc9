"""A lower bound on the iteration time of every plan of a problem (flush model, model.md).

Each direction is a chain of resources in the order data flows: forward ``stage 0, link 0,
stage 1, ..., stage S-1``; backward ``stage S-1, link S-2, stage S-2, ..., stage 0`` (a
link here is its gradient direction). Every resource ``r`` runs *items* one at a time, in
order: a stage its microbatches, a link the sender's microbatches. For resource ``r``:

- ``m_r``: the least time of one item, over every size it may get (``unit`` up to the cap
  in force: ``fcap_s`` for ``Tf_s`` and ``Cf_s``; ``bcap_s`` for ``Tb_s``; ``bcap_{s+1}``
  for ``Cb_s``, whose sender is ``s+1``). Time functions need not grow with the size, so
  this is a minimum over all sizes, not the time of one unit.
- ``W_r``: the least total time of its items over every partition of ``B`` that respects
  that cap: ``W(0) = 0``, ``W(u) = min_j W(u - j) + t(j unit)``, ``j = 1..min(u, cap)``.

**Claim.** Let ``b_r(k)``, ``e_r(k)`` be the start and end of item ``k`` of resource ``r``
(``k = 1..n_r``) under any feasible plan, ``T0`` the time the chain may start (0
forward, ``forward_end`` backward). Then for every ``r``:

    ``e_last(n) >= T0 + sum_{q<r} m_q + W_r + sum_{q>r} m_q``

and, more generally, ``e_t(n_t) >= T0 + sum_{q<r} m_q + W_r + sum_{r<q<=t} m_q`` for every
``t >= r``.

**Proof.** (1) *Serial, in order:* ``b_r(k) >= e_r(k-1)`` (model.md: ``E[k] =
max(E[k-1], ready) + t``; a link's ``A[i] = max(E[i], A[i-1]) + C``), and durations are
the time functions' values, so ``e_r(n_r) >= b_r(1) + sum_k d_r(k) >= b_r(1) + W_r``,
since the sizes form a partition of ``B`` within the cap. Ends never decrease, so
``e_r(i) >= e_r(1)``. (2) *First items:* the first item of ``r+1`` waits for some item
``i >= 1`` of ``r`` (a link's first transfer for the sender's first microbatch; a stage's
first microbatch for the transfer holding its last sample), so ``b_{r+1}(1) >= e_r(i) >=
e_r(1) >= b_r(1) + m_r``; with ``b_first(1) >= T0`` (``F[s][0] = 0``, ``G[s][0] =
forward_end``), induction gives ``b_r(1) >= T0 + sum_{q<r} m_q``. (3) *Last items:* the
last item of every resource holds sample ``B``, and the last item of ``r+1`` waits for
the last item of ``r`` (``i = min{i : P[i] >= B}`` is the sender's last microbatch), so
``e_{r+1}(n) >= e_r(n) + m_{r+1}``. Chaining (2), (1) and (3) proves the claim.

Forward, ``forward_end = e_{stage S-1}(n)``; backward, ``iteration_time >= e_{stage s}(n)
+ tail_s`` for every stage. With ``LB_f`` the forward bound from ``T0 = 0`` and ``LB_b``
the backward one from ``T0 = 0`` (maximised over ``r`` and over the stages ``t >= r`` the
iteration may end on, each with its tail), every plan has ``forward_end >= LB_f`` and
``iteration_time >= forward_end + LB_b``, so ``iteration_time >= LB_f + LB_b``. The
bound holds for flush plans (every UMPIPE plan and GPipe), not for 1F1B, which has no
flush. Computed in floating point, it may exceed a tight optimum by rounding (1e-12
relative).

**Computing ``m_r`` and ``W_r``.** Write ``t_j = t(j unit)`` for ``j = 1..J``, ``J = cap /
unit``. The claim holds with any ``W'_r <= W_r`` in place of ``W_r``, so:

- ``W_r`` is the DP above (``O(U J)``, compiled) when ``U J <= EXACT_CELLS``;
- otherwise ``W'_r = max(U min_j t_j / j, ceil(U / J) min_j t_j)``. *Proof:* a partition
  into parts ``j_1..j_n`` has ``n >= ceil(U / J)`` parts, each costing at least ``min t``;
  and ``sum_i t_{j_i} = sum_i j_i (t_{j_i} / j_i) >= (sum_i j_i) min_j t_j / j = U min_j
  t_j / j``.

Both minima need only a few sizes (:func:`candidate_sizes`): an affine ``t`` or a table's
piece between two knots is ``t(b) = a + c b``, so on the sizes of one piece ``t`` is
monotone and so is ``t(b) / b = a / b + c`` (``b > 0``); their least values over a piece's
multiples of ``unit`` lie at its first or last one. Computed in floating point,
interpolation is monotone too (each rounded operation is), so ``m_r`` is exactly the least
of all ``t_j``, found in ``O(table size)`` work, not ``O(J)``: a bound for a batch of
``1e9`` samples costs no more than one for 64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tidgap.model.problem import Problem
from tidgap.model.timefn import TimeFunction


@dataclass(frozen=True)
class Resource:
    """A stage or link in one direction: ``least_step`` is ``m_r``, ``least_total`` ``W_r``
    (or its relaxation ``W'_r``);
    ``finish`` is the time after this resource's last item before the iteration may end (a
    stage's tail backward; 0 for the last stage forward), ``None`` if it cannot end here."""

    least_step: float
    least_total: float
    finish: float | None


#: The largest ``U * cap / unit`` for which ``W_r`` is the exact DP (``O(U * cap / unit)``
#: time and ``O(U + cap / unit)`` memory); beyond it, the relaxation (module docstring).
EXACT_CELLS = 1 << 20


def candidate_sizes(function: TimeFunction, unit: int, cap: int) -> np.ndarray:
    """Multiples of ``unit`` in ``unit..cap`` (samples, ascending) among which ``t(b)`` and
    ``t(b) / b`` take their least values over all of them: the range's ends and, for a
    table, the multiples next to each knot (module docstring)."""
    ends = np.array([unit, cap], dtype=np.int64)
    if function.table is None:
        return ends
    knots = np.asarray(function.table.sizes, dtype=np.int64)
    near = np.concatenate([(knots - 1) // unit, knots // unit, knots // unit + 1]) * unit
    return np.unique(np.concatenate([ends, near[(near >= unit) & (near <= cap)]]))


def step_times(function: TimeFunction, unit: int, cap: int) -> np.ndarray:
    """``t(j unit)`` for ``j = 1..cap/unit`` (float64)."""
    return function.at(unit * np.arange(1, cap // unit + 1, dtype=np.int64))


def least_total(times: np.ndarray, num_units: int) -> float:
    """``W(U)``: the least ``sum t(part)`` over partitions of ``U`` units into parts of at
    most ``len(times)`` units, ``times[j-1]`` the time of a part of ``j`` units (the DP,
    compiled: :func:`tidgap.fallback_cpu.setup_loops.least_total`)."""
    from tidgap.fallback_cpu.setup_loops import least_total as compiled

    return compiled(times, num_units)


def relaxed_total(function: TimeFunction, unit: int, cap: int, num_units: int) -> float:
    """``max(U min_j t_j / j, ceil(U / J) min_j t_j) <= W(U)`` (module docstring), from
    :func:`candidate_sizes` alone; ``J = cap / unit``."""
    sizes = candidate_sizes(function, unit, cap)
    times = function.at(sizes)
    per_unit = float(np.min(times / (sizes // unit)))
    return max(num_units * per_unit, -(-num_units // (cap // unit)) * float(times.min()))


def resource(problem: Problem, function: TimeFunction, cap: int, finish: float | None) -> Resource:
    """The :class:`Resource` of ``function`` with sizes ``unit..cap`` samples."""
    unit, units = problem.unit, problem.num_units
    least_step = float(function.at(candidate_sizes(function, unit, cap)).min())
    if units * (cap // unit) <= EXACT_CELLS:
        total = least_total(step_times(function, unit, cap), units)
    else:
        total = relaxed_total(function, unit, cap, units)
    return Resource(least_step, total, finish)


def chain_bound(chain: list[Resource]) -> float:
    """``max_r [sum_{q<r} m_q + W_r + max_{t>=r} (sum_{r<q<=t} m_q + finish_t)]``."""
    drains: list[float] = []
    drain = -math.inf
    for r in reversed(range(len(chain))):
        after = chain[r + 1].least_step + drain if r + 1 < len(chain) else -math.inf
        finish = chain[r].finish
        drain = max(after, finish if finish is not None else -math.inf)
        drains.append(drain)
    drains.reverse()
    best, before = 0.0, 0.0
    for item, drain in zip(chain, drains, strict=True):
        best = max(best, before + item.least_total + drain)
        before += item.least_step
    return best


def forward_chain(problem: Problem) -> list[Resource]:
    """Stage 0, link 0, ..., stage S-1 with ``Tf_s`` and ``Cf_s`` (sender ``s``, cap
    ``fcap_s``); only the last stage ends the forwards."""
    S = problem.num_stages
    chain = []
    for s, stage in enumerate(problem.stages):
        cap = problem.forward_cap(s)
        chain.append(resource(problem, stage.forward, cap, 0.0 if s == S - 1 else None))
        if s < S - 1:
            chain.append(resource(problem, problem.links[s].forward, cap, None))
    return chain


def backward_chain(problem: Problem) -> list[Resource]:
    """Stage S-1, link S-2, ..., stage 0 with ``Tb_s`` and ``Cb_s`` (sender ``s+1``, cap
    ``bcap_{s+1}``); every stage may end the iteration, after its tail."""
    chain = []
    for s in reversed(range(problem.num_stages)):
        stage = problem.stages[s]
        if s < problem.num_stages - 1:
            link = problem.links[s].backward
            chain.append(resource(problem, link, problem.backward_cap(s + 1), None))
        chain.append(resource(problem, stage.backward, problem.backward_cap(s), stage.tail))
    return chain


def lower_bound(problem: Problem) -> float:
    """``LB_f + LB_b``: no flush plan of ``problem`` is faster (see the module docstring)."""
    return chain_bound(forward_chain(problem)) + chain_bound(backward_chain(problem))
