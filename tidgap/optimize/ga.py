"""DGAP: the dual-chromosome genetic algorithm, one generation at a time over ``xp``.

With the flush, ``iteration_time = forward_end + backward_span`` and each term depends on
one chromosome only (model.md, separability). So the forward and backward chromosomes
evolve side by side, each selected on its own term, and the best individual is the best
forward chromosome joined to the best backward one: the optimum of the sum.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidgap.backends.xp import namespace, to_host
from tidgap.optimize.operators import breed, equal_rows, mutate
from tidgap.optimize.rng import CounterRng

#: Generations without improvement after which a GA restarts (keeping its elites), when
#: no stagnation rule stops the search.
RESTART_AFTER = 150
#: ``(P, S, K)`` chromosomes -> ``(P,)`` int64 fitness in ticks (lower is better).
Fitness = Callable[[Any], Any]
#: :func:`tidgap.optimize.operators.breed` or a fused kernel with the same signature and result.
Breeder = Callable[..., Any]


@dataclass(frozen=True)
class GeneticSettings:
    """How the GA breeds: population size ``P``, elites kept, rates per child."""

    population: int = 512
    elite_fraction: float = 1 / 32
    crossover_rate: float = 0.9
    mutation_rate: float = 0.9
    tournament_size: int = 3

    @property
    def elites(self) -> int:
        """Individuals copied unchanged into the next generation (at least one)."""
        return max(1, int(self.population * self.elite_fraction))


@dataclass
class Chromosomes:
    """One direction's population: ``genes`` ``(P, S, K)``, ``fitness`` ``(P,)`` ticks."""

    genes: Any
    fitness: Any
    caps: Any
    score: Fitness
    breed: Breeder = breed

    def best(self) -> tuple[Any, int]:
        """The fittest chromosome ``(S, K)`` and its fitness in ticks (first on ties)."""
        index = int(namespace(self.fitness).argmin(self.fitness))
        return self.genes[index], int(self.fitness[index])

    def step(self, settings: GeneticSettings, rng: CounterRng) -> int:
        """Breed one generation in place (elitism keeps the best); return children scored."""
        xp = namespace(self.genes)
        keep = settings.elites
        order = xp.argsort(self.fitness, kind="stable")[:keep]
        children = self.genes.shape[0] - keep
        offspring = self.breed(
            self.genes,
            self.fitness,
            self.caps,
            rng,
            children,
            settings.crossover_rate,
            settings.mutation_rate,
            settings.tournament_size,
        )
        self.genes = xp.concatenate([self.genes[order], offspring])
        self.fitness = xp.concatenate([self.fitness[order], self.score(offspring)])
        return children

    def restart(self, settings: GeneticSettings, rng: CounterRng) -> int:
        """Keep the elites, draw the rest anew (:func:`random_chromosomes`); return how
        many were scored."""
        xp = namespace(self.genes)
        kept = xp.argsort(self.fitness, kind="stable")[: settings.elites]
        population, stages, width = self.genes.shape
        units = int(self.genes[0, 0].sum())
        fresh = random_chromosomes(population - len(kept), stages, width, units, self.caps, rng)
        self.genes = xp.concatenate([self.genes[kept], fresh])
        self.fitness = xp.concatenate([self.fitness[kept], self.score(fresh)])
        return len(fresh)


def random_chromosomes(
    count: int, stages: int, width: int, units: int, caps: Any, rng: CounterRng
) -> Any:
    """``(count, S, K)`` diverse feasible chromosomes: per stage an equal partition with a
    random microbatch count, then a few random boundary moves."""
    fewest = -(-units // caps)
    counts = rng.integers(fewest[None, :], min(width, units) + 1, (count, stages))
    genes = equal_rows(units, counts.reshape(-1), width).reshape(count, stages, width)
    for _ in range(3):
        genes = mutate(genes, caps, rng, rate=1.0)
    return genes


@dataclass
class Progress:
    """Reported after every generation: ``elapsed`` seconds since the GA started (after
    the setup), ``best_ticks`` the best iteration time in ticks."""

    generation: int
    evaluations: int
    elapsed: float
    best_ticks: int


@dataclass
class StopRule:
    """Stop after ``generations``, after ``time_limit`` seconds (counted from ``started``),
    after ``stagnation`` generations without improvement, or when ``interrupted()`` names
    a signal, whichever comes first (``None`` disables one)."""

    generations: int | None = None
    time_limit: float | None = None
    stagnation: int | None = 200
    interrupted: Callable[[], str | None] | None = None
    started: float = field(default_factory=time.perf_counter)

    def signal(self) -> str | None:
        """The name of the signal that asked to stop, or ``None``."""
        return None if self.interrupted is None else self.interrupted()

    def out_of_time(self) -> bool:
        """Whether the time limit has passed."""
        return self.time_limit is not None and self.elapsed() >= self.time_limit

    def elapsed(self) -> float:
        """Seconds since ``started``."""
        return time.perf_counter() - self.started

    def reason(self, generation: int, since_improvement: int) -> str | None:
        """Why to stop now, or ``None`` to go on."""
        if (name := self.signal()) is not None:
            return name
        if self.generations is not None and generation >= self.generations:
            return "generations"
        if self.out_of_time():
            return "time limit"
        if self.stagnation is not None and since_improvement >= self.stagnation:
            return "stagnation"
        return None


@dataclass(frozen=True)
class Evolution:
    """The outcome of :func:`evolve`: the best chromosomes, their fitness and the effort."""

    forward: Any
    backward: Any
    forward_ticks: int
    backward_ticks: int
    generations: int
    evaluations: int
    stop_reason: str


def best_total(forward: Chromosomes, backward: Chromosomes) -> int:
    """Least forward plus least backward fitness, in ticks: one device-to-host copy."""
    xp = namespace(forward.fitness)
    pair = xp.stack([forward.fitness.min(), backward.fitness.min()])
    return int(to_host(pair).sum())


def evolve(
    forward: Chromosomes,
    backward: Chromosomes,
    settings: GeneticSettings,
    stop: StopRule,
    rng: CounterRng,
    on_progress: Callable[[Progress], None] | None = None,
    restart_after: int | None = None,
) -> Evolution:
    """Run DGAP on both directions in lockstep until ``stop`` says so; after
    ``restart_after`` generations without improvement both directions restart (keeping
    their elites)."""
    evaluations = forward.genes.shape[0]
    generation = since_improvement = 0
    started = time.perf_counter()
    best = best_total(forward, backward)
    while (reason := stop.reason(generation, since_improvement)) is None:
        evaluations += forward.step(settings, rng)
        backward.step(settings, rng)
        generation += 1
        current = best_total(forward, backward)
        since_improvement = 0 if current < best else since_improvement + 1
        best = min(best, current)
        if restart_after is not None and since_improvement >= restart_after:
            evaluations += forward.restart(settings, rng)
            backward.restart(settings, rng)
            since_improvement = 0
        if on_progress is not None:
            on_progress(Progress(generation, evaluations, time.perf_counter() - started, best))
    (best_forward, forward_ticks), (best_backward, backward_ticks) = forward.best(), backward.best()
    return Evolution(
        best_forward, best_backward, forward_ticks, backward_ticks, generation, evaluations, reason
    )
