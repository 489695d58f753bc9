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

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from tidgap.backends import Backend, load
from tidgap.backends.evaluator import INVALID, OrderedEvaluator
from tidgap.backends.xp import namespace, to_host
from tidgap.optimize.backward_rules import FREE, MIRRORED, breaks
from tidgap.optimize.ga import GeneticSettings, random_chromosomes
from tidgap.optimize.genome import GENE, Population
from tidgap.optimize.joint_operators import (
    JointGenes,
    Mutator,
    Repair,
    joint_breed,
    mirror,
    mutate_repaired,
)
from tidgap.optimize.limits import MemoryLevel, penalised
from tidgap.optimize.order_genes import canonical
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.run_memory import RunMemory

#: Generations between migrations.
MIGRATION_INTERVAL = 10
#: Individuals each island offers when migrating.
MIGRANTS = 4


#: ``(breed, repair, mutate)`` of a backend (:func:`backend_breeding`).
Breeding = tuple[Callable[..., JointGenes], Repair, Mutator]


def backend_breeding(record: Backend) -> Breeding:
    """``(breed, repair, mutate)`` on ``record``'s backend: its fused breeding and mutation
    kernels and compiled repair where it has them, else :func:`joint_breed`,
    :func:`canonical` and :func:`mutate_repaired` over its array module."""
    repair = canonical if record.repair is None else load(record.repair)
    breeder = partial(joint_breed, repair=repair)
    if record.joint_breeder is not None:
        breeder = load(record.joint_breeder)
    mutator = partial(mutate_repaired, repair=repair)
    if record.joint_mutator is not None:
        mutator = load(record.joint_mutator)
    return breeder, repair, mutator


@dataclass(frozen=True)
class JointSpace:
    """What every island shares: the evaluator, the caps (``(S,)`` units per direction),
    ``width`` (the chromosomes' ``K``), the breeder (:func:`joint_breed` or a fused kernel
    with its signature), the repair, the mutation the annealing steps with
    (:func:`mutate_repaired` or a fused twin), and the ``backward`` rule
    (:mod:`tidgap.optimize.backward_rules`): plans it refuses score
    :data:`~tidgap.backends.evaluator.INVALID`, and under ``mirrored`` every individual is
    made mirrored (:meth:`repaired`; the breeder and mutator are told :attr:`mirrored`), with
    the caps of :func:`~tidgap.optimize.backward_rules.rule_caps`; ``memory``: where given,
    peaks and limits count every stage as ``tidgap run`` holds it
    (:mod:`tidgap.optimize.run_memory`)."""

    evaluator: OrderedEvaluator
    forward_caps: Any
    backward_caps: Any
    width: int
    breed: Callable[..., JointGenes] = joint_breed
    repair: Repair = canonical
    mutate: Mutator = mutate_repaired
    backward: str = FREE
    memory: RunMemory | None = None

    def evaluate(self, genes: JointGenes) -> tuple[Any, Any]:
        """``(times (P,), peaks (P, S))`` of repaired ``genes`` in ticks and samples (with
        :attr:`memory`, what each stage holds as ``tidgap run`` runs it, in its units:
        :meth:`~tidgap.optimize.run_memory.RunMemory.held`)."""
        times, peaks = self.evaluator.evaluate(
            Population(genes.forward, genes.backward, genes.codes)
        )
        if self.memory is not None:
            peaks = self.memory.held(peaks, genes.forward, genes.backward, genes.lead)
        if self.backward != FREE:
            xp = namespace(times)
            times = xp.where(breaks(self.backward, genes.forward, genes.backward), INVALID, times)
        return times, peaks

    def limit(self, level: MemoryLevel) -> Any:
        """``(S,)`` int64: what ``level`` allows each stage, as :meth:`evaluate` counts
        peaks (samples; with :attr:`memory`, its units:
        :meth:`~tidgap.optimize.run_memory.RunMemory.limit`)."""
        if self.memory is not None:
            return self.memory.limit(level)
        xp = namespace(self.forward_caps)
        return xp.asarray(level.held, dtype=xp.int64)

    @property
    def mirrored(self) -> bool:
        """Whether the breeder and mutator make mirrored children (the ``mirrored`` rule)."""
        return self.backward == MIRRORED

    @property
    def partition_genes(self) -> tuple[int, ...]:
        """The partition rows a local step moves: the forward only under ``mirrored`` (the
        backward follows it), else both (0 forward, 1 backward)."""
        return (0,) if self.mirrored else (0, 1)

    def repaired(self, genes: JointGenes) -> JointGenes:
        """``genes`` (any leads) made valid: mirrored under the ``mirrored`` rule
        (:func:`mirror`), then repaired."""
        if self.mirrored:
            genes = mirror(genes, self.backward_caps)
        return genes.repaired(self.repair)

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
        return self.repaired(JointGenes(forward, backward, lead))


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
        cls,
        level: MemoryLevel,
        candidates: JointGenes,
        times: Any,
        peaks: Any,
        size: int,
        held: Any,
        owned: bool = False,
    ) -> Island:
        """The ``size`` fittest under ``level`` of ``candidates`` (repaired) with their
        ``times`` ``(n,)`` and ``peaks`` ``(n, S)``; ``held``: the level as the peaks count
        (:meth:`JointSpace.limit`). ``owned``: on the host, the island takes the candidates'
        arrays, reordered in place (:meth:`JointGenes.reordered`), instead of a copy of them
        (the caller reads them no more; on a GPU, a copy: a row at a time would launch a
        kernel per row)."""
        xp = namespace(candidates.forward)
        fitness = penalised(times, peaks, held)
        ranked = xp.argsort(fitness, kind="stable")
        keep = ranked[:size]
        in_place = owned and xp is np
        genes = candidates.reordered(to_host(ranked), size) if in_place else candidates.take(keep)
        island = cls(level, held, genes, times[keep], peaks[keep], fitness[keep])
        island.best_fitness = int(fitness[keep[0]])
        return island

    def adopt(self, genes: JointGenes, times: Any, peaks: Any) -> None:
        """Put the one individual ``genes`` (``(1, S, K)``, repaired, with its ``times``
        ``(1,)`` and ``peaks`` ``(1, S)``) in place of the least fit."""
        xp = namespace(times)
        worst = int(xp.argmax(self.fitness))
        for mine, given in zip(self.genes.arrays(), genes.arrays(), strict=True):
            mine[worst] = given[0]
        self.times[worst], self.peaks[worst] = times[0], peaks[0]
        self.fitness[worst] = penalised(times, peaks, self.held)[0]

    def _replace(self, genes: JointGenes, times: Any, peaks: Any) -> None:
        """Set the population (fitness recomputed under this island's level)."""
        self.genes, self.times, self.peaks = genes, times, peaks
        self.fitness = penalised(times, peaks, self.held)

    def _join(self, kept: Any, genes: JointGenes, times: Any, peaks: Any) -> None:
        """The individuals at ``kept`` followed by new ones (as many as the rest, repaired),
        written over this island's own arrays (no fresh arrays each generation: at 64
        stages their page faults cost more than the copy)."""
        count = len(kept)
        mine = [*self.genes.arrays(), self.times, self.peaks]
        firsts = [*self.genes.take(kept).arrays(), self.times[kept], self.peaks[kept]]
        rests = [*genes.arrays(), times, peaks]
        for array, first, rest in zip(mine, firsts, rests, strict=True):
            array[:count] = first
            array[count:] = rest
        self.fitness = penalised(self.times, self.peaks, self.held)

    def elites(self, count: int) -> Any:
        """Indices of the ``count`` fittest (first on ties)."""
        return namespace(self.fitness).argsort(self.fitness, kind="stable")[:count]

    def offspring(
        self,
        settings: GeneticSettings,
        space: JointSpace,
        rng: CounterRng,
        out: JointGenes | None = None,
    ) -> JointGenes:
        """The next generation's children (repaired), bred from this one (into ``out``,
        :meth:`children` of them with codes, where given)."""
        return space.breed(
            self.genes,
            self.fitness,
            space.forward_caps,
            space.backward_caps,
            rng,
            self.children(settings),
            settings.crossover_rate,
            settings.mutation_rate,
            settings.tournament_size,
            mirrored=space.mirrored,
            out=out,
        )

    def children(self, settings: GeneticSettings) -> int:
        """How many children a generation makes: all but the elites."""
        return self.genes.size - settings.elites

    def accept(self, settings: GeneticSettings, genes: JointGenes, times: Any, peaks: Any) -> None:
        """The next generation: this one's elites, then ``genes`` with their ``times`` and
        ``peaks``."""
        self._join(self.elites(settings.elites), genes, times, peaks)

    def fresh(self, settings: GeneticSettings, space: JointSpace, rng: CounterRng) -> JointGenes:
        """Random individuals for all but the elites: a restart (:meth:`accept` them, then
        :meth:`restarted`)."""
        return space.random(self.children(settings), rng)

    def restarted(self) -> None:
        """Count stagnation from a restart."""
        self.since_improvement = 0

    def step(self, settings: GeneticSettings, space: JointSpace, rng: CounterRng) -> int:
        """Breed one generation in place (elitism keeps the best); return children scored."""
        offspring = self.offspring(settings, space, rng)
        self.accept(settings, offspring, *space.evaluate(offspring))
        return offspring.size

    def receive(self, genes: JointGenes, times: Any, peaks: Any) -> None:
        """Put the fittest of the migrants (by this island's level) in place of the least
        fit individual, if it beats this island's best."""
        fitness = penalised(times, peaks, self.held)
        best = int(namespace(times).argmin(fitness))
        if int(fitness[best]) >= int(self.fitness.min()):
            return
        worst = int(namespace(times).argmax(self.fitness))
        for mine, theirs in zip(self.genes.arrays(), genes.arrays(), strict=True):
            mine[worst] = theirs[best]  # the island owns its arrays (_join, seeded: copies)
        self.times[worst], self.peaks[worst] = times[best], peaks[best]
        self.fitness[worst] = fitness[best]

    def note_progress(self) -> bool:
        """Update the best fitness; whether it improved this generation."""
        current = int(self.fitness.min())
        improved = current < self.best_fitness
        self.best_fitness = min(current, self.best_fitness)
        self.since_improvement = 0 if improved else self.since_improvement + 1
        return improved


def pooled(islands: list[Island], count: int | None = None) -> tuple[JointGenes, Any, Any]:
    """``(genes, times, peaks)`` of every island's ``count`` fittest (all if ``None``), one
    island after another."""
    chosen = [slice(None) if count is None else island.elites(count) for island in islands]
    genes = JointGenes.concatenate([i.genes.take(c) for i, c in zip(islands, chosen, strict=True)])
    xp = namespace(genes.forward)
    times = xp.concatenate([i.times[c] for i, c in zip(islands, chosen, strict=True)])
    peaks = xp.concatenate([i.peaks[c] for i, c in zip(islands, chosen, strict=True)])
    return genes, times, peaks


def fastest_within(times: Any, peaks: Any, held: Any) -> int | None:
    """The index of the fastest individual (first on ties) whose ``peaks`` ``(n, S)`` are
    within a level (``held``: as the peaks count it, :meth:`JointSpace.limit`) and whose
    time is a plan's (not :data:`INVALID`), or ``None``."""
    xp = namespace(times)
    fitness = penalised(times, peaks, held)
    index = int(xp.argmin(fitness))
    found = int(fitness[index]) == int(times[index]) < INVALID
    return index if found else None


def migrate(islands: list[Island]) -> None:
    """Every island receives the fittest, by its own level, of all islands' elites."""
    migrants = pooled(islands, MIGRANTS)
    for island in islands:
        island.receive(*migrants)
