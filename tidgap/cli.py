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
from tidgap.compare import compare, format_table, rows_as_dicts
from tidgap.errors import InputError
from tidgap.examples import example_names, example_summary
from tidgap.oracle import evaluate
from tidgap.plan import load_plan
from tidgap.problem import Problem, load_problem
from tidgap.schedules import SCHEDULES, baseline

Command = Callable[..., Any]


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
    if (plan_file is None) == (schedule is None):
        raise click.UsageError("give either PLAN or --schedule (with --microbatches), not both")
    if schedule is not None and microbatches is None:
        raise click.UsageError("--schedule requires --microbatches")
    if schedule is None and microbatches is not None:
        raise click.UsageError("--microbatches goes with --schedule")
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


def main() -> None:
    """Console-script entry point."""
    cli()
