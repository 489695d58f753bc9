"""The setup a search shares with every family: the chromosome width, the equal seeds'
microbatch counts, timed phases and the memory check."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from tidgap.model.problem import Problem
from tidgap.optimize.memory import SearchFootprint, require_within

#: Default bound on microbatches per stage (raised when a baseline or the caps need more).
DEFAULT_MAX_MICROBATCHES = 64


def chromosome_width(problem: Problem, requested: int | None, counts_needed: list[int]) -> int:
    """``K``: the most microbatches a stage may use in the search."""
    fewest = -(-problem.batch_size // problem.common_cap())
    width = requested if requested is not None else max(DEFAULT_MAX_MICROBATCHES, *counts_needed)
    return min(problem.num_units, max(width, fewest))


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
        "population": ("the population", "--population", ()),
        "seeds": ("the seed chromosomes", "--max-microbatches", ()),
        "tables": ("the tick tables (stages x units)", None, ("batch_size",)),
    }[cause]
    what = f"this search ({what} above all)"
    require_within(footprint.total, budget, what, budget_source, source, path)
