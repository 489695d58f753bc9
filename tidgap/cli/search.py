"""``tidgap search``: the search command, its options and its summary."""

from __future__ import annotations

import sys

import click
from click.core import ParameterSource

from tidgap.analysis.bound import lower_bound
from tidgap.analysis.compare import compare, format_table
from tidgap.analysis.report import report, summary
from tidgap.analysis.search_summary import limit_marks, summary_lines
from tidgap.backends import UnusableBackend, first_usable, get_backend, require_usable
from tidgap.backends.ticks import RUN_PRICING
from tidgap.cli.options import (
    SEED,
    Number,
    about_problem,
    backend_option,
    backward_rule,
    backward_rule_options,
    count_range,
    describe_problem,
    echo_json,
    json_option,
    output_options,
    population_option,
    pricing_option,
    problem_argument,
    run_note,
)
from tidgap.cli.progress import ProgressLine, warnings_shown
from tidgap.model.errors import InputError
from tidgap.model.examples import DEFAULT_EXAMPLE, EXAMPLE_PREFIX
from tidgap.model.lists import compact_sizes
from tidgap.model.problem import load_problem
from tidgap.model.text import printable
from tidgap.optimize.checkpoint import DEFAULT_EVERY, StateNotSaved, load_state
from tidgap.optimize.driver import (
    SEARCHABLE,
    SearchResult,
    search,
)
from tidgap.optimize.interrupts import stop_on_signals
from tidgap.optimize.limits import parse_memory_limit
from tidgap.optimize.memory import parse_size
from tidgap.optimize.run_memory import run_evaluated
from tidgap.outputs.files import (
    check_outputs,
    comparison_files,
    json_file,
    plan_timelines,
    write_files,
)
from tidgap.runtime.pricing import plan_pricing
from tidgap.schedules.families import SCHEDULES, family_of

#: Seconds ``tidgap search`` runs when neither --time-limit nor --generations is given.
DEFAULT_TIME_LIMIT = 10.0


class MemoryLimit(click.ParamType):
    """``1f1b`` or a byte count per stage (``80GB``, ``24GiB``, a number > 0)."""

    name = "1f1b|BYTES"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> str | int:
        try:
            return parse_memory_limit(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


class MemorySize(click.ParamType):
    """A byte count: ``8G``, ``512MiB``, ``1.5g`` or plain bytes."""

    name = "SIZE"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        try:
            size = value if isinstance(value, int) else parse_size(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)
        if size < 1:
            self.fail(f"must be at least 1 byte, not {value!r}", param, ctx)
        return size


def chosen_backend(backend: str, gpu: bool = False, cpu: bool = False) -> str:
    """The backend named by ``--backend``, or the first usable one on the device of ``--gpu``
    or ``--cpu`` (``auto`` if none is given); bad usage exits 2, an unusable backend too."""
    if sum([gpu, cpu, backend != "auto"]) > 1:
        raise click.UsageError("give one of --backend, --gpu and --cpu")
    source = "--gpu" if gpu else "--cpu" if cpu else "--backend"
    try:
        if gpu or cpu:
            return first_usable("gpu" if gpu else "cpu").name
        if backend != "auto":
            return require_usable(get_backend(backend)).name
    except UnusableBackend as error:
        raise InputError(str(error), source=source) from None
    return backend


@click.command(name="search")
@problem_argument(required=False)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Random seed.")
@click.option(
    "--generations",
    type=count_range(0),
    help="Stop the GA after this many generations (a windowed search then anneals for "
    "4 steps per generation). With a seed, gives the same plan every run.",
)
@click.option(
    "--time-limit",
    type=Number(min=0, infinite=True),
    help="Stop after this many seconds (default 10 unless --generations is given). "
    "A time limit may stop at a different generation on a busier machine, so the plan "
    "can differ between runs; use --generations for reproducible plans.",
)
@click.option(
    "--schedule",
    type=click.Choice(SEARCHABLE),
    help="The family searched: windowed (per-stage orders between and beyond flush and "
    "1F1B; the plan file gets order) or flush (every stage forwards everything first: "
    "UMPIPE). Default windowed, flush with --same-partition.",
)
@click.option(
    "--memory-limit",
    type=MemoryLimit(),
    help="Bound every stage's peak memory: 1f1b holds each stage to what the best 1F1B "
    "holds there (samples); BYTES (80GB, 24GiB, a number) needs activation_bytes in the "
    "problem. Stages' own memory_limit applies too. --out writes the plan within it.",
)
@click.option(
    "--stagnation",
    type=count_range(1),
    help="Stop after this many generations without improvement. Without it, the search "
    "runs to --time-limit or --generations (what stagnates restarts, keeping the best).",
)
@population_option
@click.option(
    "--max-microbatches",
    type=count_range(1),
    help="Most microbatches per stage and direction, at most batch_size/unit. Default 64, "
    "raised if a baseline or a seed needs more; a given value is kept (raised only if the "
    "caps need more), so the plan may be slower than a baseline that needs more.",
)
@backend_option(
    "Evaluation backend; auto picks the GPU when usable (for a windowed search, when its "
    "kernel holds the pipeline: README), else numba, else numpy."
)
@click.option(
    "--gpu",
    is_flag=True,
    help="Use the CUDA backend; exit 2 saying why if no GPU is usable, or if its windowed "
    "kernel cannot hold the pipeline's stages and microbatches.",
)
@click.option("--cpu", is_flag=True, help="Use the fastest CPU backend (numba, else numpy).")
@click.option(
    "--same-partition",
    is_flag=True,
    help="Give every stage the same partition (one per direction): plans that runtimes "
    "with variable microbatch sizes but one partition (Megatron, DynaPipe) run as is.",
)
@backward_rule_options
@pricing_option(
    "How plans are timed. model: model.md's op times (a backward of b samples at "
    "Tb(b), whatever the forward partition: what UMPIPE assumes). run (windowed only): as "
    "tidgap run runs them: a stage whose backward boundaries are all forward boundaries "
    "pays the sum of its covered forwards' backward times, any other recomputes (the "
    "calibrated recompute times, else Tf + Tb per backward), and ops timed by the op "
    "before them take the calibration's order tables: the time tidgap run predicts. "
    "auto: run for a windowed "
    "search of a problem tidgap calibrate timed (it has recompute or order tables), else "
    "model.",
)
@click.option(
    "--max-memory",
    type=MemorySize(),
    help="Refuse a search whose estimated memory exceeds this (bytes, or 8G, 512MiB, ...; "
    "default half the memory available when it starts).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="Write the plan (tidgap.plan/1) here; an interrupted search writes its best plan.",
)
@click.option(
    "--checkpoint",
    type=click.Path(dir_okay=False),
    help="Save the search's state here (tidgap.state/1, atomically) every "
    "--checkpoint-every seconds (a windowed search's annealing too), at the end and when "
    "Ctrl-C or SIGTERM stops it.",
)
@click.option(
    "--checkpoint-every",
    type=Number(min=0, min_open=True),
    default=DEFAULT_EVERY,
    show_default=True,
    help="Seconds between checkpoints.",
)
@click.option(
    "--resume",
    type=click.Path(dir_okay=False),
    help="Continue the search saved in this state file (same problem, schedule, seed, "
    "population, backend and limits); --generations counts the generations after it. "
    "A state saved while a windowed search annealed goes on annealing (--generations 0 "
    "finishes as the unbroken search would); with more --generations its GA goes on. "
    "It may be the --checkpoint file.",
)
@output_options
@click.option("--quiet", "-q", is_flag=True, help="No progress line, no table: the summary only.")
@json_option
def search_command(
    problem: str | None,
    seed: int,
    generations: int | None,
    time_limit: float | None,
    schedule: str | None,
    memory_limit: str | int | None,
    stagnation: int | None,
    population: int,
    max_microbatches: int | None,
    backend: str,
    gpu: bool,
    cpu: bool,
    same_partition: bool,
    no_recompute: bool,
    mirrored: bool,
    pricing: str,
    max_memory: int | None,
    out: str | None,
    checkpoint: str | None,
    checkpoint_every: float,
    resume: str | None,
    gantt: str | None,
    trace: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Search the plan with the least iteration time: per-stage forward and backward
    partitions and (windowed, the default) per-stage orders, within the memory limit.

    PROBLEM defaults to the built-in example gpt1-14. Ctrl-C or SIGTERM stops at the next
    generation (in the final polish, after its batch of neighbours), writes the best plan
    so far (--out) and the state (--checkpoint) and exits 130 / 143; a second one exits at
    once.
    """
    backend = chosen_backend(backend, gpu, cpu)
    context = click.get_current_context()
    given = context.get_parameter_source("checkpoint_every") == ParameterSource.COMMANDLINE
    if checkpoint is None and given:
        raise click.UsageError("--checkpoint-every needs --checkpoint (where to save)")
    spec = EXAMPLE_PREFIX + DEFAULT_EXAMPLE if problem is None else problem
    loaded = load_problem(spec)
    check_outputs(
        gantt, trace, ("--out", out), ("--checkpoint", checkpoint), inputs={"PROBLEM": problem}
    )
    if resume is not None:  # the state goes on into --checkpoint, which may be the same file
        check_outputs(gantt, trace, ("--out", out), inputs={"--resume": resume})
    if resume == "":
        raise InputError("no file name (an empty argument)", source="--resume")
    saved = None if resume is None else load_state(resume)
    if time_limit is None and generations is None:
        time_limit = DEFAULT_TIME_LIMIT
    if same_partition and schedule is not None and not SCHEDULES[schedule].separable:
        raise click.UsageError("--same-partition searches flush plans: give --schedule flush")
    flush = same_partition or (schedule is not None and SCHEDULES[schedule].separable)
    if pricing == RUN_PRICING and flush:
        raise click.UsageError(
            "--pricing run searches windowed plans (not --schedule flush or --same-partition)"
        )
    show_progress = not (quiet or as_json) and sys.stderr.isatty()
    progress = ProgressLine(loaded.time_unit) if show_progress else None
    with stop_on_signals(None if progress is None else progress.stopping) as signals:
        try:
            with about_problem(spec), warnings_shown(StateNotSaved, progress):
                result = search(
                    loaded,
                    schedule=schedule,
                    memory_limit=memory_limit,
                    seed=seed,
                    population=population,
                    generations=generations,
                    time_limit=time_limit,
                    stagnation=stagnation,
                    backend=backend,
                    max_microbatches=max_microbatches,
                    on_progress=progress,
                    same_partition=same_partition,
                    backward=backward_rule(no_recompute, mirrored),
                    pricing=pricing,
                    interrupted=signals.received,
                    on_phase=None if progress is None else progress.phase,
                    max_memory=max_memory,
                    checkpoint=checkpoint,
                    checkpoint_every=checkpoint_every,
                    resume=saved,
                )
        finally:
            if progress is not None:
                progress.close()
        if saved is not None and not quiet:
            click.echo(f"resumed {printable(resume)} from {saved.where()}", err=True)
        if checkpoint is not None and result.first_cut:
            click.echo(
                f"tidgap: warning: --checkpoint: stopped in the search's first (flush) "
                f"search, which no state holds: nothing saved to {printable(checkpoint)} (a "
                "resume would cut that search short); run the search again",
                err=True,
            )
        _report(result, out, gantt, trace, quiet, as_json)
    signals.exit_if_received()


def _report(
    result: SearchResult,
    out: str | None,
    gantt: str | None,
    trace: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Write the plan and pictures where asked and print the summary (or the JSON plan);
    the plan's timeline is simulated only for a picture or the summary (at 512 stages it
    takes 2 s)."""
    loaded = result.problem
    document = result.plan_document()
    run_priced = result.pricing == RUN_PRICING  # its times, its pictures: tidgap run's
    drawn = not as_json or gantt is not None or trace is not None
    timelines = plan_timelines(loaded, result.plan, run_priced, drawn, "tidgap")
    files = [] if out is None else [json_file(out, document)]
    files += comparison_files(loaded, timelines, result.baselines, gantt, trace, run_priced)
    written = write_files(files)
    if as_json:
        echo_json(document)
        return
    unit = loaded.time_unit
    click.echo(describe_problem(loaded))
    if result.interrupted:
        click.echo(f"interrupted by {result.stop_reason}: the best plan found so far")
    for line in summary_lines(result):
        click.echo(line)
    note = run_note(result.problem, result.plan, result.pricing)
    if note is not None:
        click.echo(note)
    bound = lower_bound(loaded) if family_of(result.plan).has_flush else None
    click.echo(f"  {summary(report(timelines[0], bound), unit)}")
    if quiet:
        return
    order = result.plan.stage_order()
    for s in range(loaded.num_stages):
        ordered = "" if result.plan.order is None else f" | order {order.stages[s]}"
        click.echo(
            f"  {loaded.stage_name(s)}: F {compact_sizes(result.plan.forward[s])} | "
            f"B {compact_sizes(result.plan.backward[s])}{ordered}"
        )
    rows = compare(
        loaded,
        result.plan,
        label="tidgap",
        baselines=result.baselines,
        heuristics=result.heuristics,
        plan_evaluation=result.evaluation,
        price=plan_pricing(result.pricing),
        held=run_evaluated if result.memory_pricing == RUN_PRICING else None,
        over=None if (marks := limit_marks(result)) is None else marks.over,
    )
    click.echo(format_table(rows, unit))
    if out is not None:
        click.echo(f"plan written to {printable(out)}")
    for line in written:
        click.echo(line)
