"""``tidgap compare``: a plan against the best of each baseline."""

from __future__ import annotations

import click

from tidgap.analysis.bound import lower_bound
from tidgap.analysis.compare import ComparisonRow, compare, format_table, rows_as_dicts
from tidgap.analysis.limit_marks import LimitMarks
from tidgap.backends.ticks import MODEL_PRICING, RUN_PRICING
from tidgap.cli.options import (
    about_problem,
    describe_problem,
    echo_json,
    json_option,
    output_options,
    pricing_option,
    problem_argument,
    run_note,
)
from tidgap.cli.search import MemoryLimit
from tidgap.model.plan import Plan, load_plan
from tidgap.model.problem import Problem, load_problem
from tidgap.optimize.limits import limit_in_force
from tidgap.optimize.optimizer import AUTO_PRICING, DEFAULT_SCHEDULE, resolved_pricing
from tidgap.optimize.run_memory import run_evaluated
from tidgap.optimize.windowed_driver import counts_run_memory
from tidgap.optimize.windowed_seeds import one_f_one_b_level
from tidgap.outputs.files import check_outputs, comparison_files, plan_timelines, write_files
from tidgap.runtime.pricing import plan_pricing, run_priced_baselines
from tidgap.schedules.baselines import BaselineResult, best_baselines
from tidgap.schedules.families import SCHEDULES

#: What the text says of rows priced as ``tidgap run`` runs plans.
RUN_PRICED_LINE = "priced as tidgap run runs and holds plans (--pricing run)"


def _bound_line(bound: float, rows: list[ComparisonRow], unit: str) -> str:
    """How far each schedule with a flush (its family's ``has_flush``) is above the lower
    bound; the bound says nothing of the others (1F1B, ordered plans, PipeDream)."""
    flush = [row for row in rows if SCHEDULES[row.family].has_flush]
    gaps = ", ".join(  # never below the bound but by rounding
        f"{row.schedule} +{max(row.iteration_time / bound - 1, 0.0):.2%}" for row in flush
    )
    return f"lower bound for any flush plan: {bound:.6g} {unit} ({gaps})"


def compared_pricing(problem: Problem, pricing: str, plan: Plan | None) -> str:
    """``pricing`` (:data:`AUTO_PRICING` or one of
    :data:`~tidgap.backends.ticks.PRICINGS`) resolved: ``auto`` as the default of the search
    that writes ``plan``'s file (a flush plan, without ``order`` and ``windows``: the
    model's; an ordered plan, or no plan: ``run`` where ``tidgap calibrate`` timed the
    problem), any other as given. A windowed search writes an order also where it is the
    flush order, which :func:`~tidgap.schedules.families.family_of` calls flush."""
    if pricing != AUTO_PRICING:
        return pricing
    flush = plan is not None and plan.order_field is None
    return resolved_pricing(problem, pricing, "flush" if flush else DEFAULT_SCHEDULE)


def echo_text(
    problem: Problem,
    plan: Plan | None,
    rows: list[ComparisonRow],
    pricing: str,
    written: list[str],
) -> None:
    """The table (after the line saying it is run-priced, where ``pricing`` is), the note
    on how ``tidgap run`` runs ``plan`` otherwise, the flush bound's line (model-priced
    only: a bound at model.md's op times) and the files ``written``."""
    run_priced = pricing == RUN_PRICING
    click.echo(describe_problem(problem))
    if run_priced:
        click.echo(RUN_PRICED_LINE)
    click.echo(format_table(rows, problem.time_unit))
    note = None if plan is None else run_note(problem, plan, pricing)
    if note is not None:  # the table and the picture are the model's times
        click.echo(note)
    if not run_priced:
        click.echo(_bound_line(lower_bound(problem), rows, problem.time_unit))
    for line in written:
        click.echo(line)


def priced_baselines(problem: Problem, pricing: str) -> dict[str, BaselineResult]:
    """The best of each baseline over every microbatch count, timed by ``pricing`` (one of
    :data:`~tidgap.backends.ticks.PRICINGS`), as a search so priced reports them."""
    baselines = best_baselines(problem)
    return run_priced_baselines(problem, baselines) if pricing == RUN_PRICING else baselines


@click.command(name="compare")
@problem_argument()
@click.argument("plan_file", metavar="[PLAN]", required=False)
@pricing_option(
    "How the rows are timed and their memory counted. model: model.md's op times and "
    "held samples. run: as tidgap run runs and holds them (its recomputation, the "
    "calibration's op costs, the profile's source.memory). auto: as tidgap search's default "
    "for such a plan file (a flush plan: model; a plan with order or windows, which a "
    "windowed search writes, or no PLAN: run where tidgap calibrate timed the problem, else "
    "model); a plan searched with --pricing compares with the same.",
)
@click.option(
    "--memory-limit",
    type=MemoryLimit(),
    help="Mark the rows over this limit too, as tidgap search's table does (1f1b: what the "
    "best 1F1B holds on each stage; or bytes per stage, 24GiB, 80GB), counting memory as "
    "--pricing does (run: the bytes tidgap run holds); the rows' own stage limits are "
    "marked always.",
)
@output_options
@json_option
def compare_command(
    problem: str,
    plan_file: str | None,
    pricing: str,
    memory_limit: str | int | None,
    gantt: str | None,
    trace: str | None,
    as_json: bool,
) -> None:
    """PLAN (if given) against the best GPipe, 1F1B and PipeDream over every microbatch count,
    with each schedule's peak memory (held samples; bytes where the problem gives
    activation_bytes).

    --gantt draws PLAN above the best GPipe and the best 1F1B on one time axis.
    """
    check_outputs(gantt, trace, inputs={"PROBLEM": problem, "PLAN": plan_file})
    loaded = load_problem(problem)
    plan = load_plan(plan_file, loaded) if plan_file is not None else None
    priced = compared_pricing(loaded, pricing, plan)
    run_priced = priced == RUN_PRICING
    with about_problem(problem):
        baselines = priced_baselines(loaded, priced)
        marks = None
        if memory_limit is not None:
            one_f_one_b = one_f_one_b_level(loaded, baselines["1f1b"])
            limit = limit_in_force(loaded, memory_limit, one_f_one_b)
            counted = RUN_PRICING if counts_run_memory(loaded, priced) else MODEL_PRICING
            marks = LimitMarks.of(loaded, limit, counted, baselines["1f1b"])
        rows = compare(
            loaded,
            plan,
            baselines=baselines,
            price=plan_pricing(priced),
            held=run_evaluated if run_priced else None,
            over=None if marks is None else marks.over,
        )
    plans = plan_timelines(loaded, plan, run_priced, gantt is not None or trace is not None)
    written = write_files(comparison_files(loaded, plans, baselines, gantt, trace, run_priced))
    if as_json:
        echo_json(
            {
                "problem": loaded.name,
                "time_unit": loaded.time_unit,
                "pricing": priced,
                "rows": rows_as_dicts(rows),
                "lower_bound": lower_bound(loaded),
            }
        )
        return
    echo_text(loaded, plan, rows, priced, written)
