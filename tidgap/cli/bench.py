"""``tidgap bench``: evaluation throughput of every usable backend and schedule family at
several population sizes (:mod:`tidgap.analysis.throughput`)."""

from __future__ import annotations

import click

from tidgap.analysis.throughput import (
    Row,
    bench_document,
    evaluated_families,
    machine,
    measure_backend,
)
from tidgap.analysis.workload import Workload, default_workload, problem_workload
from tidgap.backends import BACKENDS, Backend, UnusableBackend, require_usable
from tidgap.cli.options import (
    count_range,
    describe_problem,
    echo_json,
    json_option,
    problem_argument,
)
from tidgap.cli.search import MemorySize
from tidgap.model.errors import InputError
from tidgap.model.numbers import MAX_COUNT
from tidgap.model.problem import load_problem
from tidgap.optimize.memory import memory_budget, require_within, tick_table_bytes
from tidgap.outputs.files import check_outputs, write_json

#: Population sizes measured unless ``--population`` says otherwise.
DEFAULT_SIZES = "1024,65536,1048576"


class NameList(click.ParamType):
    """Comma-separated names among ``choices``, in the order given, or ``all`` (``None``)."""

    name = "NAME,..."

    def __init__(self, choices: list[str]):
        self.choices = choices

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> list[str] | None:
        if isinstance(value, list):
            return value
        text = str(value).strip()
        if text == "all":
            return None
        names = [name.strip() for name in text.split(",")]
        if "all" in names:
            self.fail("'all' stands alone: give it or names, not both", param, ctx)
        for name in names:
            if name not in self.choices:
                self.fail(f"unknown {name!r}; known: {', '.join(self.choices)}, all", param, ctx)
        return list(dict.fromkeys(names))


class SizeList(click.ParamType):
    """Comma-separated population sizes, each a whole number > 0."""

    name = "P,..."

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> list[int]:
        if isinstance(value, list):
            return value
        sizes = []
        for part in str(value).split(","):
            try:
                size = int(part.strip())
            except ValueError:
                self.fail(f"{part.strip()!r} is not a whole number", param, ctx)
            if not 0 < size <= MAX_COUNT:
                self.fail(f"{size} is not a population size (1 to {MAX_COUNT})", param, ctx)
            sizes.append(size)
        return list(dict.fromkeys(sizes))


def _backends(names: list[str], explicit: bool) -> tuple[list[Backend], dict[str, str]]:
    """The usable records among ``names`` and, for the others, why not; an unusable backend
    named explicitly is bad usage (exit 2)."""
    usable, unusable = [], {}
    for name in names:
        try:
            usable.append(require_usable(BACKENDS[name]))
        except UnusableBackend as error:
            if explicit:
                raise InputError(str(error), source="--backend") from None
            unusable[name] = str(error)
    return usable, unusable


def _workload(problem: str | None, max_memory: int | None) -> Workload:
    """The default workload, or ``problem``'s; :class:`InputError` naming its
    ``batch_size`` where its tick tables alone would exceed ``max_memory`` (default half the
    memory available)."""
    if problem is None:
        return default_workload()
    loaded = load_problem(problem)
    tables = tick_table_bytes(loaded.num_stages, loaded.num_units)
    budget, source = memory_budget(max_memory)
    what = "the tick tables (stages x units)"
    require_within(tables, budget, what, source, problem, ("batch_size",))
    return problem_workload(loaded)


def _heading(workload: Workload, repeats: int, warmup: int, described: dict) -> list[str]:
    """The problem, the measurement and the machine, then the table's header."""
    versions = f"Python {described['python']}, NumPy {described['numpy']}"
    if described["numba"] is not None:
        versions += f", Numba {described['numba']} ({described['numba_threads']} threads)"
    if described["gpu"] is not None:
        versions += f"; {described['gpu']}, CuPy {described['cupy']}"
    return [
        f"{describe_problem(workload.problem)}; K = {workload.width}; median of {repeats} "
        f"after {warmup} warm-up run(s)",
        f"{described['cpu']}; {versions}",
        f"{'backend':<8} {'family':<9} {'population':>10} {'median s':>10} {'min s':>10} "
        f"{'max s':>10} {'evals/s':>9} {'bandwidth':>9}",
    ]


def _line(row: Row) -> str:
    """One row of the table; a skipped row says why."""
    start = f"{row.backend:<8} {row.family:<9} {row.population:>10}"
    if row.skipped is not None:
        return f"{start} skipped: {row.skipped}"
    share = row.bandwidth_share
    seconds = " ".join(
        f"{value:>10.3e}" for value in (row.median, min(row.seconds), max(row.seconds))
    )
    return f"{start} {seconds} {row.rate:>9.3g} {'-' if share is None else f'{share:.1%}':>9}"


@click.command(name="bench")
@problem_argument(required=False)
@click.option(
    "--backend",
    "backend_names",
    type=NameList(list(BACKENDS)),
    default="all",
    show_default=True,
    help="Backends to measure, comma-separated; with all, the unusable ones are listed "
    "with the reason (naming one that is unusable here exits 2).",
)
@click.option(
    "--schedule",
    "families",
    type=NameList(evaluated_families()),
    default="all",
    show_default=True,
    help="Schedule families to evaluate, comma-separated.",
)
@click.option(
    "--population",
    "sizes",
    type=SizeList(),
    default=DEFAULT_SIZES,
    show_default=True,
    help="Population sizes, comma-separated.",
)
@click.option("--repeats", type=count_range(1), default=5, show_default=True, help="Timed runs.")
@click.option(
    "--warmup",
    type=count_range(0),
    default=1,
    show_default=True,
    help="Untimed runs before them (compilation, caches).",
)
@click.option(
    "--max-memory",
    type=MemorySize(),
    help="Skip a population whose estimated memory exceeds this (bytes, or 8G, 512MiB, ...; "
    "default half the memory available, on a GPU the lesser of host and device).",
)
@click.option(
    "--out", type=click.Path(dir_okay=False), help="Write the tidgap.bench/1 document here."
)
@json_option
def bench_command(
    problem: str | None,
    backend_names: list[str] | None,
    families: list[str] | None,
    sizes: list[int],
    repeats: int,
    warmup: int,
    max_memory: int | None,
    out: str | None,
    as_json: bool,
) -> None:
    """Evaluations per second of each usable backend and schedule family, per population
    size: random valid populations, WARMUP untimed then REPEATS timed evaluations of the
    whole population (waited for on a GPU), median, min and max seconds, and on a GPU the
    share of the peak memory bandwidth (bytes an evaluation reads and writes at least, over
    the device's peak).

    Without PROBLEM: the README's performance setting, 8 heterogeneous affine stages,
    batch_size 256, unit 1, K = 32 columns and 12..20 microbatches per stage and direction
    (windowed: with per-stage orders of random windows). With PROBLEM: the random
    individuals a search starts from, K = 32 (at most its units). Populations over 4096
    repeat 4096 drawn individuals.
    """
    check_outputs(None, None, ("--out", out), inputs={"PROBLEM": problem})
    explicit = backend_names is not None
    usable, unusable = _backends(backend_names or list(BACKENDS), explicit)
    families = families or evaluated_families()
    workload = _workload(problem, max_memory)
    if not as_json:
        for line in _heading(workload, repeats, warmup, machine(usable)):
            click.echo(line)
        for name, reason in unusable.items():
            click.echo(f"{name:<8} unusable: {reason}")
    rows = []
    for record in usable:
        for row in measure_backend(record, workload, families, sizes, repeats, warmup, max_memory):
            rows.append(row)
            if not as_json:
                click.echo(_line(row))
    document = bench_document(workload, usable, unusable, rows, repeats, warmup)
    if out is not None:
        write_json(out, document)
    if as_json:
        echo_json(document)
