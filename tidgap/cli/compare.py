"""``tidgap compare``: a plan against the best of each baseline."""

from __future__ import annotations

import click

from tidgap.analysis.bound import lower_bound
from tidgap.analysis.compare import ComparisonRow, compare, format_table, rows_as_dicts
from tidgap.cli.options import (
    about_problem,
    describe_problem,
    echo_json,
    json_option,
    output_options,
    problem_argument,
    run_note,
)
from tidgap.model.plan import load_plan
from tidgap.model.problem import load_problem
from tidgap.outputs.files import check_outputs, comparison_files, write_files
from tidgap.schedules.baselines import best_baselines
from tidgap.schedules.families import SCHEDULES, plan_timeline


def _bound_line(bound: float, rows: list[ComparisonRow], unit: str) -> str:
    """How far each schedule with a flush (its family's ``has_flush``) is above the lower
    bound; the bound says nothing of the others (1F1B, ordered plans, PipeDream)."""
    flush = [row for row in rows if SCHEDULES[row.family].has_flush]
    gaps = ", ".join(  # never below the bound but by rounding
        f"{row.schedule} +{max(row.iteration_time / bound - 1, 0.0):.2%}" for row in flush
    )
    return f"lower bound for any flush plan: {bound:.6g} {unit} ({gaps})"


@click.command(name="compare")
@problem_argument()
@click.argument("plan_file", metavar="[PLAN]", required=False)
@output_options
@json_option
def compare_command(
    problem: str, plan_file: str | None, gantt: str | None, trace: str | None, as_json: bool
) -> None:
    """PLAN (if given) against the best GPipe, 1F1B and PipeDream over every microbatch count,
    with each schedule's peak memory (held samples; bytes where the problem gives
    activation_bytes).

    --gantt draws PLAN above the best GPipe and the best 1F1B on one time axis.
    """
    check_outputs(gantt, trace, inputs={"PROBLEM": problem, "PLAN": plan_file})
    loaded = load_problem(problem)
    plan = load_plan(plan_file, loaded) if plan_file is not None else None
    with about_problem(problem):
        baselines = best_baselines(loaded)
    rows = compare(loaded, plan, baselines=baselines)
    bound = lower_bound(loaded)
    plans = [plan_timeline(loaded, plan)] if plan is not None else []
    written = write_files(comparison_files(loaded, plans, baselines, gantt, trace))
    if as_json:
        echo_json(
            {
                "problem": loaded.name,
                "time_unit": loaded.time_unit,
                "rows": rows_as_dicts(rows),
                "lower_bound": bound,
            }
        )
        return
    click.echo(describe_problem(loaded))
    click.echo(format_table(rows, loaded.time_unit))
    note = None if plan is None else run_note(loaded, plan)
    if note is not None:  # the table and the picture are the model's times
        click.echo(note)
    for line in [_bound_line(bound, rows, loaded.time_unit), *written]:
        click.echo(line)
