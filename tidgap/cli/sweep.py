"""``tidgap sweep``: plan many problems at once (a local process pool or a Dask cluster),
one plan file per problem and a summary table."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError, Executor
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from tidgap.analysis.sweep_summary import (
    SWEEP_FORMAT,
    format_sweep_table,
    summary_csv,
    sweep_row,
)
from tidgap.cli.options import (
    SEED,
    Number,
    backend_option,
    backward_rule,
    backward_rule_options,
    count_range,
    named_as_option,
    population_option,
    require_folder_name,
)
from tidgap.cli.search import DEFAULT_TIME_LIMIT, MemoryLimit, chosen_backend
from tidgap.model.errors import InputError, joined_message
from tidgap.model.problem import Problem, load_problem, problem_path
from tidgap.model.text import printable
from tidgap.optimize.backward_rules import admitted_rule
from tidgap.optimize.cluster import ClusterPool, Skipped, connected_client
from tidgap.optimize.driver import SEARCHABLE
from tidgap.optimize.interrupts import end_now, stop_on_signals
from tidgap.optimize.many import (
    STOPPABLE,
    SearchFailed,
    default_pool,
    local_pool,
    search_many,
)
from tidgap.optimize.optimizer import (
    AUTO_PRICING,
    DEFAULT_SCHEDULE,
    flush_memory_limit,
    resolved_pricing,
)
from tidgap.optimize.results import SearchResult
from tidgap.optimize.windowed_driver import require_windowed_room
from tidgap.outputs.files import (
    OutputFile,
    check_outputs,
    json_file,
    output_folder,
    text_file,
    write_files,
)
from tidgap.schedules.families import SCHEDULES
from tidgap.schedules.held import require_flush_fits

#: The summary files written into ``--out-dir``.
SUMMARY_CSV, SUMMARY_JSON = "summary.csv", "summary.json"
#: What a plan file is called: the problem file's stem, then this.
PLAN_SUFFIX = ".plan.json"
#: Seconds a Dask client may take to close.
CLOSE_TIMEOUT = 5


def _plan_names(specs: tuple[str, ...]) -> list[str]:
    """One plan file name per problem, from its file's stem (``example:NAME``: ``NAME``);
    :class:`InputError` when two problems share a stem (their plans would collide)."""
    names: dict[str, str] = {}
    for spec in specs:
        name = problem_path(spec).stem + PLAN_SUFFIX
        if name in names and names[name] == spec:
            raise InputError("given twice (each problem is searched once)", source=spec)
        if name in names:
            raise InputError(f"has the file name stem of {names[name]}; rename one", source=spec)
        names[name] = spec
    return list(names)


def _check_memory_limit(
    specs: tuple[str, ...],
    problems: list[Problem],
    limit: str | int | None,
    schedule: str | None,
    backward: str,
) -> None:
    """Refuse, naming the file, a problem a byte ``--memory-limit`` cannot apply to, one
    whose limits leave some stage no room for any plan (:func:`require_windowed_room`, as
    its search counts memory), or (``--schedule flush``) one no flush plan meets within
    the limit or its stages' own ``memory_limit``."""
    separable = schedule is not None and SCHEDULES[schedule].separable
    for spec, problem in zip(specs, problems, strict=True):
        try:
            if not separable:
                pricing = resolved_pricing(problem, AUTO_PRICING, schedule or DEFAULT_SCHEDULE)
                require_windowed_room(problem, limit, pricing, admitted_rule(backward, problem))
            else:
                require_flush_fits(problem)
                if limit is not None:
                    flush_memory_limit(problem, limit)
        except InputError as error:
            raise _failure(spec, error) from None


@contextmanager
def _dask_executor(scheduler: str) -> Iterator[Executor]:
    """A :class:`~tidgap.optimize.cluster.ClusterPool` on a Dask client connected to
    ``scheduler``, closed after. The client's own log stays quiet (a lost scheduler logged
    a traceback each time it tried again): the command's lines say what failed."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise InputError(
            "Dask is not installed (the dask extra: pip install dask distributed)",
            source="--scheduler",
        ) from None
    try:
        client = connected_client(scheduler)
    except (OSError, ValueError, TypeError) as error:  # TimeoutError among them
        raise InputError(
            f"cannot connect to {scheduler}: {joined_message(error)}", source="--scheduler"
        ) from None
    disabled = logging.root.manager.disable
    logging.disable(logging.ERROR)  # the client's tracebacks, not the command's lines
    try:
        yield ClusterPool(client)
    finally:
        with suppress(Exception):  # a client whose scheduler is gone may fail to close
            client.close(timeout=CLOSE_TIMEOUT)
        logging.disable(disabled)


def _executor(
    workers: int | None, scheduler: str | None, count: int
) -> AbstractContextManager[Executor]:
    """The executor of ``--scheduler`` (a Dask client's) or ``--workers`` (a local pool;
    without either, one worker per core)."""
    if scheduler is not None:
        return _dask_executor(scheduler)
    return default_pool(count) if workers is None else local_pool(min(workers, count))


class _Stopping:
    """What a first SIGINT / SIGTERM to the launcher does to the searches of
    :attr:`executor`: a local pool's or a cluster's stop, each search at its next
    generation, those not started skipped (the signal may have reached the launcher
    alone); other executors' searches finish. Before a cluster's executor is made
    (``executor`` is a context to enter: connecting) the command ends at once: nothing is
    found yet."""

    def __init__(self, executor: AbstractContextManager[Executor]) -> None:
        self.executor: Executor | None = executor if isinstance(executor, Executor) else None

    def __call__(self, name: str) -> None:
        signum = signal.Signals[name]
        if isinstance(self.executor, STOPPABLE):
            self.executor.stop(signum)
        elif self.executor is None:
            end_now(signum)


@click.command(name="sweep")
@click.argument("problems", metavar="PROBLEM...", nargs=-1, required=True)
@click.option(
    "--out-dir",
    required=True,
    type=click.Path(file_okay=False),
    help=f"Write each plan here as STEM{PLAN_SUFFIX} (STEM: the problem file's) as its "
    f"search ends, and {SUMMARY_CSV} and {SUMMARY_JSON} of the plans found so far with "
    "it; created if missing, other files left alone.",
)
@click.option(
    "--workers",
    type=count_range(1),
    help="Searches at once in local processes (default: one per core, at most one per problem).",
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    help="Run the searches on this Dask scheduler (tcp://host:8786); needs the dask extra.",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Every search's seed.")
@click.option(
    "--generations",
    type=count_range(0),
    help="Stop each search after this many generations (reproducible plans).",
)
@click.option(
    "--time-limit",
    type=Number(min=0, infinite=True),
    help=f"Stop each search after this many seconds (default {DEFAULT_TIME_LIMIT:g} unless "
    "--generations is given); plans then depend on the load.",
)
@click.option(
    "--schedule", type=click.Choice(SEARCHABLE), help="The family searched (default windowed)."
)
@click.option(
    "--memory-limit", type=MemoryLimit(), help="As tidgap search --memory-limit, per problem."
)
@backward_rule_options
@population_option
@backend_option("Evaluation backend of every search.")
def sweep_command(
    problems: tuple[str, ...],
    out_dir: str,
    workers: int | None,
    scheduler: str | None,
    seed: int,
    generations: int | None,
    time_limit: float | None,
    schedule: str | None,
    memory_limit: str | int | None,
    no_recompute: bool,
    mirrored: bool,
    population: int,
    backend: str,
) -> None:
    """Search a plan for every PROBLEM at once and write them with a summary table (each
    plan's time in the model and as tidgap run predicts it: the same under --mirrored).

    Every problem is loaded and checked before any search starts (with --schedule flush,
    against a --memory-limit no flush plan meets too): a bad one exits 2 naming its file,
    with nothing written; so does a problem given twice, or two whose files share a stem
    (their plans would collide). A search that fails (no plan within the memory limit,
    say; on a Dask cluster, one lost with its scheduler where none came back at its
    address within 10 s: one restarted there runs it again, at most twice) does not stop
    the others: their plans and the summary are written, then the command exits 2 with
    one line naming the first failed problem's file and its error. A plan that cannot be
    written (a full disk) stops the searches still running; the plans written before it
    stay.

    Ctrl-C or SIGTERM (to the process group, as a terminal sends it, or to this process
    alone) stops each search at its next generation (on a Dask cluster within half a
    second more) and skips those not started; the plans found so far and the summary are
    written (and the first search that failed of itself named), then the command exits
    130 / 143; a second signal exits at once, keeping the plans written so far (each is
    written, with the summary, as its search ends). While connecting to a Dask scheduler (10 s
    at most) a signal exits at once. The --backend is checked on this machine (cuda needs
    a GPU here too).
    """
    if workers is not None and scheduler is not None:
        raise click.UsageError("give --workers or --scheduler, not both")
    require_folder_name(out_dir)
    loaded = [load_problem(spec) for spec in problems]
    names = _plan_names(problems)
    backward = backward_rule(no_recompute, mirrored)
    _check_memory_limit(problems, loaded, memory_limit, schedule, backward)
    backend = chosen_backend(backend)
    if time_limit is None and generations is None:
        time_limit = DEFAULT_TIME_LIMIT
    started = time.perf_counter()
    # stop_on_signals lasts until the plans are written: a signal as the searches ended,
    # while the pool shut down, lost them all
    executor_context = _executor(workers, scheduler, len(loaded))
    stopping = _Stopping(executor_context)
    with stop_on_signals(stopping) as signals:
        with executor_context as executor:
            stopping.executor = executor
            if isinstance(executor, ClusterPool) and not executor.workers():
                click.echo(
                    f"tidgap: warning: --scheduler: {printable(scheduler)} has no workers "
                    "yet; the searches wait for one (Ctrl-C skips them)",
                    err=True,
                )
            with output_folder(out_dir) as folder:
                plans = [folder / name for name in names]
                summaries = (folder / SUMMARY_CSV, folder / SUMMARY_JSON)
                inputs = {f"PROBLEM {i + 1}": spec for i, spec in enumerate(problems)}
                outputs = [("--out-dir", path) for path in (*plans, *summaries)]
                check_outputs(None, None, *outputs, inputs=inputs)
            written = _SweepOutputs(problems, plans, summaries)
            failed = _search_all(
                loaded,
                executor,
                on_result=written.add,
                seeds=seed,
                schedule=schedule,
                memory_limit=memory_limit,
                backward=backward,
                population=population,
                generations=generations,
                time_limit=time_limit,
                backend=backend,
            )
        rows = written.finish()
    if signals.received():
        click.echo(f"interrupted by {signals.received()}: the plans found so far")
        first = _first_failure(failed)
        if first is not None:  # the skipped searches are the signal's doing, not these
            error = _failure(problems[first], failed.errors[first])
            click.echo(f"tidgap: error: {error}", err=True)
    click.echo(format_sweep_table(rows))
    click.echo(
        f"{len(rows)} plan(s), {SUMMARY_CSV} and {SUMMARY_JSON} written to "
        f"{printable(out_dir)} in {time.perf_counter() - started:.1f} s"
    )
    signals.exit_if_received()
    if failed is not None:
        raise _failure(problems[failed.first], failed.errors[failed.first]) from failed


def _failure(spec: str, error: BaseException) -> InputError:
    """The one-line error naming problem file ``spec`` for its search's ``error``: an
    :class:`InputError`'s line (its own source kept after the file), anything else as
    ``search failed (TYPE: message)``, its lines joined."""
    if isinstance(error, InputError):
        return InputError(str(named_as_option(error)), source=spec)
    line = f"{type(error).__name__}: {joined_message(error)}"
    return InputError(f"search failed ({line})", source=spec)


def _first_failure(failed: SearchFailed | None) -> int | None:
    """The index of the first search of ``failed`` that failed of itself, not skipped or
    cancelled by a stop signal (``KeyboardInterrupt``, ``CancelledError``, ``Skipped``);
    ``None`` if none did."""
    if failed is None:
        return None
    skipped = (KeyboardInterrupt, CancelledError, Skipped)
    own = [i for i, error in failed.errors.items() if not isinstance(error, skipped)]
    return min(own, default=None)


def _search_all(
    problems: list[Problem], executor: Executor | None, **options: Any
) -> SearchFailed | None:
    """Run :func:`search_many` (its results go to its ``on_result``); its failure, if any."""
    try:
        search_many(problems, executor=executor, **options)
    except SearchFailed as error:
        return error
    return None


@dataclass
class _SweepOutputs:
    """A sweep's files, written as its searches end: each plan at once, with the summary
    files (CSV, JSON) of the plans found so far, so that a sweep ended by SIGKILL or a
    second signal keeps them. ``rows``: the summary's row of each problem (by index) whose
    plan is written, with ``tidgap run``'s prediction for it."""

    specs: tuple[str, ...]
    plans: list[Path]
    summaries: tuple[Path, Path]
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)

    def add(self, i: int, result: SearchResult) -> None:
        """Write problem ``i``'s plan and the summary files with its row."""
        spec, path = self.specs[i], self.plans[i]
        self.rows[i] = sweep_row(spec, path.name, result, result.run_priced.iteration_time)
        write_files([json_file(path, result.plan_document()), *self._summary_files()])

    def finish(self) -> list[dict[str, Any]]:
        """Write the summary files (also where no plan was found: each plan found was
        written as its search ended); return the summary's rows in order."""
        write_files(self._summary_files())
        return [self.rows[k] for k in sorted(self.rows)]

    def _summary_files(self) -> list[OutputFile]:
        """The summary files of :attr:`rows`, in the problems' order."""
        ordered = [self.rows[k] for k in sorted(self.rows)]
        csv_path, json_path = self.summaries
        summary = {"format": SWEEP_FORMAT, "problems": ordered}
        return [text_file(csv_path, summary_csv(ordered)), json_file(json_path, summary)]
