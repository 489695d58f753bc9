"""Side-by-side comparison of a plan with the best baselines, and its text rendering."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from tidgap.model.lists import stage_list
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.heuristics import HEURISTICS
from tidgap.optimize.memory import format_bytes
from tidgap.outputs.trace import MICROSECONDS
from tidgap.schedules.baselines import BaselineResult, best_baselines
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import SCHEDULES, baseline_evaluation, evaluate, family_of

#: Significant digits of the largest value in the table's time and throughput columns.
TIME_DIGITS = 6
THROUGHPUT_DIGITS = 5
#: What the table shows for a figure a schedule does not have (PipeDream, a bound).
MISSING = "-"


@dataclass(frozen=True)
class ComparisonRow:
    """One schedule: its family (a key of :data:`tidgap.schedules.families.SCHEDULES`),
    microbatch count(s), iteration time, throughput, speedup over GPipe, and memory.

    ``throughput`` is in samples per time unit; ``speedup`` is best GPipe time / this time;
    ``peak_held[s]`` in samples, ``peak_memory[s]`` in bytes and ``over_memory_limit``
    (stage indices) as ``evaluate`` gives them: ``None`` for PipeDream (a bound, no steps),
    and the last two ``None`` without ``activation_bytes``.
    """

    schedule: str
    family: str
    microbatches: str
    iteration_time: float
    throughput: float
    speedup: float
    peak_held: list[int] | None
    peak_memory: list[float] | None
    over_memory_limit: list[int] | None


def microbatch_summary(plan: Plan) -> str:
    """Range of per-stage microbatch counts, e.g. ``F 4-6 / B 3``."""

    def span(partitions: list[list[int]]) -> str:
        counts = [len(p) for p in partitions]
        low, high = min(counts), max(counts)
        return str(low) if low == high else f"{low}-{high}"

    return f"F {span(plan.forward)} / B {span(plan.backward)}"


#: What a row is built from: schedule, family, microbatches, iteration time, evaluation,
#: plan (``None``: PipeDream's, which has none).
Entry = tuple[str, str, str, float, Evaluation | None, Plan | None]
#: The stages a row's plan holds over a limit (``(plan, evaluation) -> stages``).
Marking = Callable[[Plan | None, Evaluation | None], list[int]]


#: How a row's plan is timed: ``(problem, plan) -> Evaluation``.
Pricing = Callable[[Problem, Plan], Evaluation]
#: How a row's memory is counted: the evaluation of a plan with its ``peak_memory`` as the
#: caller counts it (:func:`~tidgap.optimize.run_memory.run_evaluated` for a search that
#: counts memory as ``tidgap run`` holds it).
Holding = Callable[[Problem, Plan, Evaluation], Evaluation]


def _plan_entry(
    problem: Problem,
    name: str,
    plan: Plan,
    evaluation: Evaluation | None = None,
    price: Pricing = evaluate,
    held: Holding | None = None,
) -> Entry:
    """The entry of a plan's row (flush or ordered), timed by ``price`` and its memory
    counted by ``held`` (where given); ``evaluation`` if already known (so counted)."""
    if evaluation is None:
        evaluation = price(problem, plan)
        if held is not None:
            evaluation = held(problem, plan, evaluation)
    summary = microbatch_summary(plan)
    return name, family_of(plan).name, summary, evaluation.iteration_time, evaluation, plan


def compare(
    problem: Problem,
    plan: Plan | None = None,
    label: str = "plan",
    *,
    baselines: dict[str, BaselineResult] | None = None,
    heuristics: dict[str, Plan] | None = None,
    plan_evaluation: Evaluation | None = None,
    price: Pricing = evaluate,
    held: Holding | None = None,
    over: Marking | None = None,
) -> list[ComparisonRow]:
    """Rows for ``plan`` (if given, first, flush or ordered), the best GPipe, 1F1B and
    PipeDream, and the local greedy and global DP plans, each with its memory. Pass
    ``baselines`` / ``heuristics`` / the plan's evaluation already computed to save the
    work (the plan's with its memory as ``held`` counts it); ``price`` times the plans
    (the heuristics' too) as ``baselines`` were priced
    (:func:`~tidgap.runtime.pricing.run_evaluation` for a run-priced search's); ``held``,
    where given, counts every row's memory (the model's otherwise) but a given
    ``plan_evaluation``'s; ``over``, where given, adds the stages each row holds over a
    limit to its ``over_memory_limit`` (beside the stages' own limits')."""
    best = best_baselines(problem) if baselines is None else baselines
    if heuristics is None:
        heuristics = {name: build(problem) for name, build in HEURISTICS.items()}
    reference = best["gpipe"].iteration_time
    entries: list[Entry] = []
    if plan is not None:
        entries.append(_plan_entry(problem, label, plan, plan_evaluation, price, held))
    for name, result in best.items():
        evaluation = baseline_evaluation(problem, name, result.microbatches)
        build = SCHEDULES[name].baseline
        baseline = None if build is None else build(problem, result.microbatches)
        if held is not None and evaluation is not None and baseline is not None:
            evaluation = held(problem, baseline, evaluation)
        count = str(result.microbatches)
        entries.append((name, name, count, result.iteration_time, evaluation, baseline))
    entries += [
        _plan_entry(problem, name, other, None, price, held) for name, other in heuristics.items()
    ]
    return [
        ComparisonRow(
            name,
            family,
            count,
            time,
            problem.batch_size / time,
            reference / time,
            None if evaluation is None else evaluation.peak_held,
            None if evaluation is None else evaluation.peak_memory,
            _over_memory_limit(evaluation, [] if over is None else over(plan, evaluation)),
        )
        for name, family, count, time, evaluation, plan in entries
    ]


def _over_memory_limit(evaluation: Evaluation | None, marked: list[int]) -> list[int] | None:
    """``evaluation``'s stages over their own limits with ``marked`` added (``None``: no
    evaluation, or no bytes and none marked)."""
    if evaluation is None:
        return None
    own = evaluation.over_memory_limit
    if not marked:
        return own
    return sorted({*marked, *(own or [])})


def rows_as_dicts(rows: list[ComparisonRow]) -> list[dict[str, object]]:
    """The rows as plain dictionaries (``tidgap compare --json``)."""
    return [asdict(row) for row in rows]


#: A column whose largest value needs more decimals than this, or whose largest value is
#: at least :data:`LARGEST_FIXED`, is written in exponent form.
MOST_DECIMALS = 12
LARGEST_FIXED = 1e15


def column_format(values: Sequence[float], significant: int) -> str:
    """The format spec of a column of ``values``: as many decimal places (at least 0) as
    give its largest value ``significant`` significant digits, so the column shares one
    precision (``.2f``); ``significant`` digits in exponent form (``.6g``) where that
    would take more than :data:`MOST_DECIMALS` places or print past :data:`LARGEST_FIXED`
    (times near 1e300 would print 300 digits)."""
    largest = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    if largest == 0:
        return f".{significant - 1}f"
    places = significant - 1 - math.floor(math.log10(largest))
    if places > MOST_DECIMALS or largest >= LARGEST_FIXED:
        return f".{significant}g"
    return f".{max(0, places)}f"


def throughput_scale(time_unit: str) -> tuple[float, str]:
    """Factor from samples per ``time_unit`` to the table's throughput unit, and its name:
    samples/s for ``us``, ``ms`` and ``s``, else samples per ``time_unit`` (factor 1)."""
    if time_unit in MICROSECONDS:
        return 1e6 / MICROSECONDS[time_unit], "samples/s"
    return 1.0, f"samples/{time_unit}"


def throughput_text(samples: int, time: float, time_unit: str) -> str:
    """``samples`` per ``time`` (in ``time_unit``) as the table gives it: ``47.621 samples/s``."""
    scale, name = throughput_scale(time_unit)
    return f"{samples / time * scale:.6g} {name}"


def memory_cells(row: ComparisonRow) -> tuple[str, str]:
    """The table's ``peak held`` (the most samples any stage holds) and ``peak memory``
    (the most bytes, then ``over (stage S)`` naming the stages above their limits, which
    need not hold the most; on the held cell where there are no bytes) cells of ``row``;
    ``-`` where it has none."""
    held = MISSING if row.peak_held is None else str(max(row.peak_held))
    over = f" over ({stage_list(row.over_memory_limit)})" if row.over_memory_limit else ""
    if row.peak_memory is None:  # a search's limit in samples
        return held + over, MISSING
    return held, format_bytes(max(row.peak_memory)) + over


def format_table(rows: list[ComparisonRow], time_unit: str) -> str:
    """A fixed-width text table of ``rows`` with a header line: iteration times in
    ``time_unit`` and throughputs (see :func:`throughput_scale`), each column at one
    precision (:data:`TIME_DIGITS`, :data:`THROUGHPUT_DIGITS` on its largest value), then
    the peak held samples and, where the problem gives ``activation_bytes``, the peak
    memory (:func:`memory_cells`)."""
    scale, rate = throughput_scale(time_unit)
    times = [row.iteration_time for row in rows]
    rates = [row.throughput * scale for row in rows]
    time_spec = column_format(times, TIME_DIGITS)
    rate_spec = column_format(rates, THROUGHPUT_DIGITS)
    with_bytes = any(row.peak_memory is not None for row in rows)
    memory_header = ("peak held", "peak memory")[: 2 if with_bytes else 1]
    header = (
        "schedule",
        "microbatches",
        f"iteration ({time_unit})",
        f"throughput ({rate})",
        "vs GPipe",
        *memory_header,
    )
    body = [
        (
            row.schedule,
            row.microbatches,
            f"{time:{time_spec}}",
            f"{throughput:{rate_spec}}",
            f"{row.speedup:.3f}x",
            *memory_cells(row)[: len(memory_header)],
        )
        for row, time, throughput in zip(rows, times, rates, strict=True)
    ]
    widths = [max(len(line[i]) for line in (header, *body)) for i in range(len(header))]
    lines = []
    for line in (header, *body):
        cells = [line[0].ljust(widths[0]), line[1].ljust(widths[1])]
        cells += [cell.rjust(width) for cell, width in zip(line[2:], widths[2:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
