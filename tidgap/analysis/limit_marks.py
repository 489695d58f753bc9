"""The stages a plan holds over a search's memory limit in force, counted as the search
counts memory: its held samples (model.md), or, where the search counts memory as
``tidgap run`` holds plans, the run's bytes against what the limit allows them
(:meth:`~tidgap.optimize.run_memory.RunMemory.limit`, beside the best 1F1B's own)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tidgap.backends.ticks import RUN_PRICING
from tidgap.backends.xp import to_host
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.limits import MemoryLevel
from tidgap.optimize.memory_seeds import reference_memory, run_units
from tidgap.optimize.run_memory import RunMemory
from tidgap.schedules.baselines import BaselineResult
from tidgap.schedules.evaluation import Evaluation


@dataclass(frozen=True)
class LimitMarks:
    """Marks ``level``'s stages a plan holds over: by samples, or with ``memory`` (host
    figures fitted to the level's byte limits and referenced to the best 1F1B) in its
    units, of which ``allowed`` ``(S,)`` is what the level allows each stage."""

    problem: Problem
    level: MemoryLevel
    memory: RunMemory | None = None
    allowed: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        problem: Problem,
        level: MemoryLevel,
        memory_pricing: str,
        one_f_one_b: BaselineResult,
    ) -> LimitMarks:
        """The marks of a search of ``problem`` under ``level`` whose memory pricing is
        ``memory_pricing`` and whose best 1F1B is ``one_f_one_b`` (as its search seeded
        it: :func:`~tidgap.optimize.memory_seeds.reference_memory`)."""
        memory = None
        if memory_pricing == RUN_PRICING:
            memory = reference_memory(problem, level.bytes_cap, one_f_one_b)
        if memory is None:  # counted in samples (also where the problem has no figures)
            return cls(problem, level)
        return cls(problem, level, memory, to_host(memory.limit(level)))

    def over(self, plan: Plan | None, evaluation: Evaluation | None) -> list[int]:
        """The stages where ``plan`` (``evaluation``: its, with the model's held samples)
        holds more than the level allows; none without an evaluation (PipeDream)."""
        if evaluation is None or evaluation.peak_held is None:
            return []
        if self.memory is None or plan is None:
            return self.level.over(evaluation.peak_held)
        units = run_units(self.memory, self.problem, plan, evaluation.peak_held)
        assert self.allowed is not None
        return [
            s
            for s, (held, allowed) in enumerate(zip(units, self.allowed, strict=True))
            if held > allowed
        ]
