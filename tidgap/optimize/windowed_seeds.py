"""The windowed search's seed plans: GPipe(m) and 1F1B(m) for the feasible counts, ramps
that fill and drain the pipeline early, window orders per memory level, and plans encoded
as joint genes."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.genome import GENE, encode_plan
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.limits import MemoryLevel
from tidgap.optimize.order_genes import encode_lead, order_lead
from tidgap.optimize.preparation import equal_seed_counts
from tidgap.schedules.baselines import BaselineResult, equal_sizes
from tidgap.schedules.families import SCHEDULES, TIMED_BASELINES
from tidgap.schedules.held import one_f_one_b_held
from tidgap.schedules.ir import window_order

#: Equal partitions (spread over the feasible counts) that also seed window orders.
WINDOWED_SEED_COUNTS = 16
#: Ramp seeds: the counts of one-unit forwards in front, as offsets from ``S``.
RAMP_OFFSETS = (-1, 0, 1)
#: About how long the seeds of one equal count take per stage, in seconds: GPipe(m) and
#: 1F1B(m) made plans and encoded (86 counts at 512 stages: 2.5 s).
EQUAL_SEED_SECONDS = 5e-5


def encode_plans(plans: Sequence[Plan], problem: Problem, width: int) -> JointGenes:
    """``plans`` with at most ``width`` microbatches per stage as ``(n, S, width)`` host genes
    (others left out)."""
    return encode_seeds(plans, (), (), (), problem, width)


def _fits(plan: Plan, width: int) -> bool:
    """Whether ``plan`` has at most ``width`` microbatches per stage."""
    return max(map(len, plan.forward + plan.backward)) <= width


def encode_seeds(
    plans: Sequence[Plan],
    windowed: Sequence[Plan],
    levels: Sequence[MemoryLevel],
    after: Sequence[Plan],
    problem: Problem,
    width: int,
) -> JointGenes:
    """``(n, S, width)`` host genes of ``plans``, then of each plan of ``windowed`` in each of
    ``levels``' window order (the order that fills each stage up to the level's samples,
    model.md's Windows: the greediest within it, before the repair), then of ``after``;
    plans with more than ``width`` microbatches on a stage left out. The window-order
    seeds are not built as plans: each partition is encoded once, its leads per level (at
    512 stages building and encoding those plans took 1 s)."""

    def encoded(plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (*encode_plan(plan, problem, width), encode_lead(plan, width))

    rows = [encoded(p) for p in plans if _fits(p, width)]
    for plan in (p for p in windowed if _fits(p, width)):
        forward, backward = encode_plan(plan, problem, width)
        for level in levels:
            order = window_order(plan.forward, plan.backward, [max(1, h) for h in level.held])
            rows.append((forward, backward, order_lead(plan.forward, plan.backward, order, width)))
    rows += [encoded(p) for p in after if _fits(p, width)]
    forward, backward, lead = zip(*rows, strict=True)
    return JointGenes(np.stack(forward), np.stack(backward), np.stack(lead).astype(GENE))


def seed_plans(
    problem: Problem,
    width: int,
    population: int,
    baselines: dict[str, BaselineResult],
    seconds: float | None = None,
) -> list[Plan]:
    """GPipe(m) and 1F1B(m) for every feasible ``m`` up to ``width`` (an even spread of at
    most ``population`` counts, the best ones among them: :func:`equal_seed_counts`), and
    fewer where they would take more than ``seconds`` (by :data:`EQUAL_SEED_SECONDS`;
    ``None``: no limit): then the best counts and the fewest and most that fit ``width``."""
    wanted = [baselines[name].microbatches for name in TIMED_BASELINES]
    cap = problem.common_cap() // problem.unit
    most = population
    allowed = math.inf if seconds is None else seconds / (EQUAL_SEED_SECONDS * problem.num_stages)
    if allowed < most:  # an infinite time limit leaves them all
        most = max(int(allowed), 0)
    counts = equal_seed_counts(problem.num_units, cap, width, most, wanted)
    builders = [SCHEDULES[name].baseline for name in TIMED_BASELINES]
    return [build(problem, m) for m in counts for build in builders if build is not None]


def near_equal(units: int, size: int) -> list[int]:
    """``units`` (at least 1) as ``ceil(units / size)`` near-equal sizes, larger first."""
    return equal_sizes(units, -(-units // size))


def ramp_size(problem: Problem, best_1f1b: BaselineResult) -> int:
    """Units per microbatch of the best 1F1B, within the caps: where a ramp ends."""
    return min(
        round(problem.num_units / best_1f1b.microbatches), problem.common_cap() // problem.unit
    )


def growing_ramp_plans(problem: Problem, width: int, best_1f1b: BaselineResult) -> list[Plan]:
    """Mirrored partitions that fill and drain the pipeline early: every stage's forwards
    and backwards are ``1, 2, ..., k`` units (``k < b``, :func:`ramp_size`), then
    near-equal ones of ``b`` units; those with at most ``width`` microbatches. Seeds of the
    ``mirrored`` rule, whose mirror of a :func:`ramp_plans` seed runs its backward ramp in
    single units (a 60 s mirrored search on gpt1-14 found ``1 2 3x9 2`` on every stage)."""
    S, U, unit = problem.num_stages, problem.num_units, problem.unit
    b, plans = ramp_size(problem, best_1f1b), []
    for k in range(1, b):
        head = list(range(1, k + 1))
        if sum(head) >= U:
            break
        row = [x * unit for x in head + near_equal(U - sum(head), b)]
        if len(row) <= width:
            plans.append(Plan.of([row] * S, [row] * S, windows=[problem.batch_size] * S))
    return plans


def ramp_plans(problem: Problem, width: int, best_1f1b: BaselineResult) -> list[Plan]:
    """Partitions that fill and drain the pipeline early, for window orders: every stage's
    forwards start with ``r`` of one unit (``r = S + RAMP_OFFSETS``), then near-equal ones of
    ``b`` units (the best 1F1B's size, within the caps), its backwards with one of ``b - 1``
    units, then near-equal ones of ``b``; those with at most ``width`` microbatches per
    row. None when ``b`` is one unit (all sizes one: an equal seed already). The GA rarely
    reaches this shape from equal partitions (the annealed gpt1-14 plan in docs/ has it)."""
    S, U, unit = problem.num_stages, problem.num_units, problem.unit
    b = ramp_size(problem, best_1f1b)
    if b < 2:
        return []
    backward = [b - 1, *near_equal(U - b + 1, b)]
    plans = []
    for r in (S + offset for offset in RAMP_OFFSETS):
        if not 0 < r < U:
            continue
        forward = [1] * r + near_equal(U - r, b)
        if max(len(forward), len(backward)) <= width:
            rows = [[x * unit for x in forward]] * S, [[x * unit for x in backward]] * S
            plans.append(Plan.of(*rows, windows=[problem.batch_size] * S))
    return plans


def one_f_one_b_level(problem: Problem, best: BaselineResult) -> MemoryLevel:
    """What the best 1F1B holds on each stage (samples, a bound on every stage), counted
    without simulating it (:func:`one_f_one_b_held`: 1 s at 512 stages)."""
    held = one_f_one_b_held(problem, np.asarray([best.microbatches], dtype=np.int64))[0]
    peaks = tuple(int(h) for h in held)
    return MemoryLevel("1F1B", peaks, bound=peaks)
