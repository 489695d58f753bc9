"""What a search reports: progress after each generation and the result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidgap.model.plan import PLAN_FORMAT, Plan
from tidgap.model.problem import Problem
from tidgap.optimize.interrupts import STOP_SIGNALS
from tidgap.schedules.baselines import BaselineResult
from tidgap.schedules.evaluation import Evaluation


@dataclass(frozen=True)
class SearchProgress:
    """After each generation: effort so far (``elapsed`` seconds since the GA started, after
    the setup) and the best iteration time (problem's unit)."""

    generation: int
    evaluations: int
    elapsed: float
    best_time: float
    gpipe_time: float


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

    @property
    def interrupted(self) -> bool:
        """Whether a signal stopped the search (the plan is the best found until then)."""
        return self.stop_reason in STOP_SIGNALS.values()

    @property
    def speedup_over_gpipe(self) -> float:
        """Best GPipe time / this plan's time."""
        return self.baselines["gpipe"].iteration_time / self.evaluation.iteration_time

    def plan_document(self) -> dict[str, Any]:
        """The ``tidgap.plan/1`` file ``tidgap search --out`` writes."""
        return {
            "format": PLAN_FORMAT,
            "problem": self.problem.name,
            "forward": self.plan.forward,
            "backward": self.plan.backward,
            "predicted": self.evaluation.as_dict(),
            "baselines": {
                name: {"microbatches": b.microbatches, "iteration_time": b.iteration_time}
                for name, b in self.baselines.items()
            },
            "search": {
                "backend": self.backend,
                "seed": self.seed,
                "generations": self.generations,
                "evaluations": self.evaluations,
                "wall_time": round(self.wall_time, 3),
                "stop_reason": self.stop_reason,
                "same_partition": self.same_partition,
                "setup_time": {phase: round(t, 3) for phase, t in self.setup.items()},
            },
        }
