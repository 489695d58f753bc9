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
from tidgap.backends import BACKENDS, cpu_backend
from tidgap.compare import compare, format_table, rows_as_dicts
from tidgap.errors import InputError
from tidgap.examples import DEFAULT_EXAMPLE, EXAMPLE_PREFIX, example_names, example_summary
from tidgap.fileio import require_writable, write_json_atomic
from tidgap.gpu import gpu_unusable_reason
from tidgap.oracle import evaluate
from tidgap.plan import load_plan
from tidgap.planner import search
from tidgap.problem import Problem, load_problem
from tidgap.progress import ProgressLine
from tidgap.schedules import SCHEDULES, baseline

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
@json_option
def evaluate_command(
    problem: str,
    plan_file: str | None,
    schedule: str | None,
    microbatches: int | None,
    as_json: bool,
) -> None:
    """Iteration time of PLAN, or of a baseline with --schedule and --microbatches."""
    if plan_file is not None and schedule is not None:
        raise click.UsageError("give PLAN or --schedule, not both")
    if schedule is None and microbatches is not None:
        raise click.UsageError("--microbatches goes with --schedule")
    if plan_file is None and schedule is None:
        raise click.UsageError("give PLAN, or --schedule with --microbatches")
    if schedule is not None and microbatches is None:
        raise click.UsageError("--schedule requires --microbatches")
    loaded = load_problem(problem)
    if schedule is not None:
        result = baseline(loaded, schedule, microbatches)
        document = {
            "schedule": schedule,
            "microbatches": microbatches,
            "iteration_time": result.iteration_time,
            "throughput": loaded.batch_size / result.iteration_time,
        }
        if as_json:
            _echo_json(document)
        else:
            click.echo(_describe_problem(loaded))
            click.echo(
                f"{schedule}({microbatches}): iteration {result.iteration_time:.6g} "
                f"{loaded.time_unit}, throughput {document['throughput']:.6g} "
                f"samples/{loaded.time_unit}"
            )
        return
    plan = load_plan(plan_file, loaded)
    evaluation = evaluate(loaded, plan)
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


@cli.command(name="compare")
@problem_argument()
@click.argument("plan_file", metavar="[PLAN]", required=False)
@json_option
def compare_command(problem: str, plan_file: str | None, as_json: bool) -> None:
    """PLAN (if given) against the best GPipe, 1F1B and PipeDream over every microbatch count."""
    loaded = load_problem(problem)
    plan = load_plan(plan_file, loaded) if plan_file is not None else None
    rows = compare(loaded, plan)
    if as_json:
        _echo_json(
            {"problem": loaded.name, "time_unit": loaded.time_unit, "rows": rows_as_dicts(rows)}
        )
        return
    click.echo(_describe_problem(loaded))
    click.echo(format_table(rows, loaded.time_unit))


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
@click.option("--out", type=click.Path(dir_okay=False), help="Write the plan (tidgap.plan/1) here.")
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
    out: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Search per-stage forward and backward partitions with the least iteration time.

    PROBLEM defaults to the built-in example gpt1-14.
    """
    backend = _chosen_backend(backend, gpu, cpu)
    loaded = load_problem(problem or EXAMPLE_PREFIX + DEFAULT_EXAMPLE)
    if out is not None:
        require_writable(out)
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
        )
    finally:
        if progress is not None:
            progress.close()
    document = result.plan_document()
    if out is not None:
        try:
            write_json_atomic(out, document)
        except OSError as error:
            raise InputError(f"cannot write: {error.strerror or error}", source=out) from None
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


def main() -> None:
    """Console-script entry point."""
    cli()
