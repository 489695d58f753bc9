"""The ``tidgap`` command line: thin click commands over the Python API.

Bad input or usage prints one line, ``tidgap: error: FILE: FIELD: reason``, and exits 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from tidgap import __version__
from tidgap.atomic import write_text_atomically
from tidgap.backends import BACKENDS, cpu_backend
from tidgap.bound import lower_bound
from tidgap.cli_profile import profile_command, synth_command
from tidgap.compare import ComparisonRow, compare, format_table, rows_as_dicts
from tidgap.errors import InputError
from tidgap.examples import DEFAULT_EXAMPLE, EXAMPLE_PREFIX, example_names, example_summary
from tidgap.exports import (
    lowered_plan,
    microbatches_document,
    microbatches_path,
    pytorch_csv,
    schedule_document,
)
from tidgap.gpu import gpu_unusable_reason
from tidgap.oracle import evaluate
from tidgap.outputs import check_outputs, write_json, write_timelines, writing
from tidgap.plan import Plan, load_plan
from tidgap.planner import search
from tidgap.problem import Problem, load_problem
from tidgap.progress import ProgressLine
from tidgap.report import format_report, report, summary
from tidgap.schedules import (
    SCHEDULES,
    BaselineResult,
    baseline,
    best_baselines,
    require_feasible,
)
from tidgap.timeline import TIMED_SCHEDULES, Timeline, baseline_timeline, plan_timeline

Command = Callable[..., Any]

#: Seconds ``tidgap search`` runs when neither --time-limit nor --generations is given.
DEFAULT_TIME_LIMIT = 10.0


class TidgapGroup(click.Group):
    """A click group whose errors are one line on stderr with exit status 2."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        try:
            status = super().main(*args, standalone_mode=False, **kwargs)
        except InputError as error:
            _fail(str(error))
        except click.UsageError as error:
            context = f"{error.ctx.info_name}: " if error.ctx and error.ctx.parent else ""
            _fail(f"{context}{error.format_message()}")
        except click.ClickException as error:
            click.echo(f"tidgap: error: {error.format_message()}", err=True)
            sys.exit(error.exit_code)
        except click.Abort:
            click.echo("tidgap: aborted", err=True)
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)


def _fail(message: str) -> None:
    click.echo(f"tidgap: error: {message}", err=True)
    sys.exit(2)


def problem_argument(required: bool = True) -> Callable[[Command], Command]:
    """The ``PROBLEM`` argument: a problem file, or ``example:NAME`` for a built-in one."""
    return click.argument("problem", metavar="PROBLEM", required=required)


def json_option(command: Command) -> Command:
    """``--json``: print one JSON object instead of text."""
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")(command)


def _echo_json(document: object) -> None:
    click.echo(json.dumps(document, allow_nan=False))


def _describe_problem(problem: Problem) -> str:
    return (
        f"{problem.name}: {problem.num_stages} stage(s), batch_size {problem.batch_size}, "
        f"unit {problem.unit}"
    )


@click.group(cls=TidgapGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tidgap")
def cli() -> None:
    """Plan pipeline-parallel training with unequal, per-stage microbatch partitions.

    PROBLEM is a tidgap.problem/1 file or example:NAME (see `tidgap examples`).
    """


def output_options(command: Command) -> Command:
    """``--gantt FILE.png|.svg`` and ``--trace FILE.json``: picture and trace of the run."""
    command = click.option(
        "--trace",
        type=click.Path(dir_okay=False),
        help="Write a Chrome trace (Perfetto, chrome://tracing): a track per stage and link.",
    )(command)
    return click.option(
        "--gantt",
        type=click.Path(dir_okay=False),
        help="Draw the timeline to FILE.png or FILE.svg (compare, search: above the best "
        "GPipe and 1F1B); needs matplotlib (tidgap[plot]).",
    )(command)


def _baseline_run(problem: Problem, schedule: str, m: int) -> tuple[float, Timeline | None]:
    """The iteration time of ``schedule`` with ``m`` microbatches and, if it has one, its
    timeline (one evaluation gives both)."""
    require_feasible(problem, m)
    if schedule in TIMED_SCHEDULES:
        timeline = baseline_timeline(problem, schedule, m)
        return timeline.iteration_time, timeline
    return baseline(problem, schedule, m).iteration_time, None


@cli.command(name="evaluate")
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
    check_outputs(gantt, trace)
    loaded = load_problem(problem)
    if schedule is not None:
        _evaluate_baseline(loaded, schedule, microbatches, gantt, trace, as_json)
        return
    plan = load_plan(plan_file, loaded)
    evaluation = evaluate(loaded, plan)
    timeline = plan_timeline(loaded, plan)
    written = write_timelines([timeline], gantt, trace, loaded.name)
    if as_json:
        _echo_json(evaluation.as_dict())
        return
    unit = loaded.time_unit
    click.echo(_describe_problem(loaded))
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
    if as_json:
        _echo_json(
            {
                "schedule": schedule,
                "microbatches": m,
                "iteration_time": time,
                "throughput": throughput,
            }
        )
        return
    click.echo(_describe_problem(problem))
    click.echo(
        f"{schedule}({m}): iteration {time:.6g} {problem.time_unit}, throughput "
        f"{throughput:.6g} samples/{problem.time_unit}"
    )
    if timeline is not None:
        bound = lower_bound(problem) if schedule == "gpipe" else None
        figures = report(timeline, bound)
        written = format_report(figures, timeline.stage_names, problem.time_unit) + written
    for line in written:
        click.echo(line)


def _write_comparison(
    problem: Problem,
    plans: list[Timeline],
    baselines: dict[str, BaselineResult],
    gantt: str | None,
    trace: str | None,
) -> list[str]:
    """Picture and trace (where asked) of ``plans`` above the best GPipe and 1F1B."""
    if gantt is None and trace is None:
        return []
    timelines = plans + [
        baseline_timeline(problem, name, baselines[name].microbatches) for name in TIMED_SCHEDULES
    ]
    return write_timelines(timelines, gantt, trace, problem.name)


def _bound_line(bound: float, rows: list[ComparisonRow], unit: str) -> str:
    """How far each schedule with a flush is above the lower bound."""
    flush = [row for row in rows if row.schedule not in ("1f1b", "pipedream")]
    gaps = ", ".join(f"{row.schedule} +{row.iteration_time / bound - 1:.2%}" for row in flush)
    return f"lower bound for any flush plan: {bound:.6g} {unit} ({gaps})"


@cli.command(name="compare")
@problem_argument()
@click.argument("plan_file", metavar="[PLAN]", required=False)
@output_options
@json_option
def compare_command(
    problem: str, plan_file: str | None, gantt: str | None, trace: str | None, as_json: bool
) -> None:
    """PLAN (if given) against the best GPipe, 1F1B and PipeDream over every microbatch count.

    --gantt draws PLAN above the best GPipe and the best 1F1B on one time axis.
    """
    check_outputs(gantt, trace)
    loaded = load_problem(problem)
    plan = load_plan(plan_file, loaded) if plan_file is not None else None
    baselines = best_baselines(loaded)
    rows = compare(loaded, plan, baselines=baselines)
    bound = lower_bound(loaded)
    plans = [plan_timeline(loaded, plan)] if plan is not None else []
    written = _write_comparison(loaded, plans, baselines, gantt, trace)
    if as_json:
        _echo_json(
            {
                "problem": loaded.name,
                "time_unit": loaded.time_unit,
                "rows": rows_as_dicts(rows),
                "lower_bound": bound,
            }
        )
        return
    click.echo(_describe_problem(loaded))
    click.echo(format_table(rows, loaded.time_unit))
    for line in [_bound_line(bound, rows, loaded.time_unit), *written]:
        click.echo(line)


@cli.command(name="examples")
@json_option
def examples_command(as_json: bool) -> None:
    """List the built-in problems (use them as example:NAME)."""
    summaries = [example_summary(name) for name in example_names()]
    if as_json:
        _echo_json(summaries)
        return
    for item in summaries:
        click.echo(
            f"example:{item['name']:<12} {item['stages']} stages, batch {item['batch_size']}, "
            f"unit {item['unit']}  {item['description']}"
        )


def _compact(sizes: list[int]) -> str:
    """``[8, 8, 8, 16]`` -> ``8x3 16``: runs of equal sizes collapsed."""
    runs: list[list[int]] = []
    for size in sizes:
        if runs and runs[-1][0] == size:
            runs[-1][1] += 1
        else:
            runs.append([size, 1])
    return " ".join(f"{size}x{count}" if count > 1 else str(size) for size, count in runs)


def _chosen_backend(backend: str, gpu: bool, cpu: bool) -> str:
    """The backend named by ``--backend``, ``--gpu`` or ``--cpu``; bad usage exits 2."""
    if sum([gpu, cpu, backend != "auto"]) > 1:
        raise click.UsageError("give one of --backend, --gpu and --cpu")
    if gpu or backend == "cuda":
        reason = gpu_unusable_reason()
        if reason is not None:
            raise InputError(f"no usable GPU: {reason}", source="--gpu" if gpu else "--backend")
        return "cuda"
    if cpu:
        return cpu_backend()
    return backend


@cli.command(name="search")
@problem_argument(required=False)
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option(
    "--generations",
    type=click.IntRange(min=0),
    help="Stop after this many generations. With a seed, gives the same plan every run.",
)
@click.option(
    "--time-limit",
    type=click.FloatRange(min=0),
    help="Stop after this many seconds (default 10 unless --generations is given). "
    "A time limit may stop at a different generation on a busier machine, so the plan "
    "can differ between runs; use --generations for reproducible plans.",
)
@click.option(
    "--stagnation",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Stop after this many generations without improvement.",
)
@click.option(
    "--population",
    type=click.IntRange(min=8),
    default=512,
    show_default=True,
    help="Individuals per generation.",
)
@click.option(
    "--max-microbatches",
    type=click.IntRange(min=1),
    help="Most microbatches per stage and direction (default 64, raised if a baseline "
    "or the caps need more; at most batch_size/unit).",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", *BACKENDS]),
    default="auto",
    show_default=True,
    help="Evaluation backend; auto picks the GPU when usable, else numba, else numpy.",
)
@click.option(
    "--gpu", is_flag=True, help="Use the CUDA backend; exit 2 saying why if no GPU is usable."
)
@click.option("--cpu", is_flag=True, help="Use the fastest CPU backend (numba, else numpy).")
@click.option(
    "--same-partition",
    is_flag=True,
    help="Give every stage the same partition (one per direction): plans that runtimes "
    "with variable microbatch sizes but one partition (Megatron, DynaPipe) run as is.",
)
@click.option("--out", type=click.Path(dir_okay=False), help="Write the plan (tidgap.plan/1) here.")
@output_options
@click.option("--quiet", "-q", is_flag=True, help="No progress line, no table: the summary only.")
@json_option
def search_command(
    problem: str | None,
    seed: int,
    generations: int | None,
    time_limit: float | None,
    stagnation: int,
    population: int,
    max_microbatches: int | None,
    backend: str,
    gpu: bool,
    cpu: bool,
    same_partition: bool,
    out: str | None,
    gantt: str | None,
    trace: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Search per-stage forward and backward partitions with the least iteration time.

    PROBLEM defaults to the built-in example gpt1-14.
    """
    backend = _chosen_backend(backend, gpu, cpu)
    loaded = load_problem(problem or EXAMPLE_PREFIX + DEFAULT_EXAMPLE)
    check_outputs(gantt, trace, out)
    if time_limit is None and generations is None:
        time_limit = DEFAULT_TIME_LIMIT
    show_progress = not (quiet or as_json) and sys.stderr.isatty()
    progress = ProgressLine(loaded.time_unit) if show_progress else None
    try:
        result = search(
            loaded,
            seed=seed,
            population=population,
            generations=generations,
            time_limit=time_limit,
            stagnation=stagnation,
            backend=backend,
            max_microbatches=max_microbatches,
            on_progress=progress,
            same_partition=same_partition,
        )
    finally:
        if progress is not None:
            progress.close()
    document = result.plan_document()
    if out is not None:
        write_json(out, document)
    timeline = plan_timeline(loaded, result.plan, label="tidgap")
    written = _write_comparison(loaded, [timeline], result.baselines, gantt, trace)
    if as_json:
        _echo_json(document)
        return
    unit = loaded.time_unit
    click.echo(_describe_problem(loaded))
    click.echo(
        f"best plan: iteration {result.evaluation.iteration_time:.6g} {unit}, "
        f"{result.speedup_over_gpipe:.3f}x best GPipe "
        f"({result.generations} generations, {result.evaluations} evaluations, "
        f"{result.wall_time:.1f} s, {result.backend}, stopped on {result.stop_reason})"
    )
    click.echo(f"  {summary(report(timeline, lower_bound(loaded)), unit)}")
    if quiet:
        return
    for s in range(loaded.num_stages):
        click.echo(
            f"  {loaded.stage_name(s)}: F {_compact(result.plan.forward[s])} | "
            f"B {_compact(result.plan.backward[s])}"
        )
    rows = compare(
        loaded,
        result.plan,
        label="tidgap",
        baselines=result.baselines,
        heuristics=result.heuristics,
    )
    click.echo(format_table(rows, unit))
    if out is not None:
        click.echo(f"plan written to {out}")
    for line in written:
        click.echo(line)


EXPORTS = ("pytorch-csv", "same-partition", "json-schedule")


@cli.command(name="export")
@problem_argument()
@click.argument("plan_file", metavar="PLAN")
@click.option("--to", "target", type=click.Choice(EXPORTS), help="What to write (see above).")
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="Write it here.")
@click.option("--seed", type=int, help="same-partition: random seed (default 0).")
@click.option(
    "--generations", type=click.IntRange(min=0), help="same-partition: stop after G generations."
)
@click.option(
    "--time-limit",
    type=click.FloatRange(min=0),
    help="same-partition: stop after this many seconds (default 10 unless --generations).",
)
def export_command(
    problem: str,
    plan_file: str,
    target: str | None,
    out: str,
    seed: int | None,
    generations: int | None,
    time_limit: float | None,
) -> None:
    """Write PLAN for other runtimes and tools.

    PROBLEM comes first, as in `tidgap evaluate`: a plan file names its problem but does
    not hold it (the issue's `tidgap export PLAN --to ...` cannot work without it).

    \b
    pytorch-csv     the compute-only schedule CSV that torch.distributed.pipelining
                    loads (_load_csv; a row per rank, cells like 0F3, 1B0) for PLAN
                    lowered to one common partition, with OUT's .microbatches.json
                    sidecar: every microbatch's samples and both predicted times
    same-partition  the best plan whose partition is the same on every stage (the
                    search of `tidgap search --same-partition`, seeded with PLAN
                    lowered), which Megatron (variable sequence lengths) or DynaPipe
                    can run as is; writes a tidgap.plan/1
    json-schedule   tidgap.schedule/1: per stage, the ordered operations with start
                    and end times, sample ranges and the transfers it sends
    """
    if target is None:
        raise click.UsageError(f"missing option --to ({', '.join(EXPORTS)})")
    if target != "same-partition" and (seed, generations, time_limit) != (None, None, None):
        raise click.UsageError("--seed, --generations and --time-limit go with --to same-partition")
    sidecar = str(microbatches_path(out)) if target == "pytorch-csv" else None
    check_outputs(None, None, out, sidecar)
    loaded = load_problem(problem)
    plan = load_plan(plan_file, loaded)
    if target == "json-schedule":
        timeline = plan_timeline(loaded, plan)
        write_json(out, schedule_document(loaded, timeline))
        click.echo(
            f"schedule of the plan (iteration {timeline.iteration_time:.6g} "
            f"{loaded.time_unit}) written to {out}"
        )
    elif target == "pytorch-csv":
        _export_pytorch_csv(loaded, plan, out, sidecar)
    else:
        _export_same_partition(loaded, plan, out, seed, generations, time_limit)


def _export_pytorch_csv(problem: Problem, plan: Plan, out: str, sidecar: str) -> None:
    """The CSV of PLAN lowered to its common refinement, and the sidecar beside it."""
    common = lowered_plan(plan)
    sizes = common.forward[0]
    evaluation = evaluate(problem, plan)
    lowered = evaluate(problem, common)
    with writing(out):
        write_text_atomically(out, pytorch_csv(problem.num_stages, len(sizes)))
    write_json(sidecar, microbatches_document(problem, sizes, evaluation, lowered, out))
    unit = problem.time_unit
    click.echo(
        f"lowered to one partition of {len(sizes)} microbatches (every stage's boundaries): "
        f"iteration {lowered.iteration_time:.6g} {unit}, plan "
        f"{evaluation.iteration_time:.6g} {unit} "
        f"({lowered.iteration_time / evaluation.iteration_time - 1:+.2%})"
    )
    click.echo(f"schedule written to {out}, microbatches to {sidecar}")


def _export_same_partition(
    problem: Problem,
    plan: Plan,
    out: str,
    seed: int | None,
    generations: int | None,
    time_limit: float | None,
) -> None:
    """The same-partition search, seeded with PLAN lowered; writes a tidgap.plan/1."""
    if time_limit is None and generations is None:
        time_limit = DEFAULT_TIME_LIMIT
    result = search(
        problem,
        seed=0 if seed is None else seed,
        generations=generations,
        time_limit=time_limit,
        same_partition=True,
        initial_plans=[lowered_plan(plan)],
    )
    write_json(out, result.plan_document())
    unit = problem.time_unit
    click.echo(
        f"same-partition plan: iteration {result.evaluation.iteration_time:.6g} {unit}, "
        f"plan {evaluate(problem, plan).iteration_time:.6g} {unit}, best GPipe "
        f"{result.baselines['gpipe'].iteration_time:.6g} {unit}"
    )
    click.echo(
        f"  every stage: F {_compact(result.plan.forward[0])} | "
        f"B {_compact(result.plan.backward[0])}"
    )
    click.echo(f"plan written to {out}")


cli.add_command(profile_command)
cli.add_command(synth_command)


def main() -> None:
    """Console-script entry point."""
    cli()
