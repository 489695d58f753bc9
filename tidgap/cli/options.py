"""What the ``tidgap`` commands share: the PROBLEM argument, number options that refuse
NaN (:class:`Number`), ``--population``,
``--backend``, ``--no-recompute`` and ``--mirrored`` of a search, ``--json``, ``--gantt``
and ``--trace``, and how they print (a plan's ``tidgap run`` prediction where it differs
from the model's: :func:`run_note`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from tidgap.backends import BACKENDS
from tidgap.backends.ticks import MODEL_PRICING, PRICINGS, RUN_PRICING
from tidgap.model.errors import InputError
from tidgap.model.fileio import MAX_INTEGER_DIGITS
from tidgap.model.lists import stages_doing
from tidgap.model.numbers import MAX_COUNT, MAX_TORCH_SEED
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.model.text import printable
from tidgap.optimize.backward_rules import ALIGNED, FREE, MIRRORED
from tidgap.optimize.ga import DEFAULT_POPULATION
from tidgap.optimize.memory import format_bytes
from tidgap.optimize.optimizer import AUTO_PRICING, MIN_POPULATION
from tidgap.runtime.lowering import recomputes
from tidgap.runtime.pricing import (
    covered_chunks,
    order_dependent_times,
    run_evaluation,
    run_op_times,
)
from tidgap.runtime.recompute_memory import predicted_held_bytes
from tidgap.schedules.evaluation import Evaluation

Command = Callable[..., Any]


#: The seeds tidgap passes to PyTorch.
TORCH_SEED = click.IntRange(min=0, max=MAX_TORCH_SEED)


class Seed(click.ParamType):
    """A search's or a synthetic problem's integer seed, of at most
    :data:`~tidgap.model.fileio.MAX_INTEGER_DIGITS` digits: the files it goes into (plans,
    states, problems) keep no longer integer, so tidgap would refuse to read them back."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        number = click.INT.convert(value, param, ctx)
        if self.too_long(number):
            self.fail(f"more than {MAX_INTEGER_DIGITS} digits (files keep no longer integer)")
        return number

    @staticmethod
    def too_long(number: int) -> bool:
        """Whether ``number`` has more digits than a file keeps."""
        return len(str(abs(number))) > MAX_INTEGER_DIGITS


SEED = Seed()


def with_options(command: Command, options: list[Callable[[Command], Command]]) -> Command:
    """``command`` decorated with ``options`` (``click.option`` decorators), listed in
    ``--help`` in their order."""
    for option in reversed(options):
        command = option(command)
    return command


def count_range(least: int = 1, most: int = MAX_COUNT) -> click.IntRange:
    """An integer option in ``least..most`` (refused with click's one line otherwise)."""
    return click.IntRange(min=least, max=most)


def problem_argument(required: bool = True) -> Callable[[Command], Command]:
    """The ``PROBLEM`` argument: a problem file, or ``example:NAME`` for a built-in one."""
    return click.argument(
        "problem", metavar="PROBLEM" if required else "[PROBLEM]", required=required
    )


@contextmanager
def about_problem(spec: str) -> Iterator[None]:
    """Attribute an :class:`InputError` without a source to the PROBLEM ``spec`` (a problem
    too large to plan names the file and its ``batch_size``)."""
    try:
        yield
    except InputError as error:
        raise error.within(spec) from None


class Number(click.FloatRange):
    """A float option within a range that also refuses NaN (which passes every comparison,
    so ``click.FloatRange`` lets it through) and, unless ``infinite``, infinity."""

    def __init__(self, *args: Any, infinite: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.infinite = infinite

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number) or (math.isinf(number) and not self.infinite):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def population_option(command: Command) -> Command:
    """``--population``: individuals per generation of a search (at least
    :data:`~tidgap.optimize.optimizer.MIN_POPULATION`, default
    :data:`~tidgap.optimize.ga.DEFAULT_POPULATION`)."""
    return click.option(
        "--population",
        type=count_range(MIN_POPULATION),
        default=DEFAULT_POPULATION,
        show_default=True,
        help="Individuals per generation.",
    )(command)


def backend_option(help_text: str) -> Callable[[Command], Command]:
    """``--backend auto|NAME``: the evaluation backend of a search, described by ``help_text``."""
    return click.option(
        "--backend",
        type=click.Choice(["auto", *BACKENDS]),
        default="auto",
        show_default=True,
        help=help_text,
    )


def backward_rule_options(command: Command) -> Command:
    """``--no-recompute`` and ``--mirrored``: the backward rule of a search
    (:func:`backward_rule`)."""
    command = click.option(
        "--mirrored",
        is_flag=True,
        help="Only plans whose backward partition is the forward one on every stage: tidgap "
        "run runs every backward on one forward's stored graph, at the model's op costs, so "
        "its prediction is the searched time (searched with --pricing model on a problem "
        "tidgap calibrate gave order tables, up to the ops timed by the op before them) "
        "(implies --no-recompute).",
    )(command)
    return click.option(
        "--no-recompute",
        is_flag=True,
        help="Only plans whose backward boundaries are forward boundaries on every stage: "
        "tidgap run executes them without recomputing forwards (windowed: a constraint of the "
        "search; flush: the backward made the best coarsening of a good forward).",
    )(command)


def backward_rule(no_recompute: bool, mirrored: bool) -> str:
    """The backward rule (:mod:`tidgap.optimize.backward_rules`) the two flags ask for:
    ``mirrored`` over ``aligned`` (``--no-recompute``) over ``free``."""
    return MIRRORED if mirrored else ALIGNED if no_recompute else FREE


def json_option(command: Command) -> Command:
    """``--json``: print one JSON document instead of text."""
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")(command)


def pricing_option(help_text: str) -> Callable[[Command], Command]:
    """``--pricing auto|model|run`` (default ``auto``), described by ``help_text``."""
    return click.option(
        "--pricing",
        type=click.Choice((AUTO_PRICING, *PRICINGS)),
        default=AUTO_PRICING,
        show_default=True,
        help=help_text,
    )


def echo_json(document: object) -> None:
    """Print ``document`` as one line of JSON (no NaN or infinity)."""
    click.echo(json.dumps(document, allow_nan=False))


def describe_problem(problem: Problem) -> str:
    """``name: S stage(s), batch_size B, unit U``, the name's non-printable characters
    escaped (:func:`tidgap.model.text.printable`)."""
    return (
        f"{printable(str(problem.name))}: {problem.num_stages} stage(s), "
        f"batch_size {problem.batch_size}, unit {problem.unit}"
    )


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
        "GPipe and 1F1B); needs matplotlib (the plot extra).",
    )(command)


def require_name(name: str | None) -> None:
    """Refuse an empty ``--name`` (it was taken as none given: the default name)."""
    if name is not None and not name:
        raise InputError("no name (an empty argument)", source="--name")


def require_folder_name(folder: str | None, option: str = "--out-dir") -> None:
    """Refuse an empty folder name (``Path("")`` is the current folder), naming
    ``option``."""
    if folder is not None and not folder:
        raise InputError("no folder name (an empty argument)", source=option)


def run_note(problem: Problem, plan: Plan, pricing: str = MODEL_PRICING) -> str | None:
    """A line for a ``plan`` that ``tidgap run`` runs at other op costs than ``pricing``
    gave it (stages that recompute, stored-graph backwards over several forward chunks, and
    ops timed by the op before them where the problem was calibrated so: all priced by
    run pricing), with the time it predicts for it
    (:func:`tidgap.runtime.pricing.run_evaluation`), or that it cannot (a recomputing op
    the problem's tables do not price); ``None`` when it runs as priced."""
    try:
        priced = run_op_times(problem, plan)
    except InputError as error:
        return f"  when run, tidgap run cannot predict its time: {error}"
    if not priced or pricing == RUN_PRICING:
        return None
    flags = recomputes(plan)
    again = [s for s, flag in enumerate(flags) if flag]
    merged = [
        s
        for s, flag in enumerate(flags)
        if not flag
        and any(len(parts) > 1 for parts in covered_chunks(plan.forward[s], plan.backward[s]))
    ]
    how = []
    if again:
        how.append(
            f"{stages_doing(again, 'recompute')} (backward boundaries that are not forward ones)"
        )
    if merged:
        how.append(f"{stages_doing(merged, 'run')} backwards over several stored forward chunks")
    ordered = [
        s for s, flag in enumerate(flags) if not flag and order_dependent_times(problem, plan, s)
    ]
    if ordered:
        how.append(
            f"{stages_doing(ordered, 'run')} ops timed by the op before them (the calibration's)"
        )
    if not how:
        return None
    evaluation = run_evaluation(problem, plan, priced)
    advice = "; --mirrored searches plans that tidgap run runs at the model's costs"
    if not again and not merged:
        advice = ""
    return (
        f"  when run, {' and '.join(how)}: tidgap run predicts {evaluation.iteration_time:.6g} "
        f"{problem.time_unit} for it{_held_note(problem, plan, evaluation, again)}{advice}"
    )


def _held_note(problem: Problem, plan: Plan, evaluation: Evaluation, again: list[int]) -> str:
    """``, those stage(s) holding ...`` for recomputing stages ``again`` whose profile says
    what they hold (:func:`~tidgap.runtime.recompute_memory.predicted_held_bytes`), else
    ``""``."""
    model = evaluation.peak_memory
    held = predicted_held_bytes(problem, plan, model)
    if not again or held is None or held == model or model is None:
        return ""
    shown = ", ".join(
        f"{format_bytes(held[s])} (the model's {format_bytes(model[s])})" for s in again
    )
    return f", those stage(s) holding {shown}"


#: The Python API's argument names that an :class:`InputError` may name as its source, as
#: the command line's options.
API_OPTIONS = {
    "memory_limit": "--memory-limit",
    "max_microbatches": "--max-microbatches",
    "population": "--population",
    "microbatches": "--microbatches",
}


def named_as_option(error: InputError) -> InputError:
    """``error`` naming the command line's option where it names a Python API argument
    (``memory_limit`` -> ``--memory-limit``)."""
    error.source = API_OPTIONS.get(error.source or "", error.source)
    return error


#: Fewer timed rounds than this keep a cold first round in their median.
COLD_MEDIAN = 3


def cold_start_warning(warmup: int, timed: int, option: str) -> str | None:
    """The warning for ``--warmup 0`` with fewer than :data:`COLD_MEDIAN` timed rounds
    (``timed``, given by ``option``): the first pays one-off start-up costs (allocations,
    autograd's first backward), which a median of one or two keeps; ``None`` otherwise."""
    if warmup or timed >= COLD_MEDIAN:
        return None
    return (
        f"--warmup 0 with {option} {timed}: the first timed round pays one-off start-up "
        "costs (allocations, autograd's first backward; 326 ms on a 3 ms op seen), which a "
        f"median of fewer than {COLD_MEDIAN} keeps in the tables; give --warmup 1 or more"
    )
