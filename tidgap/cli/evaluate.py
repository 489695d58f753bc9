"""``tidgap evaluate``: the time of a plan file or of a baseline, with its report."""

from __future__ import annotations

from typing import Any

import click

from tidgap.analysis.bound import lower_bound
from tidgap.analysis.report import format_report, report
from tidgap.cli.options import (
    describe_problem,
    echo_json,
    json_option,
    output_options,
    problem_argument,
)
from tidgap.model.errors import InputError
from tidgap.model.plan import load_plan
from tidgap.model.problem import Problem, load_problem
from tidgap.outputs.files import check_outputs, write_timelines
from tidgap.schedules.baselines import (
    SCHEDULES,
    baseline,
    equal_partition,
    require_feasible,
)
from tidgap.schedules.flush import evaluate
from tidgap.schedules.held import BASELINE_PEAK_HELD, peak_memory
from tidgap.schedules.timeline import TIMED_SCHEDULES, Timeline, baseline_timeline, plan_timeline


def _baseline_run(problem: Problem, schedule: str, m: int) -> tuple[float, Timeline | None]:
    """The iteration time of ``schedule`` with ``m`` microbatches and, if it has one, its
    timeline (one evaluation gives both)."""
    require_feasible(problem, m)
    if schedule in TIMED_SCHEDULES:
        timeline = baseline_timeline(problem, schedule, m)
        return timeline.iteration_time, timeline
    return baseline(problem, schedule, m).iteration_time, None


@click.command(name="evaluate")
@problem_argument()
@click.argument("plan_file", metavar="[PLAN]", required=False)
@click.option(
    "--schedule",
    type=click.Choice(SCHEDULES),
    help="Evaluate a baseline schedule instead of a plan file.",
)
@click.option(
    "--microbatches", "-m", type=int, metavar="M", help="Equal microbatch count for --schedule."
)
@output_options
@json_option
def evaluate_command(
    problem: str,
    plan_file: str | None,
    schedule: str | None,
    microbatches: int | None,
    gantt: str | None,
    trace: str | None,
    as_json: bool,
) -> None:
    """Iteration time of PLAN, or of a baseline with --schedule and --microbatches, with
    per-stage busy time, bubbles and the lower bound for any flush plan."""
    if plan_file is not None and schedule is not None:
        raise click.UsageError("give PLAN or --schedule, not both")
    if schedule is None and microbatches is not None:
        raise click.UsageError("--microbatches goes with --schedule")
    if plan_file is None and schedule is None:
        raise click.UsageError("give PLAN, or --schedule with --microbatches")
    if schedule is not None and microbatches is None:
        raise click.UsageError("--schedule requires --microbatches")
    if schedule is not None and schedule not in TIMED_SCHEDULES and (gantt or trace):
        raise InputError(
            f"{schedule} is a steady-state bound without a timeline; --gantt and --trace "
            f"take {' or '.join(TIMED_SCHEDULES)}",
            source="--schedule",
        )
    check_outputs(gantt, trace, inputs={"PROBLEM": problem, "PLAN": plan_file})
    loaded = load_problem(problem)
    if schedule is not None:
        _evaluate_baseline(loaded, schedule, microbatches, gantt, trace, as_json)
        return
    plan = load_plan(plan_file, loaded)
    evaluation = evaluate(loaded, plan)
    timeline = plan_timeline(loaded, plan)
    written = write_timelines([timeline], gantt, trace, loaded.name)
    if as_json:
        echo_json(evaluation.as_dict())
        return
    unit = loaded.time_unit
    click.echo(describe_problem(loaded))
    click.echo(
        f"iteration {evaluation.iteration_time:.6g} {unit}, throughput "
        f"{loaded.batch_size / evaluation.iteration_time:.6g} samples/{unit}, "
        f"forwards end at {evaluation.forward_end:.6g} {unit}"
    )
    for s in range(loaded.num_stages):
        click.echo(
            f"  {loaded.stage_name(s)}: forwards {plan.forward[s]} end "
            f"{evaluation.forward_ends[s]:.6g}, backwards {plan.backward[s]} end "
            f"{evaluation.backward_ends[s]:.6g}, tail {loaded.stages[s].tail:g}"
        )
    click.echo(f"  peak held (samples per stage): {evaluation.peak_held}")
    if evaluation.peak_memory is not None:
        over = evaluation.over_memory_limit
        click.echo(
            f"  peak memory (bytes per stage): {[f'{b:.4g}' for b in evaluation.peak_memory]}; "
            + (f"over the memory limit on stage(s) {over}" if over else "within every limit")
        )
    figures = report(timeline, lower_bound(loaded))
    for line in format_report(figures, timeline.stage_names, unit) + written:
        click.echo(line)


def _evaluate_baseline(
    problem: Problem,
    schedule: str,
    m: int,
    gantt: str | None,
    trace: str | None,
    as_json: bool,
) -> None:
    """``evaluate --schedule``: the baseline's time and, if it has a timeline, its report
    (with the lower bound for GPipe, a flush plan; 1F1B has no flush)."""
    time, timeline = _baseline_run(problem, schedule, m)
    written = [] if timeline is None else write_timelines([timeline], gantt, trace, problem.name)
    throughput = problem.batch_size / time
    document: dict[str, Any] = {
        "schedule": schedule,
        "microbatches": m,
        "iteration_time": time,
        "throughput": throughput,
    }
    if schedule in BASELINE_PEAK_HELD:
        held = BASELINE_PEAK_HELD[schedule](problem, equal_partition(problem, m))
        document["peak_held"] = held
        memory = peak_memory(problem, held)
        if memory is not None:
            document["peak_memory"], document["over_memory_limit"] = memory
    if as_json:
        echo_json(document)
        return
    click.echo(describe_problem(problem))
    click.echo(
        f"{schedule}({m}): iteration {time:.6g} {problem.time_unit}, throughput "
        f"{throughput:.6g} samples/{problem.time_unit}"
    )
    if "peak_held" in document:
        click.echo(f"  peak held (samples per stage): {document['peak_held']}")
    if timeline is not None:
        bound = lower_bound(problem) if schedule == "gpipe" else None
        figures = report(timeline, bound)
        written = format_report(figures, timeline.stage_names, problem.time_unit) + written
    for line in written:
        click.echo(line)
