"""The joint GA of non-separable families: forward, backward and order genes evolve together,
on islands, one per memory level.

With an order the two partitions interact (model.md, Ordered plans), so one fitness, the
iteration time, selects whole individuals (:mod:`tidgap.optimize.joint_operators`). Each
island holds a population under one :class:`~tidgap.optimize.limits.MemoryLevel`: a plan
over it scores :data:`~tidgap.optimize.limits.OVER_LIMIT` plus the samples over, so the
island's best is the fastest plan within its level. Every :data:`MIGRATION_INTERVAL`
generations each island receives the fittest plan, by its own limit, of the other islands'
elites; an island that has not improved for ``restart_after`` generations keeps its elites
and draws the rest anew.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidgap.backends.evaluator import OrderedEvaluator
from tidgap.backends.xp import namespace, to_host
from tidgap.optimize.ga import GeneticSettings, Progress, StopRule, random_chromosomes
from tidgap.optimize.genome import GENE, Population
from tidgap.optimize.joint_operators import JointGenes, Repair, joint_breed
from tidgap.optimize.limits import OVER_LIMIT, MemoryLevel, penalised
from tidgap.optimize.order_genes import canonical
from tidgap.optimize.rng import CounterRng

#: Generations between migrations.
MIGRATION_INTERVAL = 10
#: Individuals each island offers when migrating.
MIGRANTS = 4


@dataclass(frozen=True)
class JointSpace:
    """What every island shares: the evaluator, the caps (``(S,)`` units per direction),
    ``width`` (the chromosomes' ``K``), the breeder (:func:`joint_breed` or a fused kernel
    with its signature) and the repair."""

    evaluator: OrderedEvaluator
    forward_caps: Any
    backward_caps: Any
    width: int
    breed: Callable[..., JointGenes] = joint_breed
    repair: Repair = canonical

    def evaluate(self, genes: JointGenes) -> tuple[Any, Any]:
        """``(times (P,), peaks (P, S))`` of repaired ``genes`` in ticks and samples."""
        return self.evaluator.evaluate(Population(genes.forward, genes.backward, genes.codes))

    def random(self, count: int, rng: CounterRng) -> JointGenes:
        """``count`` repaired random individuals: random partitions (as the flush GA draws
        them) and per stage one random lead ``0..S``."""
        xp = namespace(self.forward_caps)
        stages, width = int(self.forward_caps.shape[0]), self.width
        units = self.evaluator.ticked.num_units
        forward = random_chromosomes(count, stages, width, units, self.forward_caps, rng)
        backward = random_chromosomes(count, stages, width, units, self.backward_caps, rng)
        lead = rng.integers(0, stages + 1, (count, stages, 1))
        lead = xp.broadcast_to(lead, (count, stages, width)).astype(GENE)
        return JointGenes(forward, backward, lead).repaired(self.repair)


@dataclass
class Island:
    """A population under one memory level: ``genes`` (repaired), ``times`` ``(P,)`` ticks,
    ``peaks`` ``(P, S)`` samples, ``fitness`` ``(P,)`` (times, or over the limit)."""

    level: MemoryLevel
    held: Any
    genes: JointGenes
    times: Any
    peaks: Any
    fitness: Any
    best_fitness: int = 0
    since_improvement: int = 0

    @classmethod
    def seeded(
        cls, level: MemoryLevel, candidates: JointGenes, times: Any, peaks: Any, size: int
    ) -> Island:
        """The ``size`` fittest under ``level`` of ``candidates`` (repaired) with their
        ``times`` ``(n,)`` and ``peaks`` ``(n, S)``."""
        xp = namespace(candidates.forward)
        held = xp.asarray(level.held, dtype=xp.int64)
        fitness = penalised(times, peaks, held)
        keep = xp.argsort(fitness, kind="stable")[:size]
        island = cls(level, held, candidates.take(keep), times[keep], peaks[keep], fitness[keep])
        island.best_fitness = int(fitness[keep[0]])
        return island

    def _replace(self, genes: JointGenes, times: Any, peaks: Any) -> None:
        """Set the population (fitness recomputed under this island's level)."""
        self.genes, self.times, self.peaks = genes, times, peaks
        self.fitness = penalised(times, peaks, self.held)

    def _join(self, kept: Any, genes: JointGenes, times: Any, peaks: Any) -> None:
        """The individuals at ``kept`` followed by new ones."""
        xp = namespace(times)
        self._replace(
            JointGenes.concatenate([self.genes.take(kept), genes]),
            xp.concatenate([self.times[kept], times]),
            xp.concatenate([self.peaks[kept], peaks]),
        )

    def elites(self, count: int) -> Any:
        """Indices of the ``count`` fittest (first on ties)."""
        return namespace(self.fitness).argsort(self.fitness, kind="stable")[:count]

    def step(self, settings: GeneticSettings, space: JointSpace, rng: CounterRng) -> int:
        """Breed one generation in place (elitism keeps the best); return children scored."""
        kept = self.elites(settings.elites)
        children = self.genes.size - len(kept)
        offspring = space.breed(
            self.genes,
            self.fitness,
            space.forward_caps,
            space.backward_caps,
            rng,
            children,
            settings.crossover_rate,
            settings.mutation_rate,
            settings.tournament_size,
        )
        self._join(kept, offspring, *space.evaluate(offspring))
        return children

    def restart(self, settings: GeneticSettings, space: JointSpace, rng: CounterRng) -> int:
        """Keep the elites, draw the rest anew; return individuals scored."""
        kept = self.elites(settings.elites)
        fresh = space.random(self.genes.size - len(kept), rng)
        self._join(kept, fresh, *space.evaluate(fresh))
        self.since_improvement = 0
        return fresh.size

    def receive(self, genes: JointGenes, times: Any, peaks: Any) -> None:
        """Put the fittest of the migrants (by this island's level) in place of the least
        fit individual, if it beats this island's best."""
        xp = namespace(times)
        fitness = penalised(times, peaks, self.held)
        best = int(xp.argmin(fitness))
        if int(fitness[best]) >= int(self.fitness.min()):
            return
        worst = int(xp.argmax(self.fitness))
        forward, backward = self.genes.forward.copy(), self.genes.backward.copy()
        lead, codes = self.genes.lead.copy(), self.genes.codes.copy()
        forward[worst], backward[worst] = genes.forward[best], genes.backward[best]
        lead[worst], codes[worst] = genes.lead[best], genes.codes[best]
        self.genes = JointGenes(forward, backward, lead, codes)
        self.times[worst], self.peaks[worst] = times[best], peaks[best]
        self.fitness[worst] = fitness[best]

    def note_progress(self) -> bool:
        """Update the best fitness; whether it improved this generation."""
        current = int(self.fitness.min())
        improved = current < self.best_fitness
        self.best_fitness = min(current, self.best_fitness)
        self.since_improvement = 0 if improved else self.since_improvement + 1
        return improved

    def best(self) -> tuple[JointGenes, int] | None:
        """The fittest individual (``(1, S, K)`` genes) and its time in ticks, or ``None``
        if no individual is within the level."""
        index = int(self.elites(1)[0])
        if int(self.fitness[index]) >= OVER_LIMIT:
            return None
        return self.genes.take(slice(index, index + 1)), int(self.times[index])


def migrate(islands: list[Island]) -> None:
    """Every island receives the fittest, by its own level, of all islands' elites."""
    pools = [(island, island.elites(MIGRANTS)) for island in islands]
    genes = JointGenes.concatenate([island.genes.take(index) for island, index in pools])
    xp = namespace(genes.forward)
    times = xp.concatenate([island.times[index] for island, index in pools])
    peaks = xp.concatenate([island.peaks[index] for island, index in pools])
    for island in islands:
        island.receive(genes, times, peaks)


@dataclass(frozen=True)
class IslandEvolution:
    """The outcome of :func:`evolve_islands`: the islands as they ended and the effort."""

    islands: list[Island]
    generations: int
    evaluations: int
    stop_reason: str


def evolve_islands(
    islands: list[Island],
    reported: int,
    space: JointSpace,
    settings: GeneticSettings,
    stop: StopRule,
    rng: CounterRng,
    restart_after: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> IslandEvolution:
    """Run the joint GA on every island in turn until ``stop`` says so (stagnation counts
    generations in which no island improved); ``on_progress`` gets island ``reported``'s
    best time."""
    evaluations = sum(island.genes.size for island in islands)
    generation = since_improvement = 0
    started = time.perf_counter()
    while (reason := stop.reason(generation, since_improvement)) is None:
        for island in islands:
            evaluations += island.step(settings, space, rng)
        generation += 1
        if generation % MIGRATION_INTERVAL == 0 and len(islands) > 1:
            migrate(islands)
        improved = [island.note_progress() for island in islands]
        since_improvement = 0 if any(improved) else since_improvement + 1
        for island in islands:
            if restart_after is not None and island.since_improvement >= restart_after:
                evaluations += island.restart(settings, space, rng)
        if on_progress is not None:
            best = to_host(islands[reported].times[islands[reported].elites(1)])[0]
            on_progress(Progress(generation, evaluations, time.perf_counter() - started, best))
    return IslandEvolution(islands, generation, evaluations, reason)
