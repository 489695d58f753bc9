"""The lines that sum up a search: the plan's time beside the best baseline overall, said
plainly when a baseline is faster."""

from __future__ import annotations

import math
from collections.abc import Mapping

from tidgap.analysis.limit_marks import LimitMarks
from tidgap.backends.ticks import MODEL_PRICING, RUN_PRICING
from tidgap.model.lists import compact_sizes
from tidgap.model.text import counted
from tidgap.optimize.backward_rules import ALIGNED, FREE
from tidgap.optimize.memory import format_bytes
from tidgap.optimize.results import SearchResult, TradeoffPoint
from tidgap.schedules.baselines import BaselineResult
from tidgap.schedules.families import (
    SCHEDULES,
    TIMED_BASELINES,
    baseline_evaluation,
    baseline_label,
)

#: Times this close (relatively) are one time: the same ops' durations summed in another
#: order differ in their last bits (GPipe(2) and 1F1B(2) on one stage).
SAME_TIME = 1e-9


def same_time(a: float, b: float) -> bool:
    """Whether times ``a`` and ``b`` are one time (within :data:`SAME_TIME`)."""
    return math.isclose(a, b, rel_tol=SAME_TIME)


def best_rival(baselines: Mapping[str, BaselineResult | None]) -> BaselineResult:
    """The fastest of the best GPipe and the best 1F1B (GPipe on a tie, :func:`same_time`),
    of those ``baselines`` holds (a missing or ``None`` one left out; GPipe must be there)."""
    rivals = [rival for name in TIMED_BASELINES if (rival := baselines.get(name)) is not None]
    fastest = min(rival.iteration_time for rival in rivals)
    return next(rival for rival in rivals if same_time(rival.iteration_time, fastest))


def verdict(plan_time: float, rival: BaselineResult, unit: str, flush: bool = True) -> str:
    """``best baseline: 1F1B(9) 7617 ms, 0.60% faster than this plan`` or ``... slower``
    (``flush``: the plan is a flush plan, said when 1F1B beats it); ``as fast`` where the
    times are :func:`same_time`."""
    name = baseline_label(rival.schedule, rival.microbatches)
    ratio = rival.iteration_time / plan_time
    if same_time(rival.iteration_time, plan_time):
        how = "as fast as this plan"
    elif ratio < 1:
        why = " (1F1B interleaves forwards and backwards; flush plans do not)" if flush else ""
        how = f"{1 / ratio - 1:.2%} FASTER than this plan{why}"
    else:
        how = f"this plan is {ratio:.3f}x faster ({ratio - 1:.2%})"
    return f"best baseline: {name} {rival.iteration_time:.6g} {unit}, {how}"


def limit_marks(result: SearchResult) -> LimitMarks | None:
    """The marks of the search's limit in force, counted as it counts memory (``None``
    without a limit)."""
    if result.memory_limit is None:
        return None
    one_f_one_b = result.baselines["1f1b"]
    return LimitMarks.of(result.problem, result.memory_limit, result.memory_pricing, one_f_one_b)


def beyond_limit(result: SearchResult, rival: BaselineResult) -> bool:
    """Whether ``rival`` holds more than the search's limit in force allows on some stage,
    counted as the search counts memory (it may not return such a plan); ``False`` without
    a limit."""
    marks = limit_marks(result)
    if marks is None:
        return False
    problem, m = result.problem, rival.microbatches
    evaluation = baseline_evaluation(problem, rival.schedule, m)
    build = SCHEDULES[rival.schedule].baseline
    return bool(marks.over(None if build is None else build(problem, m), evaluation))


def over_limit(result: SearchResult, rival: BaselineResult) -> str:
    """`` (over the memory limit)`` when :func:`beyond_limit`, else ``""``."""
    return " (over the memory limit)" if beyond_limit(result, rival) else ""


#: Phases of a search that run after its GA (timed, but not setup).
AFTER_GA = ("anneal", "polish", "decode")


def summary_lines(result: SearchResult) -> list[str]:
    """The search's headline and its comparison with the best baseline overall."""
    unit = result.problem.time_unit
    family = SCHEDULES[result.schedule]
    setup = sum(t for phase, t in result.setup.items() if phase.split()[-1] not in AFTER_GA)
    compiling = sum(t for phase, t in result.setup.items() if phase.endswith("compile"))
    annealing = result.setup.get("anneal")
    after = "" if annealing is None else f", annealing {annealing:.1f} s"
    plan_time = result.evaluation.iteration_time
    rival = best_rival(result.baselines)
    rule = "" if result.backward == FREE else f" backward {result.backward}"
    rule += "" if result.pricing == MODEL_PRICING else f", priced as {result.pricing}"
    return [
        f"best plan: iteration {plan_time:.6g} {unit}, {result.speedup_over_gpipe:.3f}x best "
        f"GPipe ({family.name}{rule}, {result.generations} generations, {result.evaluations} "
        "evaluations, "
        f"{result.wall_time:.1f} s of which setup {setup:.1f} s (compile "
        f"{compiling:.1f} s){after}, {result.backend}, "
        f"stopped on {result.stop_reason})",
        f"  {verdict(plan_time, rival, unit, family.has_flush)}{over_limit(result, rival)}",
        *batch_statistics_line(result),
        *tradeoff_lines(result),
    ]


def batch_statistics_line(result: SearchResult) -> list[str]:
    """Why the search recomputed on no stage where the problem's layers normalise by their
    batch's statistics (:func:`~tidgap.optimize.backward_rules.admitted_rule`); none
    otherwise."""
    layers = result.problem.batch_statistics_layers
    if result.backward != ALIGNED or not layers:
        return []
    if len(layers) == 1:
        which = f"layer {layers[0]} normalises by its batch's statistics"
    else:
        others = counted(len(layers) - 1, "other")
        which = f"layers {layers[0]} and {others} normalise by their batch's statistics"
    return [
        f"  recomputing on no stage: {which} (source.batch_statistics), and tidgap run "
        "refuses a recomputing stage holding one"
    ]


def _memory(point: TradeoffPoint) -> str:
    """Peak memory per stage: bytes where the problem gives them, else samples held."""
    evaluation = point.evaluation
    if evaluation is None:
        return ""
    if evaluation.peak_memory is not None:
        return "memory " + " ".join(format_bytes(b) for b in evaluation.peak_memory)
    return "held " + compact_sizes(evaluation.peak_held)


def tradeoff_lines(result: SearchResult) -> list[str]:
    """The time-memory trade-off of a windowed search: per memory level, the fastest plan's
    time, its gains over the best 1F1B and GPipe, and its peak memory per stage."""
    if not result.tradeoff:
        return []
    unit = result.problem.time_unit
    one_f_one_b = result.baselines["1f1b"].iteration_time
    gpipe = result.baselines["gpipe"].iteration_time
    width = max(len(point.level.label) for point in result.tradeoff)
    held = ""
    if result.memory_pricing == RUN_PRICING:
        held = "; memory as tidgap run holds it, graphs or, where a stage recomputes, inputs"
    lines = [
        f"  time-memory trade-off (fastest plan within each limit; gain = baseline / plan{held}):"
    ]
    for point in result.tradeoff:
        label = point.level.label.ljust(width)
        in_force = "  <- limit in force" if point.level == result.memory_limit else ""
        if point.evaluation is None:
            lines.append(f"    within {label}  no plan found{in_force}")
            continue
        time = point.evaluation.iteration_time
        lines.append(
            f"    within {label}  {time:.6g} {unit}  {one_f_one_b / time:.3f}x 1F1B  "
            f"{gpipe / time:.3f}x GPipe  {_memory(point)}{in_force}"
        )
    return lines
