"""What evaluating a plan gives: end times per stage, the iteration time, what stages hold."""

from __future__ import annotations

from dataclasses import dataclass

from tidgap.model.problem import Problem
from tidgap.schedules.held import peak_memory


def iteration_time(problem: Problem, backward_ends: list[float]) -> float:
    """``max_s(backward_ends[s] + tail_s)`` (the problem's unit): a stage's last op is a
    backward, its tail runs after it."""
    tails = [stage.tail for stage in problem.stages]
    return max(end + tail for end, tail in zip(backward_ends, tails, strict=True))


@dataclass(frozen=True)
class Evaluation:
    """End times of a plan, in the problem's time unit, and what its stages hold.

    ``forward_ends[s]`` / ``backward_ends[s]`` end stage ``s``'s last forward / backward
    (before its tail); ``iteration_time = max_s(backward_ends[s] + tail_s)``;
    ``peak_held[s]`` in samples, ``peak_memory[s]`` in bytes and ``over_memory_limit``
    (stage indices) where the problem gives ``activation_bytes``.
    """

    iteration_time: float
    forward_end: float
    forward_ends: list[float]
    backward_ends: list[float]
    peak_held: list[int]
    peak_memory: list[float] | None = None
    over_memory_limit: list[int] | None = None

    def as_dict(self) -> dict[str, object]:
        """The ``tidgap evaluate --json`` object (the memory keys where the problem gives
        ``activation_bytes``)."""
        document: dict[str, object] = {
            "iteration_time": self.iteration_time,
            "forward_end": self.forward_end,
            "forward_ends": list(self.forward_ends),
            "backward_ends": list(self.backward_ends),
            "peak_held": list(self.peak_held),
        }
        if self.peak_memory is not None:
            document["peak_memory"] = list(self.peak_memory)
            document["over_memory_limit"] = list(self.over_memory_limit or [])
        return document

    @classmethod
    def of(
        cls,
        problem: Problem,
        forward_ends: list[float],
        backward_ends: list[float],
        peak_held: list[int],
    ) -> Evaluation:
        """The evaluation of per-stage end times (the problem's unit) and ``peak_held``
        (samples): ``iteration_time = max_s(backward_ends[s] + tail_s)``, and memory
        where the problem gives ``activation_bytes``."""
        memory, over = peak_memory(problem, peak_held) or (None, None)
        return cls(
            iteration_time=iteration_time(problem, backward_ends),
            forward_end=forward_ends[-1],
            forward_ends=list(forward_ends),
            backward_ends=list(backward_ends),
            peak_held=list(peak_held),
            peak_memory=memory,
            over_memory_limit=over,
        )
