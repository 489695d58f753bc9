"""The setup a search shares with every family: the backend and memory budget, the
chromosome width, the equal seeds' microbatch counts, timed phases, the memory check and
the progress reports."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from tidgap.backends import BACKENDS, Backend, default_backend
from tidgap.backends.ticks import TickedProblem
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.ga import Progress, StopRule
from tidgap.optimize.genome import GENE
from tidgap.optimize.heuristics import HEURISTIC_SECONDS, HEURISTICS
from tidgap.optimize.memory import (
    SearchFootprint,
    memory_budget,
    require_within,
    search_footprint,
)
from tidgap.optimize.results import SearchProgress
from tidgap.schedules.baselines import BaselineResult, require_tractable
from tidgap.schedules.flush import evaluate

#: Default bound on microbatches per stage (raised when a baseline or the caps need more).
DEFAULT_MAX_MICROBATCHES = 64
#: Share of a time limit a GA leaves to the final polish.
POLISH_SHARE = 0.1
#: Share of a time limit that must be left after the polish for another round of search
#: and polish (the polish ends early at a local optimum).
MORE_ROUNDS_SHARE = 0.02


@dataclass(frozen=True)
class SearchStart:
    """What a search settles first: the backend (``auto`` resolved) and its record, the
    memory ``budget`` (bytes) and where it comes from, the population (at least 8) and the
    ``started`` clock (``time.perf_counter()``)."""

    backend: str
    record: Backend
    budget: int
    budget_source: str
    population: int
    started: float


def warm_up_inputs(ticked: TickedProblem, xp: ModuleType) -> tuple[Any, Any]:
    """``(genes, caps)`` for compiling a backend's loops: one individual with one microbatch
    of ``U`` units per stage (``(1, S, 1)``) and caps of ``U`` units (``(S,)`` int64), which
    every mutation keeps valid."""
    genes = xp.full((1, ticked.num_stages, 1), ticked.num_units, dtype=GENE)
    return genes, xp.full((ticked.num_stages,), ticked.num_units, dtype=xp.int64)


def affordable(
    population: int, fewer: int | None, genes: int, seconds: float | None, per_gene: float
) -> int:
    """``population``, or ``fewer`` (where smaller) where ``seconds`` (the time left before
    the GA's time limit; ``None``: no limit) would not cover making its ``genes`` genes at
    ``per_gene`` seconds each, so that the GA could run no generation of them."""
    if seconds is None or fewer is None or population <= fewer:
        return population
    return population if seconds > per_gene * genes else fewer


def start_search(
    problem: Problem, backend: str, population: int, max_memory: int | None
) -> SearchStart:
    """Check the backend's name, the smallest footprint against the budget and that the
    baselines are tractable (``ValueError`` / :class:`InputError`), before any work."""
    if backend not in ("auto", *BACKENDS):
        raise ValueError(f"unknown backend {backend!r}")
    started = time.perf_counter()
    backend = default_backend() if backend == "auto" else backend
    record = BACKENDS[backend]
    budget, source = memory_budget(max_memory, record)
    population = max(population, 8)
    footprint = search_footprint(population, problem.num_stages, 1, problem.num_units, 0)
    require_memory(footprint, budget, source)
    require_tractable(problem)
    return SearchStart(backend, record, budget, source, population, started)


def progress_reporter(
    ticked: TickedProblem,
    gpipe_time: float,
    on_progress: Callable[[SearchProgress], None] | None,
    offset: tuple[int, int] = (0, 0),
) -> Callable[[Progress], None] | None:
    """The GA's progress in ticks -> :class:`SearchProgress` in the problem's unit, its
    generations and evaluations counted after ``offset`` (those of an earlier phase)."""
    if on_progress is None:
        return None

    def report(progress: Progress) -> None:
        on_progress(
            SearchProgress(
                progress.generation + offset[0],
                progress.evaluations + offset[1],
                progress.elapsed,
                float(ticked.to_time(progress.best_ticks)),
                gpipe_time,
            )
        )

    return report


def chromosome_width(problem: Problem, requested: int | None, counts_needed: list[int]) -> int:
    """``K``: the most microbatches a stage may use in the search."""
    fewest = -(-problem.batch_size // problem.common_cap())
    width = requested if requested is not None else max(DEFAULT_MAX_MICROBATCHES, *counts_needed)
    return min(problem.num_units, max(width, fewest))


def heuristic_times(
    problem: Problem, heuristics: dict[str, Plan], known: Mapping[str, float] | None = None
) -> dict[str, float]:
    """The iteration times (the problem's unit) of ``heuristics``, by name: those ``known``
    (from an earlier search of the same problem) as they are, the others evaluated (the
    reference recurrences take 0.3 s a plan at 256 stages)."""
    known = {} if known is None else known
    return {
        name: known[name] if name in known else evaluate(problem, plan).iteration_time
        for name, plan in heuristics.items()
    }


def needed_counts(
    problem: Problem,
    baselines: dict[str, BaselineResult],
    heuristics: dict[str, Plan],
    kept: Iterable[Plan] = (),
    times: Mapping[str, float] | None = None,
) -> list[int]:
    """Microbatch counts the chromosome width must hold (:func:`chromosome_width`): the
    baselines' best counts, every stage of every plan of ``kept``, and of each heuristic
    plan (by name) at most as slow as the best GPipe. A slower heuristic plan cannot be the
    result (the best GPipe seeds every search), so it is seeded only where it fits: at
    scale the global DP's hundreds of microbatches would otherwise widen every chromosome.
    ``times``: their :func:`heuristic_times` (evaluated here where not given)."""
    times = heuristic_times(problem, heuristics) if times is None else times
    gpipe_time = baselines["gpipe"].iteration_time
    fast = [plan for name, plan in heuristics.items() if times[name] <= gpipe_time]
    plans = [*kept, *fast]
    return [b.microbatches for b in baselines.values()] + [
        len(sizes) for plan in plans for sizes in plan.forward + plan.backward
    ]


def equal_seed_counts(units: int, cap: int, width: int, most: int, wanted: list[int]) -> list[int]:
    """Microbatch counts of the equal-partition seeds: every ``m`` in ``1..width`` whose
    parts fit ``cap`` units, or, if there are more than ``most``, the ``wanted`` ones (the
    baselines' best counts) and an even spread of the others, ``most`` in all."""
    counts = list(range(-(-units // cap), width + 1))
    if len(counts) <= most:
        return counts
    kept = {m for m in wanted if m in range(counts[0], width + 1)}
    spread = np.linspace(0, len(counts) - 1, max(most - len(kept), 2)).round().astype(int)
    return sorted(kept | {counts[i] for i in spread})


class Phases:
    """Times the setup phases of a search and reports each as it starts."""

    def __init__(self, on_phase: Callable[[str], None] | None):
        self.on_phase = on_phase
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Time the ``with`` block as phase ``name``."""
        if self.on_phase is not None:
            self.on_phase(name)
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


def require_memory(footprint: SearchFootprint, budget: int, budget_source: str) -> None:
    """Raise :class:`InputError` naming the option (or field) that makes ``footprint`` too big."""
    cause = footprint.largest_cause()
    what, source, path = {
        "population": ("the population", "population", ()),
        "seeds": ("the seed chromosomes", "max_microbatches", ()),
        "tables": ("the tick tables (stages x units)", None, ("batch_size",)),
        "fixed": ("the fixed share every search holds", None, ()),  # the budget is small
    }[cause]
    what = f"this search ({what} above all)"
    require_within(footprint.total, budget, what, budget_source, source, path)


def add_heuristics(problem: Problem, stop: StopRule, heuristics: dict[str, Plan]) -> None:
    """Add to ``heuristics`` the plan of each of :data:`HEURISTICS` it lacks, unless a
    signal stopped the search or the heuristic would not end (by
    :data:`HEURISTIC_SECONDS`) before ``stop``'s time limit."""
    for name, build in HEURISTICS.items():
        if name in heuristics or stop.signal() is not None:
            continue
        if (left := stop.left()) is None or HEURISTIC_SECONDS[name](problem) < left:
            heuristics[name] = build(problem)


def more_rounds(
    end: float, time_limit: float, ending: float, round_: Callable[[float], float | None]
) -> None:
    """While more than :data:`MORE_ROUNDS_SHARE` of ``time_limit`` is left before ``end``
    (``time.perf_counter()`` seconds): ``round_(deadline)`` searches until ``deadline``
    (twice the last ending's ``ending`` seconds before ``end``), then ends again (a polish)
    and returns how long that ending took, or ``None`` to stop (a signal)."""
    while end - time.perf_counter() > MORE_ROUNDS_SHARE * time_limit:
        took = round_(end - 2 * ending)
        if took is None:
            return
        ending = took


def runs_to_the_limit(stop: StopRule, time_limit: float | None) -> bool:
    """Whether a search stops on its time limit only (no generations or stagnation rule),
    so that time the polish leaves goes to more rounds."""
    return time_limit is not None and stop.generations is None and stop.stagnation is None
