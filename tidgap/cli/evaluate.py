"""``tidgap evaluate``: the time of a plan file (flush or ordered) or of a baseline, with
its report and memory."""

from __future__ import annotations

from typing import Any

import click

from tidgap.analysis.bound import lower_bound
from tidgap.analysis.compare import throughput_text
from tidgap.analysis.report import format_report, report
from tidgap.cli.options import (
    describe_problem,
    echo_json,
    json_option,
    output_options,
    problem_argument,
    run_note,
)
from tidgap.model.errors import InputError
from tidgap.model.lists import compact_sizes, stage_list
from tidgap.model.plan import load_plan
from tidgap.model.problem import Problem, load_problem
from tidgap.optimize.memory import format_bytes
from tidgap.optimize.run_memory import run_evaluated
from tidgap.outputs.files import check_outputs, timeline_files, write_files
from tidgap.schedules.baselines import require_feasible
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import (
    BASELINE_NAMES,
    SCHEDULES,
    TIMED_BASELINES,
    baseline_evaluation,
    baseline_timeline,
    evaluate,
    family_of,
    plan_timeline,
)

#: Most forward steps (stages times microbatches) of one ``--schedule`` run, evaluated and
#: timed step by step (about a minute and 1 GB at this size).
MAX_BASELINE_RUN_STEPS = 10**6


def memory_lines(evaluation: Evaluation, run: Evaluation | None = None) -> list[str]:
    """``peak held`` per stage (samples) and, where the problem gives ``activation_bytes``,
    ``peak memory`` (bytes) with the stages over their limit; then the same as ``tidgap
    run`` holds the plan where ``run`` (:func:`~tidgap.optimize.run_memory.run_evaluated`)
    says otherwise (the profile's ``source.memory``: a stage's graphs hold more than its
    samples' activations, a recomputing stage less)."""
    lines = [f"  peak held (samples per stage): {compact_sizes(evaluation.peak_held)}"]
    if evaluation.peak_memory is not None:
        lines.append(f"  peak memory per stage: {_memory_text(evaluation)}")
    if run is not None and run.peak_memory != evaluation.peak_memory:
        lines.append(f"  as tidgap run holds it (source.memory): {_memory_text(run)}")
    return lines


def _memory_text(evaluation: Evaluation) -> str:
    """``1.2 MB, 640 kB; within every limit`` (or ``over the memory limit on stage 0``)."""
    over = evaluation.over_memory_limit
    within = f"over the memory limit on {stage_list(over)}" if over else "within every limit"
    return f"{', '.join(map(format_bytes, evaluation.peak_memory or []))}; {within}"


@click.command(name="evaluate")
@problem_argument()
@click.argument("plan_file", metavar="[PLAN]", required=False)
@click.option(
    "--schedule",
    type=click.Choice(BASELINE_NAMES),
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
    per-stage busy time, bubbles, peak memory and the lower bound for any flush plan; for a
    plan tidgap run runs at other op costs (recomputation, backwards over several stored
    forward chunks), also the time tidgap run predicts, and where the profile says what
    stages hold (source.memory), the bytes each holds when run (in the text; --json prints
    the model's evaluation only, as search writes it as the plan's predicted)."""
    if plan_file is not None and schedule is not None:
        raise click.UsageError("give PLAN or --schedule, not both")
    if schedule is None and microbatches is not None:
        raise click.UsageError("--microbatches goes with --schedule")
    if plan_file is None and schedule is None:
        raise click.UsageError("give PLAN, or --schedule with --microbatches")
    if schedule is not None and microbatches is None:
        raise click.UsageError("--schedule requires --microbatches")
    if schedule is not None and not SCHEDULES[schedule].has_timeline and (gantt or trace):
        raise InputError(
            f"{schedule} is a steady-state bound without a timeline; --gantt and --trace "
            f"take {' or '.join(TIMED_BASELINES)}",
            source="--schedule",
        )
    check_outputs(gantt, trace, inputs={"PROBLEM": problem, "PLAN": plan_file})
    loaded = load_problem(problem)
    if schedule is not None:
        _evaluate_baseline(loaded, schedule, microbatches, gantt, trace, as_json)
        return
    plan = load_plan(plan_file, loaded)
    family = family_of(plan)
    evaluation = evaluate(loaded, plan)
    timeline = plan_timeline(loaded, plan)
    written = write_files(timeline_files([timeline], gantt, trace, loaded.name))
    if as_json:
        echo_json(evaluation.as_dict())
        return
    unit = loaded.time_unit
    click.echo(describe_problem(loaded))
    click.echo(
        f"iteration {evaluation.iteration_time:.6g} {unit}, throughput "
        f"{throughput_text(loaded.batch_size, evaluation.iteration_time, unit)}, "
        f"forwards end at {evaluation.forward_end:.6g} {unit}"
    )
    note = run_note(loaded, plan)
    if note is not None:
        click.echo(note)
    order = plan.stage_order()
    for s in range(loaded.num_stages):
        ordered = "" if plan.order_field is None else f", order {order.stages[s]}"
        click.echo(
            f"  {loaded.stage_name(s)}: forwards {compact_sizes(plan.forward[s])} end "
            f"{evaluation.forward_ends[s]:.6g}, backwards {compact_sizes(plan.backward[s])} end "
            f"{evaluation.backward_ends[s]:.6g}, tail {loaded.stages[s].tail:g}{ordered}"
        )
    bound = lower_bound(loaded) if family.has_flush else None
    figures = report(timeline, bound)
    run = run_evaluated(loaded, plan, evaluation)
    lines = memory_lines(evaluation, run) + format_report(figures, timeline.stage_names, unit)
    for line in lines + written:
        click.echo(line)


def _evaluate_baseline(
    problem: Problem,
    schedule: str,
    m: int,
    gantt: str | None,
    trace: str | None,
    as_json: bool,
) -> None:
    """``evaluate --schedule``: the baseline's time, what it holds and, if it has a
    timeline, its report (with the lower bound where the flush bound holds)."""
    require_feasible(problem, m)
    steps = problem.num_stages * m
    if steps > MAX_BASELINE_RUN_STEPS:
        raise InputError(
            f"{m} microbatches on {problem.num_stages} stage(s) are {steps} forward steps, "
            f"more than the {MAX_BASELINE_RUN_STEPS:,} one evaluation takes",
            source="--microbatches",
        )
    family = SCHEDULES[schedule]
    evaluation = baseline_evaluation(problem, schedule, m)
    time = family.time(problem, m) if evaluation is None else evaluation.iteration_time
    timeline = baseline_timeline(problem, schedule, m) if family.has_timeline else None
    files = [] if timeline is None else timeline_files([timeline], gantt, trace, problem.name)
    written = write_files(files)
    throughput = problem.batch_size / time
    document: dict[str, Any] = {
        "schedule": schedule,
        "microbatches": m,
        "iteration_time": time,
        "throughput": throughput,
    }
    if evaluation is not None:
        memory = evaluation.as_dict()
        document.update({key: memory[key] for key in memory if key not in document})
    if as_json:
        echo_json(document)
        return
    click.echo(describe_problem(problem))
    click.echo(
        f"{schedule}({m}): iteration {time:.6g} {problem.time_unit}, throughput "
        f"{throughput_text(problem.batch_size, time, problem.time_unit)}"
    )
    lines = []
    if evaluation is not None:
        plan = family.baseline(problem, m)
        lines = memory_lines(evaluation, run_evaluated(problem, plan, evaluation))
    if timeline is not None:
        bound = lower_bound(problem) if family.has_flush else None
        figures = report(timeline, bound)
        lines += format_report(figures, timeline.stage_names, problem.time_unit)
    for line in lines + written:
        click.echo(line)
