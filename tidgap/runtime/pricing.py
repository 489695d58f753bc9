"""What a run pays that the cost model does not know, priced into ``tidgap run``'s
prediction.

model.md prices a backward of ``b`` samples at ``Tb_s(b)``, whatever the stage's forward
partition. The runtime (:mod:`tidgap.runtime.stage`) cannot always run it so:

- a stage whose backward boundaries are all forward boundaries runs each backward through
  the stored graphs of the forward chunks it covers, one graph each: about the sum of those
  chunks' backwards (on the fidelity benchmark's GPT a backward of 12 samples over stored
  chunks of 1, 4, 1, 2 and 4 took 22.7 ms, where ``Tb(12)`` said 16.4 and the five
  backwards' sum 22.3);
- any other stage recomputes (:func:`tidgap.runtime.lowering.recomputes`): its forwards
  run without autograd's graph and each backward re-runs its chunk's forward with the
  graph first. Where ``tidgap calibrate`` measured both (the problem's
  :attr:`~tidgap.model.problem.Problem.recompute_times`), they are priced so; else each
  backward as ``Tf(b) + Tb(b)`` and each forward as ``Tf`` (on the fidelity benchmark's
  GPT the forwards ran 12-17% and the backwards 5-21% below that), unless the problem was
  profiled with ``--recompute`` (then ``Tb`` has the forward in it already).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import numpy as np

from tidgap.backends.ticks import RUN_PRICING
from tidgap.model.plan import Plan, check_plan
from tidgap.model.problem import Problem
from tidgap.runtime.lowering import recomputes
from tidgap.schedules.baselines import BASELINE_ROWS, BaselineResult, baseline_times
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import (
    SCHEDULES,
    TIMED_BASELINES,
    evaluate,
    family_of,
    plan_timeline,
)
from tidgap.schedules.ir import holders, prefix_sums
from tidgap.schedules.simulate import OpTime, evaluate_order, order_timeline
from tidgap.schedules.timeline import Timeline

#: ``{(s, op, k): time}``: op ``"F"`` or ``"B"`` number ``k`` (1-based) of stage ``s`` as
#: the runtime runs it, in the problem's time unit (:func:`run_op_times`).
RunTimes = dict[tuple[int, str, int], float]


def covered_chunks(forward: list[int], backward: list[int]) -> list[list[int]]:
    """Per backward chunk, the sizes of the forward chunks it is made of (every backward
    boundary a forward boundary): backward ``k`` ends in forward chunk
    ``holder(P, Q[k])``."""
    P, Q = prefix_sums(forward), prefix_sums(backward)
    ends = holders(P, Q)
    return [forward[first:last] for first, last in pairwise(ends)]


def recomputing_times(
    problem: Problem, s: int, forward: list[int], backward: list[int]
) -> RunTimes:
    """The op times of stage ``s`` when it recomputes, with partitions ``forward`` and
    ``backward`` (samples): :meth:`~tidgap.model.problem.Problem.recomputing_costs` (none
    where the model's own are those: profiled with ``--recompute``)."""
    if problem.profiled_with_recompute and problem.recompute_times is None:
        return {}
    largest = (max(forward), max(backward))
    forward_costs, backward_costs = problem.recomputing_costs(s, largest)
    times: RunTimes = {}
    if forward_costs != [problem.stages[s].forward]:  # else the model's forwards
        times = {
            (s, "F", k): sum(cost(size) for cost in forward_costs)
            for k, size in enumerate(forward, 1)
        }
    return times | {
        (s, "B", k): sum(cost(size) for cost in backward_costs)
        for k, size in enumerate(backward, 1)
    }


def order_dependent_times(problem: Problem, plan: Plan, s: int) -> RunTimes:
    """The op times of stage ``s`` (one that stores graphs) that depend on the op before
    them, where ``tidgap calibrate`` measured them (the problem's
    :attr:`~tidgap.model.problem.Problem.order_times`; none without): a forward right
    after a backward of its own size, and on the last stage a backward right after its own
    forward (the forward of the same samples).

    The calibration times them in 1F1B(m), where a forward follows a backward of its size;
    a forward after a backward of another size is priced as in GPipe's order (on the
    fidelity benchmark's GPT the searched windowed plans, whose forwards mostly follow
    backwards of other sizes, ran 3.4% above the other plans' errors on average with the
    gain credited to them, 0.4% below without; docs/measurements.md)."""
    if problem.order_times is None:
        return {}
    measured = problem.order_times[s]
    forward, backward = plan.forward[s], plan.backward[s]
    P, Q = prefix_sums(forward), prefix_sums(backward)
    last = s == problem.num_stages - 1
    times: RunTimes = {}
    done = {"F": 0, "B": 0}
    previous = None
    for op in plan.stage_order().stages[s]:
        done[op] += 1
        f, b = done["F"], done["B"]
        if (op, previous) == ("F", "B") and forward[f - 1] == backward[b - 1]:
            times[s, "F", f] = measured.forward_after_backward(forward[f - 1])
        elif (op, previous) == ("B", "F") and last and P[f - 1 : f + 1] == Q[b - 1 : b + 1]:
            times[s, "B", b] = measured.backward_after_forward(backward[b - 1])
        previous = op
    return times


def run_op_times(problem: Problem, plan: Plan) -> RunTimes:
    """``{(s, op, k): time}`` of every op that ``tidgap run`` runs at another cost than
    the model's ``Tf_s`` / ``Tb_s``: a recomputing stage's (:func:`recomputing_times`),
    an op whose time depends on the op before it (:func:`order_dependent_times`), and a
    stored-graph backward over several forward chunks (the sum of the chunks'
    backwards)."""
    times: RunTimes = {}
    again = recomputes(plan)
    for s, stage in enumerate(problem.stages):
        forward, backward = plan.forward[s], plan.backward[s]
        if again[s]:
            times |= recomputing_times(problem, s, forward, backward)
            continue
        times |= order_dependent_times(problem, plan, s)
        for k, parts in enumerate(covered_chunks(forward, backward), 1):
            if len(parts) > 1:
                times[s, "B", k] = sum(stage.backward(part) for part in parts)
    return times


def order_credit(problem: Problem) -> float:
    """The least ratio, at most 1, of an op time the order tables give to the model's for
    the same stage and size (``forward_after_backward`` to ``Tf``, the last stage's
    ``backward_after_forward`` to ``Tb``, over every size the stage takes): no op of a plan
    that recomputes nothing runs faster than this share of its model time, so neither does
    the plan (the event simulation is monotone and scales with its op times); 1 without
    order tables."""
    if problem.order_times is None:
        return 1.0
    least = 1.0
    last = problem.num_stages - 1
    for s, (stage, measured) in enumerate(zip(problem.stages, problem.order_times, strict=True)):
        pairs = [(measured.forward_after_backward, stage.forward, problem.forward_cap(s))]
        if s == last:
            pairs.append((measured.backward_after_forward, stage.backward, problem.backward_cap(s)))
        for ordered, plain, cap in pairs:
            sizes = np.arange(problem.unit, cap + 1, problem.unit)
            model, priced = plain.at(sizes), ordered.at(sizes)
            positive = model > 0
            if positive.any():
                least = min(least, float((priced[positive] / model[positive]).min()))
    return max(least, 0.0)


def run_priced_baselines(
    problem: Problem, baselines: dict[str, BaselineResult], counts: np.ndarray | None = None
) -> dict[str, BaselineResult]:
    """``baselines`` (:func:`~tidgap.schedules.baselines.best_baselines`: model.md's times)
    with the best GPipe and 1F1B as ``tidgap run`` prices them (:func:`run_evaluation`),
    which differ where the problem has order tables: every count (of ``counts``, ``(M,)``
    ascending feasible ones, where given) is a candidate whose model time, times
    :func:`order_credit`, is not above the best run-priced time found, tried in order of
    model time. PipeDream, without a timeline, keeps the model's."""
    if problem.order_times is None:
        return baselines
    credit = order_credit(problem)
    ms, times = baseline_times(problem, counts)
    priced = dict(baselines)
    for name in TIMED_BASELINES:
        row = times[BASELINE_ROWS.index(name)]
        best: BaselineResult | None = None
        for i in np.argsort(row, kind="stable"):
            if best is not None and credit * row[i] > best.iteration_time:
                break
            m = int(ms[i])
            time = run_evaluation(problem, SCHEDULES[name].baseline(problem, m)).iteration_time
            if best is None or time < best.iteration_time:
                best = BaselineResult(name, m, time)
        if best is not None:
            priced[name] = best
    return priced


def run_op_time(problem: Problem, priced: RunTimes) -> OpTime:
    """The simulator's op times as ``tidgap run`` runs a plan whose ops that cost other
    than the model's are ``priced``."""

    def op_time(s: int, op: str, k: int, size: int) -> float:
        if (s, op, k) in priced:
            return priced[s, op, k]
        stage = problem.stages[s]
        return stage.forward(size) if op == "F" else stage.backward(size)

    return op_time


def run_evaluation(problem: Problem, plan: Plan, priced: RunTimes | None = None) -> Evaluation:
    """The model's evaluation of ``plan`` with its ops timed as ``tidgap run`` runs them
    (``priced``: :func:`run_op_times`, computed here when not given).
    :class:`InputError` unless ``plan`` is feasible for ``problem``, and where it cannot be
    priced so (a recomputing backward needs a size its stage's tables do not hold)."""
    check_plan(plan, problem, "plan")
    priced = run_op_times(problem, plan) if priced is None else priced
    if not priced:
        return family_of(plan).evaluate(problem, plan)  # checked above
    return evaluate_order(
        problem, plan.forward, plan.backward, plan.stage_order(), run_op_time(problem, priced)
    )


def plan_pricing(pricing: str) -> Callable[[Problem, Plan], Evaluation]:
    """How ``pricing`` (:data:`~tidgap.backends.ticks.PRICINGS`) times one plan:
    :func:`run_evaluation` for :data:`~tidgap.backends.ticks.RUN_PRICING` (as ``tidgap run``
    runs it), else the model's (:func:`~tidgap.schedules.families.evaluate`)."""
    return run_evaluation if pricing == RUN_PRICING else evaluate


def run_prediction(problem: Problem, plan: Plan, label: str) -> tuple[Evaluation, Timeline]:
    """:func:`run_evaluation` and the timeline of the same run of ``plan``."""
    priced = run_op_times(problem, plan)
    evaluation = run_evaluation(problem, plan, priced)
    if not priced:
        return evaluation, plan_timeline(problem, plan, label)
    op_time = run_op_time(problem, priced)
    return evaluation, order_timeline(
        problem, plan.forward, plan.backward, plan.stage_order(), label, op_time
    )
