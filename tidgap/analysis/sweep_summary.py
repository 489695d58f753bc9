"""The summary of a sweep (``tidgap sweep``): one row per problem, as JSON, CSV and text."""

from __future__ import annotations

import csv
import io
from typing import Any

from tidgap.analysis.search_summary import beyond_limit, same_time
from tidgap.model.lists import compact_sizes
from tidgap.model.text import without_surrogates
from tidgap.optimize.memory import format_bytes
from tidgap.optimize.results import SearchResult
from tidgap.optimize.run_memory import run_evaluated

#: The summary's columns, in order (``summary.csv``'s header, each ``summary.json`` row's keys).
#: ``summary.json``'s format tag (its ``problems``: one :func:`sweep_row` per problem).
SWEEP_FORMAT = "tidgap.sweep/1"
#: ``summary.csv``'s columns, in order: :func:`sweep_row`'s keys.
COLUMNS = (
    "problem",
    "name",
    "plan_file",
    "schedule",
    "backward",
    "time_unit",
    "gpipe_time",
    "gpipe_microbatches",
    "gpipe_over_limit",
    "1f1b_time",
    "1f1b_microbatches",
    "1f1b_over_limit",
    "plan_time",
    "run_time",
    "gain_over_1f1b_pct",
    "gain_over_gpipe_pct",
    "peak_held",
    "peak_memory",
    "run_peak_memory",
    "wall_time",
)


def gain_pct(baseline_time: float, plan_time: float) -> float:
    """How much faster the plan is than the baseline, in %: ``(baseline / plan - 1) * 100``
    (negative when the baseline is faster; 0 for :func:`same_time` times)."""
    if same_time(baseline_time, plan_time):
        return 0.0
    return (baseline_time / plan_time - 1) * 100


def sweep_row(
    problem: str, plan_file: str, result: SearchResult, run_time: float
) -> dict[str, Any]:
    """One problem's row: ``problem`` as given, the plan's file (both with a byte that is
    not UTF-8 as U+FFFD: :func:`~tidgap.model.text.without_surrogates`), the search's schedule and
    backward rule, the best GPipe and 1F1B (time in ``time_unit``, microbatches, whether it
    holds more than the memory limit in force allows on some stage), the plan's
    time (the model's), ``run_time`` (``tidgap run``'s prediction for it, the same unit),
    its gains over the baselines as the search priced them all, its peak per stage in the
    model (``peak_held`` samples; ``peak_memory`` bytes or ``None`` without
    ``activation_bytes``), the bytes ``tidgap run`` holds (``run_peak_memory``: the model's
    where the profile does not say, ``source.memory``) and the search's wall time
    (seconds)."""
    gpipe, one_f_one_b = result.baselines["gpipe"], result.baselines["1f1b"]
    model = result.model_evaluation
    priced = result.evaluation.iteration_time  # as the baselines were priced
    memory = model.peak_memory
    held = run_evaluated(result.problem, result.plan, model).peak_memory
    return {
        "problem": without_surrogates(problem),
        "name": result.problem.name,
        "plan_file": without_surrogates(plan_file),
        "schedule": result.schedule,
        "backward": result.backward,
        "time_unit": result.problem.time_unit,
        "gpipe_time": gpipe.iteration_time,
        "gpipe_microbatches": gpipe.microbatches,
        "gpipe_over_limit": beyond_limit(result, gpipe),
        "1f1b_time": one_f_one_b.iteration_time,
        "1f1b_microbatches": one_f_one_b.microbatches,
        "1f1b_over_limit": beyond_limit(result, one_f_one_b),
        "plan_time": model.iteration_time,
        "run_time": run_time,
        "gain_over_1f1b_pct": gain_pct(one_f_one_b.iteration_time, priced),
        "gain_over_gpipe_pct": gain_pct(gpipe.iteration_time, priced),
        "peak_held": list(model.peak_held),
        "peak_memory": None if memory is None else list(memory),
        "run_peak_memory": None if held is None else list(held),
        "wall_time": round(result.wall_time, 3),
    }


def _cell(value: Any) -> str:
    """A CSV cell: a per-stage list as its values joined by spaces, ``None`` empty, a
    boolean ``true`` or ``false``."""
    if value is None:
        return ""
    if isinstance(value, bool):  # as summary.json writes it
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(map(str, value))
    return str(value)


def summary_csv(rows: list[dict[str, Any]]) -> str:
    """``summary.csv``: the header :data:`COLUMNS`, then one line per row."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows([_cell(row[column]) for column in COLUMNS] for row in rows)
    return buffer.getvalue()


def _peak(row: dict[str, Any]) -> str:
    """Peak per stage: bytes where the problem gives them (and what the run holds, where
    that differs), else samples held."""
    memory, held = row["peak_memory"], row["run_peak_memory"]
    if memory is None:
        return compact_sizes(row["peak_held"])
    text = " ".join(format_bytes(b) for b in memory)
    if held is None or held == memory:
        return text
    return f"{text} (run {' '.join(format_bytes(b) for b in held)})"


def _baseline(row: dict[str, Any], name: str) -> str:
    """A best baseline's time and microbatches, marked where it is over the memory limit."""
    over = ", over limit" if row[f"{name}_over_limit"] else ""
    return f"{row[f'{name}_time']:.6g} (m={row[f'{name}_microbatches']}{over})"


def format_sweep_table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width text table of ``rows``: times in each problem's unit (the plan's in the
    model and as ``tidgap run`` predicts it), gains in %."""
    header = (
        "problem", "plan", "as run", "best GPipe", "best 1F1B", "vs 1F1B", "vs GPipe", "peak",
        "wall",
    )  # fmt: skip
    body = [
        (
            row["problem"],
            f"{row['plan_time']:.6g} {row['time_unit']}",
            f"{row['run_time']:.6g}",
            _baseline(row, "gpipe"),
            _baseline(row, "1f1b"),
            f"{row['gain_over_1f1b_pct']:+.2f}%",
            f"{row['gain_over_gpipe_pct']:+.2f}%",
            _peak(row),
            f"{row['wall_time']:.1f} s",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in (header, *body)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (header, *body)
    )
