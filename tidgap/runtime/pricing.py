"""What a run pays that the cost model does not know, priced into ``tidgap run``'s
prediction.

model.md prices a backward of ``b`` samples at ``Tb_s(b)``, whatever the stage's forward
partition. The runtime (:mod:`tidgap.runtime.stage`) cannot always run it so:

- a stage whose backward boundaries are all forward boundaries runs each backward through
  the stored graphs of the forward chunks it covers, one graph each: about the sum of those
  chunks' backwards (on the fidelity benchmark's GPT a backward of 12 samples over stored
  chunks of 1, 4, 1, 2 and 4 took 22.7 ms, where ``Tb(12)`` said 16.4 and the five
  backwards' sum 22.3);
- any other stage recomputes (:func:`tidgap.runtime.lowering.recomputes`): each backward
  re-runs its chunk's forward with autograd first, ``Tf(b) + Tb(b)`` (its first forwards
  run without a graph, a little faster than ``Tf``), unless the problem was profiled with
  ``--recompute`` (then ``Tb`` has the forward in it already).
"""

from __future__ import annotations

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.runtime.lowering import recomputes
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import evaluate, plan_timeline
from tidgap.schedules.simulate import OpTime, evaluate_order, order_timeline
from tidgap.schedules.timeline import Timeline


def profiled_with_recompute(problem: Problem) -> bool:
    """Whether ``tidgap profile --recompute`` timed the backwards (``source.timing.
    recompute``): then every backward time already includes its forward."""
    source = problem.source if isinstance(problem.source, dict) else {}
    timing = source.get("timing")
    return isinstance(timing, dict) and timing.get("recompute") is True


def covered_chunks(forward: list[int], backward: list[int]) -> list[list[int]]:
    """Per backward chunk, the sizes of the forward chunks it is made of (every backward
    boundary a forward boundary)."""
    out, i = [], 0
    for size in backward:
        parts: list[int] = []
        while sum(parts) < size:
            parts.append(forward[i])
            i += 1
        out.append(parts)
    return out


def run_backward_times(problem: Problem, plan: Plan) -> dict[tuple[int, int], float]:
    """``{(s, k): time}`` of every backward (``k`` 1-based) that ``tidgap run`` runs at
    another cost than the model's ``Tb_s``: a recomputing stage's, and a stored-graph
    backward over several forward chunks."""
    times: dict[tuple[int, int], float] = {}
    again = recomputes(plan)
    for s, stage in enumerate(problem.stages):
        forward, backward = plan.forward[s], plan.backward[s]
        if again[s]:
            if not profiled_with_recompute(problem):
                for k, size in enumerate(backward, 1):
                    times[s, k] = stage.forward(size) + stage.backward(size)
            continue
        for k, parts in enumerate(covered_chunks(forward, backward), 1):
            if len(parts) > 1:
                times[s, k] = sum(stage.backward(part) for part in parts)
    return times


def run_op_time(problem: Problem, plan: Plan) -> OpTime | None:
    """The simulator's op times as ``tidgap run`` runs ``plan``; ``None`` when every op
    takes the model's time."""
    backwards = run_backward_times(problem, plan)
    if not backwards:
        return None

    def op_time(s: int, op: str, k: int, size: int) -> float:
        stage = problem.stages[s]
        if op == "F":
            return stage.forward(size)
        return backwards.get((s, k), stage.backward(size))

    return op_time


def run_prediction(problem: Problem, plan: Plan, label: str) -> tuple[Evaluation, Timeline]:
    """The model's evaluation and timeline of ``plan`` with the op times of
    :func:`run_op_time` (the model's own where they agree)."""
    op_time = run_op_time(problem, plan)
    if op_time is None:
        return evaluate(problem, plan), plan_timeline(problem, plan, label)
    order = plan.stage_order()
    return (
        evaluate_order(problem, plan.forward, plan.backward, order, op_time),
        order_timeline(problem, plan.forward, plan.backward, order, label, op_time),
    )
