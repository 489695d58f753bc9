"""The model replayed with a run's own op and transfer times (``tidgap run --replay``):
what the model's dependencies make of what ran, so a user can tell a wrong op time from a
wrong model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.runtime.calibrate import (
    WAITS_FOR,
    measured_problem,
    op_spans,
    stage_overheads,
    transfers,
)
from tidgap.runtime.report import COMPUTE, Row, unit_per_second
from tidgap.schedules.families import evaluate
from tidgap.schedules.simulate import LinkTime, OpTime, evaluate_order


def replays(
    document: dict[str, Any], problem: Problem, plan: Plan, results: Sequence[dict[str, Any]]
) -> tuple[float, list[float]]:
    """The model's iteration time for ``plan`` with the run's own op and transfer times
    (``results``: the ranks' saved results; every op of the plan ran, so each of its sizes
    is measured): with their medians (:func:`measured_problem`), what the model predicts
    once the op times are right; and per timed iteration, with that iteration's own, each
    op plus its stage's overhead (the median gap of :func:`dispatch_gaps` over the run),
    tails the run's median: what the model's dependencies make of exactly what ran. Ops
    vary from one iteration to the next; a model fed their medians does not see what that
    costs where the slower ones fall on the critical path, and the second replay does."""
    iterations = list(zip(*(result["iterations"] for result in results), strict=True))
    scale = unit_per_second(problem.time_unit)
    overheads = stage_overheads(iterations, scale)
    measured = measured_problem(document, problem, iterations, ["this run"], overheads)
    replay = Problem.from_dict(measured)
    order = plan.stage_order()
    each = []
    for ranks in iterations:
        op_time, link_time = own_times(ranks, scale, overheads)
        evaluation = evaluate_order(replay, plan.forward, plan.backward, order, op_time, link_time)
        each.append(evaluation.iteration_time)
    return evaluate(replay, plan).iteration_time, each


def own_times(
    ranks: Sequence[Sequence[Row]], scale: float, overheads: Sequence[float]
) -> tuple[OpTime, LinkTime]:
    """The simulator's op and link times of one iteration's records (per rank, seconds):
    each forward and backward its duration with its send (:func:`op_spans`) plus its
    stage's ``overheads`` entry, each transfer as :func:`transfers` has it, times ``scale``
    (the problem's unit)."""
    ops = {
        (s, COMPUTE[kind], k + 1): (end - start) * scale + overheads[s]
        for s, rows in enumerate(ranks)
        for (kind, k), (start, end) in op_spans(rows).items()
        if kind in WAITS_FOR
    }
    moved = {(link, kind, k + 1): t * scale for link, kind, k, _, t in transfers(ranks)}
    return (lambda s, op, k, size: ops[s, op, k]), (lambda link, op, k, size: moved[link, op, k])
