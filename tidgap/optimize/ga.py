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

from tidgap.backends.xp import namespace
from tidgap.optimize.operators import breed, equal_rows, mutate
from tidgap.optimize.rng import CounterRng

#: Generations without improvement after which a GA restarts (keeping its elites), when
#: no stagnation rule stops the search.
RESTART_AFTER = 150
#: ``(P, S, K)`` chromosomes -> ``(P,)`` int64 fitness in ticks (lower is better).
Fitness = Callable[[Any], Any]
#: :func:`tidgap.optimize.operators.breed` or a fused kernel with the same signature and result.
Breeder = Callable[..., Any]


#: Individuals per population unless a search is given another size.
DEFAULT_POPULATION = 512


@dataclass(frozen=True)
class GeneticSettings:
    """How the GA breeds: population size ``P``, elites kept, rates per child."""

    population: int = DEFAULT_POPULATION
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

    def offspring(self, settings: GeneticSettings, rng: CounterRng) -> Any:
        """The next generation's children ``(P - elites, S, K)``, bred from this one."""
        return self.breed(
            self.genes,
            self.fitness,
            self.caps,
            rng,
            self.genes.shape[0] - settings.elites,
            settings.crossover_rate,
            settings.mutation_rate,
            settings.tournament_size,
        )

    def accept(self, settings: GeneticSettings, children: Any, fitness: Any) -> None:
        """The next generation: this one's elites, then ``children`` with their ``fitness``."""
        xp = namespace(self.genes)
        order = xp.argsort(self.fitness, kind="stable")[: settings.elites]
        self.genes = xp.concatenate([self.genes[order], children])
        self.fitness = xp.concatenate([self.fitness[order], fitness])

    def fresh(self, settings: GeneticSettings, rng: CounterRng) -> Any:
        """Random chromosomes (:func:`random_chromosomes`) for all but the elites: a restart."""
        population, stages, width = self.genes.shape
        units = int(self.genes[0, 0].sum())
        return random_chromosomes(
            population - settings.elites, stages, width, units, self.caps, rng
        )

    def step(self, settings: GeneticSettings, rng: CounterRng) -> int:
        """Breed one generation in place (elitism keeps the best); return children scored."""
        children = self.offspring(settings, rng)
        self.accept(settings, children, self.score(children))
        return children.shape[0]


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

    def left(self) -> float | None:
        """Seconds before the time limit (negative past it); ``None`` without a limit."""
        return None if self.time_limit is None else self.time_limit - self.elapsed()

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
