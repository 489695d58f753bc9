"""The registry of schedule families: ``SCHEDULES[name]`` is a :class:`Family` record.

Two families are plans a search returns (``flush``: UMPIPE, every stage forwards
everything first; ``windowed``: any valid order per stage, written out or as windows), three
are the baselines people run (``gpipe``, ``1f1b``, ``pipedream``), built from ``m`` equal
microbatches. What differs between them lives in their records, so no other module tests a
schedule by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tidgap.model.plan import Plan, check_plan
from tidgap.model.problem import Problem
from tidgap.schedules import baselines, flush
from tidgap.schedules.baselines import BaselineResult
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.ir import Order, flush_order
from tidgap.schedules.simulate import evaluate_order, order_timeline
from tidgap.schedules.timeline import Timeline, flush_timeline


def _evaluate_ordered(problem: Problem, plan: Plan) -> Evaluation:
    """The event simulator on the plan's order (model.md, Ordered plans, Timing)."""
    return evaluate_order(problem, plan.forward, plan.backward, plan.stage_order())


def _ordered_timeline(problem: Problem, plan: Plan, label: str) -> Timeline:
    """Every step of an ordered plan, from the event simulator."""
    return order_timeline(problem, plan.forward, plan.backward, plan.stage_order(), label)


@dataclass(frozen=True)
class Family:
    """A schedule family and what the rest of tidgap needs to know of it.

    ``genes``: what a search varies per stage; ``separable``: ``iteration = forward_end +
    backward_span`` holds, so the dual GA applies; ``has_flush``: every stage runs all its
    forwards before its first backward, so the flush lower bound (:mod:`tidgap.analysis.bound`)
    holds; ``evaluate`` / ``timeline`` / ``order``:
    the reference evaluation, every step, and the per-stage order of a plan of this family
    (``None`` for PipeDream, a steady-state bound); ``baseline``: for a baseline, its plan
    with ``m`` equal microbatches (``None`` for PipeDream and for searched families);
    ``time``: for a baseline, its iteration time with ``m`` (the problem's unit).
    ``evaluate`` and ``timeline`` take a plan already checked against the problem
    (:func:`tidgap.check_plan`; :func:`tidgap.evaluate` checks, then calls them).
    """

    name: str
    label: str
    genes: tuple[str, ...]
    separable: bool
    has_flush: bool
    evaluate: Callable[[Problem, Plan], Evaluation] | None
    timeline: Callable[[Problem, Plan, str], Timeline] | None
    order: Callable[[Plan], Order] | None
    baseline: Callable[[Problem, int], Plan] | None = None
    time: Callable[[Problem, int], float] | None = None

    @property
    def has_timeline(self) -> bool:
        """Whether its plans have steps to draw (PipeDream, a bound, has none)."""
        return self.timeline is not None

    @property
    def is_baseline(self) -> bool:
        """Whether it is built from ``m`` equal microbatches."""
        return self.time is not None


SCHEDULES: dict[str, Family] = {
    family.name: family
    for family in (
        Family(
            "flush",
            "plan",
            ("forward", "backward"),
            separable=True,
            has_flush=True,
            evaluate=flush.evaluate,
            timeline=flush_timeline,
            order=Plan.stage_order,
        ),
        Family(
            "windowed",
            "plan",
            ("forward", "backward", "window"),
            separable=False,
            has_flush=False,
            evaluate=_evaluate_ordered,
            timeline=_ordered_timeline,
            order=Plan.stage_order,
        ),
        Family(
            "gpipe",
            "GPipe",
            ("microbatches",),
            separable=True,
            has_flush=True,
            evaluate=flush.evaluate,
            timeline=flush_timeline,
            order=Plan.stage_order,
            baseline=baselines.gpipe_plan,
            time=baselines.gpipe,
        ),
        Family(
            "1f1b",
            "1F1B",
            ("microbatches",),
            separable=False,
            has_flush=False,
            evaluate=_evaluate_ordered,
            timeline=_ordered_timeline,
            order=Plan.stage_order,
            baseline=baselines.one_f_one_b_plan,
            time=baselines.one_f_one_b,
        ),
        Family(
            "pipedream",
            "PipeDream",
            ("microbatches",),
            separable=False,
            has_flush=False,
            evaluate=None,
            timeline=None,
            order=None,
            time=baselines.pipedream,
        ),
    )
}

#: The baselines, in the order tables list them.
BASELINE_NAMES = tuple(name for name, family in SCHEDULES.items() if family.is_baseline)
#: The baselines with a timeline: the schedules people run (asynchronous PipeDream is a
#: steady-state bound).
TIMED_BASELINES = tuple(name for name in BASELINE_NAMES if SCHEDULES[name].has_timeline)


def family_of(plan: Plan) -> Family:
    """The family of a plan file: ``flush`` without ``order`` and ``windows`` or when they
    give the flush order (every stage's forwards first: the recurrences and the flush lower
    bound apply), else ``windowed``."""
    flush = plan.order_field is None or plan.stage_order() == flush_order(
        plan.forward, plan.backward
    )
    return SCHEDULES["flush" if flush else "windowed"]


def evaluate(problem: Problem, plan: Plan) -> Evaluation:
    """Iteration time, end times and memory of ``plan`` of any family: the flush
    recurrences or the event simulator. :class:`InputError` naming the field unless the
    plan is feasible for ``problem`` (:func:`tidgap.model.plan.check_plan`: a plan for
    another problem, say)."""
    check_plan(plan, problem, "plan")
    return family_of(plan).evaluate(problem, plan)


def plan_timeline(problem: Problem, plan: Plan, label: str = "plan") -> Timeline:
    """Every step of a feasible ``plan`` of any family."""
    return family_of(plan).timeline(problem, plan, label)


def baseline_label(name: str, m: int) -> str:
    """``GPipe(8)``, ``1F1B(4)``: how pictures and tables name a baseline run."""
    return f"{SCHEDULES[name].label}({m})"


def baseline_timeline(problem: Problem, name: str, m: int) -> Timeline:
    """Every step of GPipe(m) or 1F1B(m) (a baseline with a timeline)."""
    family = SCHEDULES[name]
    if family.timeline is None or family.baseline is None:
        raise ValueError(f"{name} has no timeline; timed baselines: {', '.join(TIMED_BASELINES)}")
    return family.timeline(problem, family.baseline(problem, m), baseline_label(name, m))


def baseline(problem: Problem, name: str, m: int) -> BaselineResult:
    """Baseline ``name`` with ``m`` microbatches; ``m`` must be feasible
    (:func:`tidgap.schedules.baselines.require_feasible`)."""
    if name not in BASELINE_NAMES:
        raise ValueError(f"unknown baseline {name!r}; baselines: {', '.join(BASELINE_NAMES)}")
    time = SCHEDULES[name].time(problem, m)  # each baseline's time checks m
    return BaselineResult(name, int(m), time)


def baseline_evaluation(problem: Problem, name: str, m: int) -> Evaluation | None:
    """The full evaluation of GPipe(m) or 1F1B(m) (``peak_held`` included); ``None`` for a
    baseline without one (PipeDream)."""
    family = SCHEDULES[name]
    if family.evaluate is None or family.baseline is None:
        return None
    return family.evaluate(problem, family.baseline(problem, m))
