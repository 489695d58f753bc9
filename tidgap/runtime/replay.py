"""The model replayed with a run's own op and transfer times (``tidgap run --replay``):
what the model's dependencies make of what ran, so a user can tell a wrong op time from a
wrong model."""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import Any, NamedTuple

from tidgap.model.errors import InputError
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.runtime.calibrate import (
    WAITS_FOR,
    measured_problem,
    op_spans,
    stage_overheads,
    transfers,
)
from tidgap.runtime.report import COMPUTE, REPLAY_DRAWS, Row, unit_per_second
from tidgap.schedules.families import evaluate
from tidgap.schedules.ir import Order
from tidgap.schedules.simulate import evaluate_order

#: ``{(stage or link, "F" or "B", k): time}`` of one iteration's ops or transfers (``k``
#: from 1), in the problem's unit.
Times = dict[tuple[int, str, int], float]


class Replays(NamedTuple):
    """The model fed a run's own op and transfer times (:func:`replays`), iteration
    times in the problem's unit."""

    #: Fed their medians: what the model predicts once the op times are right.
    medians: float
    #: Per timed iteration, fed that iteration's own: what the dependencies make of it.
    each: list[float]
    #: The median of ``draws`` models (:data:`~tidgap.runtime.report.REPLAY_DRAWS`),
    #: each op and transfer timed by a random timed iteration's, independently: the
    #: medians plus what the ops' variation costs.
    drawn: float


def replays(
    document: dict[str, Any],
    problem: Problem,
    plan: Plan,
    results: Sequence[dict[str, Any]],
    draws: int = REPLAY_DRAWS,
    seed: int = 0,
) -> Replays:
    """The model's iteration time for ``plan`` with the run's own op and transfer times
    (``results``: the ranks' saved results; every op of the plan ran, so each of its sizes
    is measured), each op plus its stage's overhead (the median gap of
    :func:`dispatch_gaps` over the run), tails the run's median (:class:`Replays`). Ops vary
    from one iteration to the next; a model fed their medians does not see what that costs
    where the slower ones fall on a critical path (a plan balanced to the microsecond has
    several near-critical ones), the per-iteration replays do, and the drawn one (``draws``
    models, ``seed`` their random choice) estimates it as if the ops varied
    independently."""
    iterations = list(zip(*(result["iterations"] for result in results), strict=True))
    scale = unit_per_second(problem.time_unit)
    overheads = stage_overheads(iterations, scale)
    measured = measured_problem(document, problem, iterations, ["this run"], overheads)
    try:
        replay = Problem.from_dict(measured)
    except InputError as error:  # the ranks' records: times no problem may hold
        raise InputError(f"the run's measured op times make no problem: {error}") from None
    own = [own_times(ranks, scale, overheads) for ranks in iterations]
    order = plan.stage_order()  # once, not per model fed
    each = [fed(replay, plan, ops, moved, order) for ops, moved in own]
    return Replays(
        evaluate(replay, plan).iteration_time,
        each,
        drawn(replay, plan, own, draws, seed, order),
    )


def fed(problem: Problem, plan: Plan, ops: Times, moved: Times, order: Order) -> float:
    """``plan``'s iteration time in the model of ``problem`` with its ops timed ``ops`` and
    its transfers ``moved`` (``order``: the plan's stage order, computed once by the
    caller)."""
    return evaluate_order(
        problem,
        plan.forward,
        plan.backward,
        order,
        lambda s, op, k, size: ops[s, op, k],
        lambda link, op, k, size: moved[link, op, k],
    ).iteration_time


def drawn(
    problem: Problem,
    plan: Plan,
    own: Sequence[tuple[Times, Times]],
    draws: int,
    seed: int,
    order: Order,
) -> float:
    """The median of ``draws`` iteration times of ``plan`` in stage order ``order``
    (:func:`fed`), each op and each transfer timed by the iteration ``own`` (per timed
    iteration, its op and transfer times) that a seeded random draw picks for it,
    independently."""
    choose = random.Random(seed)
    ops, moved = (sorted(own[0][0]), sorted(own[0][1]))
    times = []
    for _ in range(draws):
        picked_ops = {key: own[choose.randrange(len(own))][0][key] for key in ops}
        picked_moved = {key: own[choose.randrange(len(own))][1][key] for key in moved}
        times.append(fed(problem, plan, picked_ops, picked_moved, order))
    return statistics.median(times)


def own_times(
    ranks: Sequence[Sequence[Row]], scale: float, overheads: Sequence[float]
) -> tuple[Times, Times]:
    """One iteration's op and transfer times from its records (per rank, seconds): each
    forward and backward its duration with its send (:func:`op_spans`) plus its stage's
    ``overheads`` entry, each transfer as :func:`transfers` has it, times ``scale`` (the
    problem's unit)."""
    ops = {
        (s, COMPUTE[kind], k + 1): (end - start) * scale + overheads[s]
        for s, rows in enumerate(ranks)
        for (kind, k), (start, end) in op_spans(rows).items()
        if kind in WAITS_FOR
    }
    moved = {(link, kind, k + 1): t * scale for link, kind, k, _, t in transfers(ranks)}
    return ops, moved
