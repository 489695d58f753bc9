"""The loop every search drives an optimizer with: ask, evaluate, tell, until a stop rule
says so."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from tidgap.optimize.ga import Progress, StopRule
from tidgap.optimize.genome import Population


class Steppable(Protocol):
    """An optimizer the loop drives (:class:`~tidgap.optimize.dual_optimizer.DualOptimizer`,
    :class:`~tidgap.optimize.joint_optimizer.JointOptimizer`)."""

    counters: Any

    @property
    def restarting(self) -> bool: ...

    def ask(self) -> Population: ...

    def evaluate(self, population: Population) -> Any: ...

    def tell(self, population: Population, fitness: Any) -> None: ...

    def progress_ticks(self) -> int: ...


def generation(optimizer: Steppable) -> None:
    """One ask, evaluated with the optimizer's own fitness, told back."""
    population = optimizer.ask()
    optimizer.tell(population, optimizer.evaluate(population))


def run_generations(
    optimizer: Steppable,
    stop: StopRule,
    on_progress: Callable[[Progress], None] | None = None,
    after_generation: Callable[[], None] | None = None,
) -> str:
    """Run generations (each with the restarts it triggers) until ``stop`` says why; the
    stop rule counts the generations of this call, from the optimizer's counters.
    ``on_progress`` gets the effort and the optimizer's progress ticks after each one,
    ``after_generation()`` is called then (a checkpoint)."""
    counters = optimizer.counters
    first, started = counters.generation, time.perf_counter()
    while (reason := stop.reason(counters.generation - first, counters.since_improvement)) is None:
        generation(optimizer)
        while optimizer.restarting:
            generation(optimizer)
        if on_progress is not None:
            elapsed = time.perf_counter() - started
            on_progress(
                Progress(
                    counters.generation, counters.evaluations, elapsed, optimizer.progress_ticks()
                )
            )
        if after_generation is not None:
            after_generation()
    return reason
