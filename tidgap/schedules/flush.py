"""The UMPIPE cost model in plain Python, line by line as ``docs/model.md`` states it.

This is the reference every backend is tested against: clarity over speed. Indices
follow the spec: microbatches count from ``k = 1``; index 0 holds the initial value.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.model.timefn import TimeFunction
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.held import flush_peak_held
from tidgap.schedules.ir import prefix_sums


def send_times(ends: list[float], sizes: list[int], transfer: TimeFunction) -> list[float]:
    """``A[i] = max(E[i], A[i-1]) + C(size_i)``, ``A[0] = -inf``: arrival of each microbatch.

    ``ends[i]`` is when the sender finishes microbatch ``i`` (``ends[0]`` is unused); the link
    carries one transfer at a time, in send order.
    """
    arrivals = [-math.inf]
    for i in range(1, len(ends)):
        arrivals.append(max(ends[i], arrivals[i - 1]) + transfer(sizes[i - 1]))
    return arrivals


def waits(own_sizes: list[int], sender_sizes: list[int], arrivals: list[float]) -> list[float]:
    """``R[k] = A[i]`` with ``i = min{i : P_sender[i] >= P_own[k]}`` for ``k = 1..M``.

    Microbatch ``k`` waits for the sender's microbatch that holds its last sample.
    ``R[0]`` is unused and set to 0.
    """
    sender_prefix = prefix_sums(sender_sizes)
    own_prefix = prefix_sums(own_sizes)
    return [0.0] + [arrivals[bisect_left(sender_prefix, p)] for p in own_prefix[1:]]


def sweep(start: float, ready: list[float], sizes: list[int], compute: TimeFunction) -> list[float]:
    """``E[0] = start, E[k] = max(E[k-1], ready[k]) + compute(size_k)`` for ``k = 1..M``."""
    ends = [start]
    for k in range(1, len(sizes) + 1):
        ends.append(max(ends[k - 1], ready[k]) + compute(sizes[k - 1]))
    return ends


@dataclass(frozen=True)
class Recurrence:
    """One direction of the model for every stage, as model.md names it.

    ``ends[s][k]``: ``F[s][k]`` (forward) or ``G[s][k]`` (backward), ``k = 0..M_s``;
    ``ready[s][k]``: ``R[s][k]`` or ``R'[s][k]`` (``ready[s][0]`` unused); ``arrivals[l][i]``:
    on link ``l`` (``l -> l+1``), ``A[l][i]`` (forward, sender ``l``) or ``A'[l+1][i]``
    (backward, sender ``l+1``), ``i = 0..`` the sender's count (``arrivals[l][0] = -inf``).
    Operation ``k`` of stage ``s`` runs from ``max(ends[s][k-1], ready[s][k])`` to
    ``ends[s][k]``; transfer ``i`` from ``max(sender end i, arrivals[l][i-1])`` to
    ``arrivals[l][i]``. Times in the problem's unit.
    """

    ends: list[list[float]]
    ready: list[list[float]]
    arrivals: list[list[float]]


def forward_recurrence(problem: Problem, forward: list[list[int]]) -> Recurrence:
    """``F``, ``R`` and ``A`` for every stage and link (model.md, forward recurrence)."""
    F: list[list[float]] = []
    R: list[list[float]] = []
    A: list[list[float]] = []
    for s, stage in enumerate(problem.stages):
        if s == 0:
            ready = [0.0] * (len(forward[0]) + 1)
        else:
            upstream = send_times(F[s - 1], forward[s - 1], problem.links[s - 1].forward)
            ready = waits(forward[s], forward[s - 1], upstream)
            A.append(upstream)
        R.append(ready)
        F.append(sweep(0.0, ready, forward[s], stage.forward))
    return Recurrence(F, R, A)


def backward_recurrence(
    problem: Problem, backward: list[list[int]], forward_end: float
) -> Recurrence:
    """``G``, ``R'`` and ``A'`` for every stage and link (model.md, backward recurrence)."""
    S = problem.num_stages
    G: list[list[float]] = [[] for _ in range(S)]
    R: list[list[float]] = [[] for _ in range(S)]
    A: list[list[float]] = [[] for _ in range(S - 1)]
    for s in reversed(range(S)):
        if s == S - 1:
            ready = [0.0] * (len(backward[s]) + 1)
        else:
            downstream = send_times(G[s + 1], backward[s + 1], problem.links[s].backward)
            ready = waits(backward[s], backward[s + 1], downstream)
            A[s] = downstream
        R[s] = ready
        G[s] = sweep(forward_end, ready, backward[s], problem.stages[s].backward)
    return Recurrence(G, R, A)


def recurrences(problem: Problem, plan: Plan) -> tuple[Recurrence, Recurrence]:
    """Both directions of a feasible ``plan``: the backward pass starts at ``forward_end``."""
    forward = forward_recurrence(problem, plan.forward)
    return forward, backward_recurrence(problem, plan.backward, forward.ends[-1][-1])


def summarise(problem: Problem, forward: Recurrence, backward: Recurrence) -> Evaluation:
    """End times and ``iteration_time = max_s(G[s][N_s] + tail_s)`` of the two directions;
    every stage holds the whole batch (``peak_held = B``)."""
    return Evaluation.of(
        problem,
        [f[-1] for f in forward.ends],
        [g[-1] for g in backward.ends],
        flush_peak_held(problem),
    )


def evaluate(problem: Problem, plan: Plan) -> Evaluation:
    """Iteration time and end times of a feasible ``plan`` (see
    :func:`tidgap.model.plan.check_plan`)."""
    return summarise(problem, *recurrences(problem, plan))
