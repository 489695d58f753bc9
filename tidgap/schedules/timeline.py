"""Start and end of every operation of a schedule: compute steps, tails and link transfers.

A :class:`Timeline` is what the pictures, traces, reports and exports draw from. It is read
off the model's own code (:func:`tidgap.schedules.flush.recurrences` for a plan under the flush,
:func:`tidgap.schedules.simulate.order_timeline` for any other order), never recomputed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.schedules.evaluation import iteration_time
from tidgap.schedules.flush import recurrences
from tidgap.schedules.ir import prefix_sums


@dataclass(frozen=True)
class Step:
    """One timed step, in the problem's time unit.

    On a stage: ``kind`` ``"F"`` (forward), ``"B"`` (backward) or ``"T"`` (the tail). On link
    ``l`` (``l -> l+1``): ``"F"`` sends activations ``l -> l+1``, ``"B"`` gradients
    ``l+1 -> l``. ``microbatch`` counts from 0 within its stage and direction (the sender's
    for a transfer); ``samples`` is ``(first, last)``, 1-based and inclusive. A tail has
    neither.
    """

    kind: str
    microbatch: int | None
    samples: tuple[int, int] | None
    start: float
    end: float

    @property
    def size(self) -> int:
        """Samples in the microbatch (0 for a tail)."""
        return 0 if self.samples is None else self.samples[1] - self.samples[0] + 1

    @property
    def duration(self) -> float:
        """``end - start``."""
        return self.end - self.start


@dataclass(frozen=True)
class Timeline:
    """A schedule's steps: ``stages[s]`` in execution order (the tail last), ``links[l]``
    the transfers over link ``l -> l+1`` in both directions; ``label`` names the schedule."""

    label: str
    time_unit: str
    stage_names: list[str]
    stages: list[list[Step]]
    links: list[list[Step]]
    iteration_time: float

    @property
    def num_stages(self) -> int:
        """``S``."""
        return len(self.stages)

    def busy(self, s: int) -> float:
        """Time stage ``s`` computes: its forwards, backwards and tail."""
        return sum(step.duration for step in self.stages[s])

    def held(self, s: int) -> list[tuple[float, int]]:
        """The samples stage ``s`` holds over time (model.md, Memory), as ``(time, held)``
        points from ``(0.0, 0)``: each forward adds its size at its end, each backward
        removes its size at its end, in the stage's order (one point per step, the tail
        none). Its maximum is the stage's ``peak_held``."""
        points, held = [(0.0, 0)], 0
        for step in self.stages[s]:
            if step.kind in ("F", "B"):
                held += step.size if step.kind == "F" else -step.size
                points.append((step.end, held))
        return points


def _samples(sizes: list[int]) -> list[tuple[int, int]]:
    """``(first, last)`` sample of each microbatch, 1-based inclusive."""
    prefix = prefix_sums(sizes)
    return [(prefix[k] + 1, prefix[k + 1]) for k in range(len(sizes))]


def _computes(kind: str, sizes: list[int], ends: list[float], ready: list[float]) -> list[Step]:
    """Operation ``k`` runs from ``max(E[k-1], R[k])`` to ``E[k]`` (model.md recurrences)."""
    return [
        Step(kind, k - 1, samples, max(ends[k - 1], ready[k]), ends[k])
        for k, samples in enumerate(_samples(sizes), start=1)
    ]


def _sends(kind: str, sizes: list[int], ends: list[float], arrivals: list[float]) -> list[Step]:
    """Transfer ``i`` runs from ``max(E[i], A[i-1])`` to ``A[i]`` (``A[0] = -inf``)."""
    return [
        Step(kind, i - 1, samples, max(ends[i], arrivals[i - 1]), arrivals[i])
        for i, samples in enumerate(_samples(sizes), start=1)
    ]


def tail_steps(problem: Problem, s: int, end: float) -> list[Step]:
    """The tail of stage ``s`` after its last operation ends at ``end`` (none if zero)."""
    tail = problem.stages[s].tail
    return [Step("T", None, None, end, end + tail)] if tail > 0 else []


def flush_timeline(problem: Problem, plan: Plan, label: str = "plan") -> Timeline:
    """Every step of a feasible ``plan`` under the flush model (model.md)."""
    forward, backward = recurrences(problem, plan)
    stages = []
    for s in range(problem.num_stages):
        steps = _computes("F", plan.forward[s], forward.ends[s], forward.ready[s])
        steps += _computes("B", plan.backward[s], backward.ends[s], backward.ready[s])
        stages.append(steps + tail_steps(problem, s, backward.ends[s][-1]))
    links = [
        _sends("F", plan.forward[s], forward.ends[s], forward.arrivals[s])
        + _sends("B", plan.backward[s + 1], backward.ends[s + 1], backward.arrivals[s])
        for s in range(problem.num_stages - 1)
    ]
    iteration = iteration_time(problem, [ends[-1] for ends in backward.ends])
    return Timeline(
        label, problem.time_unit, stage_names(problem), stages, links, iteration_time=iteration
    )


def stage_names(problem: Problem) -> list[str]:
    """Every stage's display name, in order."""
    return [problem.stage_name(s) for s in range(problem.num_stages)]
