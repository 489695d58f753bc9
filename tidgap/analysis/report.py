"""Figures for an evaluated schedule: busy time and bubbles per stage, and the gap to the
problem's lower bound (:mod:`tidgap.analysis.bound`)."""

from __future__ import annotations

from dataclasses import dataclass

from tidgap.schedules.timeline import Timeline


@dataclass(frozen=True)
class Report:
    """Times in the problem's unit; ratios in ``[0, 1]``.

    ``busy[s]``: stage ``s``'s forwards, backwards and tail; ``bubble[s] = 1 - busy[s] /
    iteration_time``; ``overall_bubble = 1 - sum(busy) / (S * iteration_time)``;
    ``lower_bound``: no flush plan is faster (``None`` for a schedule it does not bound).
    """

    iteration_time: float
    busy: list[float]
    bubble: list[float]
    overall_bubble: float
    lower_bound: float | None

    @property
    def gap(self) -> float | None:
        """How much longer than the lower bound: ``iteration_time / lower_bound - 1``."""
        if self.lower_bound is None or self.lower_bound <= 0:
            return None
        return self.iteration_time / self.lower_bound - 1


def report(timeline: Timeline, lower_bound: float | None) -> Report:
    """The :class:`Report` of ``timeline``; pass the bound only if it bounds this schedule."""
    total = timeline.iteration_time
    busy = [timeline.busy(s) for s in range(timeline.num_stages)]
    bubble = [1 - b / total if total > 0 else 0.0 for b in busy]
    overall = 1 - sum(busy) / (len(busy) * total) if total > 0 else 0.0
    return Report(total, busy, bubble, overall, lower_bound)


def format_report(result: Report, stage_names: list[str], time_unit: str) -> list[str]:
    """Text lines: per-stage busy time and bubble, then the overall figures."""
    stages = ", ".join(
        f"{name} {busy:.6g} ({bubble:.1%})"
        for name, busy, bubble in zip(stage_names, result.busy, result.bubble, strict=True)
    )
    return [f"  busy ({time_unit}, bubble): {stages}", f"  {summary(result, time_unit)}"]


def summary(result: Report, time_unit: str) -> str:
    """One line: the overall bubble ratio and, if known, the lower bound and the gap to it."""
    text = f"bubble {result.overall_bubble:.1%} overall"
    if result.lower_bound is not None:
        gap = result.gap
        shown = "" if gap is None else f", {gap:.2%} above it"
        text += f"; lower bound for any flush plan {result.lower_bound:.6g} {time_unit}{shown}"
    return text
