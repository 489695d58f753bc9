"""What a search reports: progress after each generation and the result."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tidgap.backends.ticks import MODEL_PRICING, RUN_PRICING
from tidgap.model.plan import PLAN_FORMAT, Plan
from tidgap.model.problem import Problem
from tidgap.optimize.backward_rules import FREE
from tidgap.optimize.interrupts import STOP_SIGNALS
from tidgap.optimize.limits import MemoryLevel
from tidgap.runtime.pricing import run_evaluation
from tidgap.schedules.baselines import BaselineResult
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import evaluate


@dataclass(frozen=True)
class SearchProgress:
    """After each generation: effort so far (``elapsed`` seconds since the GA started, after
    the setup) and the best iteration time (problem's unit)."""

    generation: int
    evaluations: int
    elapsed: float
    best_time: float
    gpipe_time: float


#: The figures of a trade-off row (``null`` in a level without a plan).
TRADEOFF_FIGURES = ("iteration_time", "speedup_over_1f1b", "speedup_over_gpipe", "peak_held")


@dataclass(frozen=True)
class TradeoffPoint:
    """The fastest plan found within one memory ``level`` (``None`` if none was), with its
    reference evaluation."""

    level: MemoryLevel
    plan: Plan | None
    evaluation: Evaluation | None

    def as_dict(self, baselines: dict[str, BaselineResult], in_bytes: bool) -> dict[str, Any]:
        """The trade-off row of ``--json``: the limit, the time, the gains over the best
        1F1B and GPipe (ratios of their time to this one) and the memory per stage (also in
        bytes, ``peak_memory``, where ``in_bytes``: the problem gives ``activation_bytes``)."""
        row: dict[str, Any] = {"limit": self.level.label, "limit_held": list(self.level.held)}
        if self.evaluation is None:  # the same keys, each null
            return row | dict.fromkeys([*TRADEOFF_FIGURES, *(["peak_memory"] if in_bytes else [])])
        time = self.evaluation.iteration_time
        row |= {
            "iteration_time": time,
            "speedup_over_1f1b": baselines["1f1b"].iteration_time / time,
            "speedup_over_gpipe": baselines["gpipe"].iteration_time / time,
            "peak_held": list(self.evaluation.peak_held),
        }
        if self.evaluation.peak_memory is not None:
            row["peak_memory"] = list(self.evaluation.peak_memory)
        return row


@dataclass(frozen=True)
class SearchResult:
    """The best plan found, its evaluation (time unit of the problem) and the context."""

    problem: Problem
    plan: Plan
    evaluation: Evaluation
    baselines: dict[str, BaselineResult]
    heuristics: dict[str, Plan]
    backend: str
    seed: int
    generations: int
    evaluations: int
    wall_time: float
    stop_reason: str
    same_partition: bool = False
    setup: dict[str, float] = field(default_factory=dict)
    schedule: str = "flush"
    memory_limit: MemoryLevel | None = None
    tradeoff: tuple[TradeoffPoint, ...] = ()
    backward: str = FREE
    pricing: str = MODEL_PRICING
    memory_pricing: str = MODEL_PRICING
    #: A signal stopped the windowed search in its flush first search, which no state holds:
    #: its checkpoint saved nothing.
    first_cut: bool = False
    #: The iteration times (the problem's unit) of the ``heuristics`` whose reference
    #: evaluation the search needed, by name: a search after this one reuses them.
    heuristic_times: dict[str, float] = field(default_factory=dict)

    @property
    def no_recompute(self) -> bool:
        """Whether the search admitted only plans that ``tidgap run`` runs without
        recomputing forwards (:mod:`tidgap.optimize.backward_rules`)."""
        return self.backward != FREE

    @property
    def interrupted(self) -> bool:
        """Whether a signal stopped the search (the plan is the best found until then)."""
        return self.stop_reason in STOP_SIGNALS.values()

    @property
    def speedup_over_gpipe(self) -> float:
        """Best GPipe time / this plan's time."""
        return self.baselines["gpipe"].iteration_time / self.evaluation.iteration_time

    @cached_property
    def model_evaluation(self) -> Evaluation:
        """The plan's evaluation by the model (what ``tidgap evaluate`` gives): the search's
        own, or, where the search priced plans as ``tidgap run`` runs them, evaluated once."""
        if self.pricing == RUN_PRICING:
            return evaluate(self.problem, self.plan)
        return self.evaluation

    @cached_property
    def run_priced(self) -> Evaluation:
        """The plan's evaluation as ``tidgap run`` runs it
        (:func:`~tidgap.runtime.pricing.run_evaluation`): the search's own where it priced
        plans so, else evaluated once."""
        if self.pricing == RUN_PRICING:
            return self.evaluation
        return run_evaluation(self.problem, self.plan)

    def plan_document(self) -> dict[str, Any]:
        """The ``tidgap.plan/1`` file ``tidgap search --out`` writes (``order`` for an ordered
        plan; the memory limit and the trade-off in ``search`` for a windowed search):
        ``predicted`` is the plan's evaluation, what ``tidgap evaluate --json`` prints
        (formats.md); a search priced as ``tidgap run`` runs plans puts its own evaluation
        of it in ``search.predicted_run``. A copy: changing it changes no list of the
        result's (its plan's rows were changed with it, and the plan no longer added up)."""
        document: dict[str, Any] = {
            "format": PLAN_FORMAT,
            "problem": self.problem.name,
            "forward": self.plan.forward,
            "backward": self.plan.backward,
        }
        if self.plan.order is not None:
            document["order"] = self.plan.order
        search: dict[str, Any] = {
            "schedule": self.schedule,
            "backend": self.backend,
            "seed": self.seed,
            "generations": self.generations,
            "evaluations": self.evaluations,
            "wall_time": round(self.wall_time, 3),
            "stop_reason": self.stop_reason,
            "same_partition": self.same_partition,
            "no_recompute": self.no_recompute,
            "backward": self.backward,
            "pricing": self.pricing,
            "memory_pricing": self.memory_pricing,
            "setup_time": {phase: round(t, 3) for phase, t in self.setup.items()},
        }
        if self.memory_limit is not None:
            search["memory_limit"] = self.memory_limit.label
            search["memory_limit_held"] = list(self.memory_limit.held)
        if self.tradeoff:
            in_bytes = self.problem.has_memory
            search["tradeoff"] = [p.as_dict(self.baselines, in_bytes) for p in self.tradeoff]
        if self.pricing == RUN_PRICING:
            search["predicted_run"] = self.evaluation.as_dict()
        return copy.deepcopy(document) | {
            "predicted": copy.deepcopy(self.model_evaluation.as_dict()),
            "baselines": {
                name: {"microbatches": b.microbatches, "iteration_time": b.iteration_time}
                for name, b in self.baselines.items()
            },
            "search": search,
        }
