"""The joint GA as ask/tell: ordered plans on memory islands between generations.

:meth:`JointOptimizer.ask` breeds every island's children (one population, island after
island), or the random individuals of the islands that restart; :meth:`JointOptimizer.tell`
takes one fitness per individual (and each stage's peak, which the islands' memory levels
need) and makes the next generation, migrating every
:data:`~tidgap.optimize.joint.MIGRATION_INTERVAL` generations. One :meth:`ask` then
:meth:`tell` with the built-in scores is exactly a generation of the closed loop this
replaces: the same draws in the same order.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tidgap.backends.evaluator import INVALID
from tidgap.backends.ticks import TickedProblem
from tidgap.backends.xp import host_copy, namespace, to_host
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.dual_optimizer import (
    Asked,
    Counters,
    check_chromosomes,
    check_integers,
    check_told,
)
from tidgap.optimize.ga import GeneticSettings
from tidgap.optimize.genome import Population, decode_plan
from tidgap.optimize.joint import (
    MIGRATION_INTERVAL,
    Island,
    JointSpace,
    fastest_within,
    migrate,
)
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.limits import MemoryLevel, penalised
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.run_memory import FINE
from tidgap.optimize.scores import Fitness, Scores, custom_scores, to_ticks, whole_samples

#: The arrays of an island's state, in :meth:`JointOptimizer.state_arrays`.
ISLAND_ARRAYS = ("forward", "backward", "lead", "codes", "times", "peaks")


@dataclass
class JointOptimizer:
    """The joint GA's state: the ``islands`` (one per memory level), the shared ``space``,
    the GA ``settings``, the generator, the counters (stagnation counts generations in
    which no island improved), ``reported`` (the island of the limit in force, whose best
    is the result) and ``restart_after`` (an island that has not improved for that many
    generations keeps its elites and draws the rest anew; ``None``: never)."""

    problem: Problem
    ticked: TickedProblem
    islands: list[Island]
    space: JointSpace
    settings: GeneticSettings
    rng: CounterRng
    reported: int = 0
    restart_after: int | None = None
    fitness: Fitness | None = None
    counters: Counters = field(default_factory=Counters)
    asked: Asked | None = None
    pieces: list[tuple[int, JointGenes]] = field(default_factory=list)
    pending: JointGenes | None = None

    def __post_init__(self) -> None:
        if not self.counters.evaluations:
            self.counters.evaluations = sum(island.genes.size for island in self.islands)

    @property
    def xp(self) -> Any:
        """The array module of the populations."""
        return namespace(self.islands[0].times)

    @property
    def restarting(self) -> bool:
        """Whether the next :meth:`ask` draws restarts (some island has stagnated)."""
        return bool(self._stagnant())

    def _stagnant(self) -> list[int]:
        """The islands to restart before the next generation."""
        if self.restart_after is None:
            return []
        return [
            i
            for i, island in enumerate(self.islands)
            if island.since_improvement >= self.restart_after
        ]

    def ask(self) -> Population:
        """The next individuals to score, island after island: each island's children, or
        the random individuals of the islands that restart."""
        draws, stagnant = self.rng.draws, self._stagnant()
        if stagnant:
            self.pieces = [
                (i, self.islands[i].fresh(self.settings, self.space, self.rng)) for i in stagnant
            ]
            self.pending = JointGenes.concatenate([piece for _, piece in self.pieces])
        else:  # every island's children bred into their part of one population
            sizes = [island.children(self.settings) for island in self.islands]
            stages, width = self.islands[0].genes.forward.shape[1:]
            self.pending = JointGenes.empty(sum(sizes), stages, width, self.xp)
            bounds = itertools.pairwise([0, *itertools.accumulate(sizes)])
            parts = [self.pending.take(slice(*bound)) for bound in bounds]
            self.pieces = [
                (i, island.offspring(self.settings, self.space, self.rng, out=part))
                for i, (island, part) in enumerate(zip(self.islands, parts, strict=True))
            ]
        population = Population(self.pending.forward, self.pending.backward, self.pending.codes)
        self.asked = Asked(population, bool(stagnant), draws)
        return population

    def evaluate(self, population: Population) -> Scores:
        """The scores of ``population`` (the last asked): iteration times in ticks and the
        peaks, with the optimizer's own fitness applied when it has one."""
        check_told(self.asked, population, "evaluate()")
        scores = self._scores(*self.space.evaluate(self.pending))
        return scores if self.fitness is None else custom_scores(self.fitness, population, scores)

    def _scores(self, times: Any, counted: Any) -> Scores:
        """The built-in :class:`Scores` of ``times`` (ticks) and peaks as
        :meth:`JointSpace.evaluate` counts them (with run memory, ``peaks`` rounded up to
        samples, at most the batch, and ``units`` the counts, which may be more)."""
        if self.space.memory is None:
            return Scores(times, self.ticked.tick, peaks=counted)
        samples = self.xp.minimum(-(-counted // FINE), self.problem.batch_size)
        return Scores(times, self.ticked.tick, peaks=samples, units=counted)

    def rescore(self) -> None:
        """Score every island again from its genes (leads repaired) with :meth:`evaluate`'s
        fitness: after the fitness changed, or a state was restored."""
        for island in self.islands:
            genes = island.genes.repaired(self.space.repair)
            times, peaks = self.space.evaluate(genes)
            if self.fitness is not None:
                population = Population(genes.forward, genes.backward, genes.codes)
                built_in = self._scores(times, peaks)
                times = custom_scores(self.fitness, population, built_in).ticks
            island._replace(genes, times, peaks)
            island.best_fitness = int(island.fitness.min())

    def tell(self, population: Population, fitness: Scores | Any, peaks: Any = None) -> None:
        """Make the next generation from the last :meth:`ask`'s ``population`` and its
        ``fitness``: :class:`Scores`, or ``(P,)`` values in the problem's time unit (``inf``
        rejects one) with ``peaks`` ``(P, S)`` samples (computed with the built-in
        evaluator when not given; the memory levels select on them; a search counting
        memory as ``tidgap run`` holds it takes :class:`Scores`' ``units`` where they are
        given, else counts the samples whole, less the best 1F1B's overhead where it is
        negative: so its samples are within the 1F1B level)."""
        asked = check_told(self.asked, population)
        xp = self.xp
        units = None
        if peaks is not None:
            peaks = whole_samples(peaks, xp)
        if isinstance(fitness, Scores):
            ticks = fitness.ticks
            if peaks is None:
                peaks, units = fitness.peaks, fitness.units
        else:
            ticks = to_ticks(xp.asarray(fitness), self.ticked.tick)
        if peaks is None:
            units = self.space.evaluate(self.pending)[1]
        elif units is None and self.space.memory is not None:
            units = self.space.memory.samples_units(xp.asarray(peaks, dtype=xp.int64))
        peaks = peaks if units is None else units
        ticks, peaks = xp.asarray(ticks, dtype=xp.int64), xp.asarray(peaks, dtype=xp.int64)
        stages = self.problem.num_stages
        if ticks.shape != (population.size,) or peaks.shape != (population.size, stages):
            raise ValueError(
                f"fitness of shape {ticks.shape} and peaks {peaks.shape} for a population of "
                f"{population.size} on {stages} stages"
            )
        start = 0
        for i, genes in self.pieces:
            part = slice(start, start + genes.size)
            self.islands[i].accept(self.settings, genes, ticks[part], peaks[part])
            start += genes.size
        self.asked, self.pieces, self.pending = None, [], None
        self.counters.evaluations += population.size
        if asked.restart:
            for i in self._stagnant():
                self.islands[i].restarted()
            return
        self.counters.generation += 1
        if self.counters.generation % MIGRATION_INTERVAL == 0 and len(self.islands) > 1:
            migrate(self.islands)
        improved = [island.note_progress() for island in self.islands]
        stalled = self.counters.since_improvement + 1
        self.counters.since_improvement = 0 if any(improved) else stalled

    def progress_ticks(self) -> int:
        """The reported island's best time, in ticks."""
        island = self.islands[self.reported]
        return int(to_host(island.times[island.elites(1)])[0])

    def best_within(self, level: MemoryLevel) -> tuple[JointGenes, int] | None:
        """The fastest individual of any island within ``level`` (first on ties, island after
        island; genes of its own) and its ticks, or ``None``."""
        times, peaks = self.pooled()
        index = fastest_within(times, peaks, self.space.limit(level))
        if index is None:
            return None
        return self._individual(index), int(times[index])

    def leanest(self, level: MemoryLevel) -> JointGenes | None:
        """The individual of any island least over ``level`` (the fewest units over, summed
        over the stages; the first on ties; genes of its own), or ``None`` where no order
        is valid."""
        times, peaks = self.pooled()
        index = int(self.xp.argmin(penalised(times, peaks, self.space.limit(level))))
        return self._individual(index) if int(times[index]) < INVALID else None

    def pooled(self) -> tuple[Any, Any]:
        """Every island's ``times`` ``(n,)`` and ``peaks`` ``(n, S)``, island after island."""
        xp = self.xp
        times = xp.concatenate([island.times for island in self.islands])
        return times, xp.concatenate([island.peaks for island in self.islands])

    def _individual(self, index: int) -> JointGenes:
        """Individual ``index`` of the islands' pooled order, as ``(1, S, K)`` genes."""
        ends = list(itertools.accumulate(island.genes.size for island in self.islands))
        which = bisect.bisect_right(ends, index)  # the genes are not pooled: only their island's
        row = index - (ends[which - 1] if which else 0)
        return self.islands[which].genes.take(self.xp.asarray([row]))

    def best(self) -> tuple[Plan, float] | None:
        """The best plan within the limit in force and its fitness in the problem's time
        unit (the iteration time, for the built-in fitness), or ``None`` if none is within."""
        found = self.best_within(self.islands[self.reported].level)
        if found is None:
            return None
        genes, ticks = found
        return self.plan(genes, 0), float(self.ticked.to_time(ticks))

    def plan(self, genes: JointGenes | Population, index: int) -> Plan:
        """The plan of individual ``index`` of ``genes``."""
        codes = genes.codes if isinstance(genes, JointGenes) else genes.order
        return decode_plan(genes.forward[index], genes.backward[index], self.problem, codes[index])

    def plans(self, population: Population) -> list[Plan]:
        """Every individual of ``population`` as a plan."""
        host = Population(
            *(to_host(a) for a in (population.forward, population.backward, population.order))
        )
        return [self.plan(host, p) for p in range(host.size)]

    def restored_genes(self, saved: list[np.ndarray], like: JointGenes, owner: str) -> JointGenes:
        """Saved ``forward``, ``backward``, ``lead`` (and ``codes``) as genes on the device,
        checked against ``like`` (the same shapes, integers; every row a partition of the
        batch within the caps): ``ValueError`` naming ``owner``'s array otherwise."""
        current = like.arrays()
        for name, array, now in zip(ISLAND_ARRAYS, saved, current, strict=False):
            check_integers(array, now.shape, f"{owner} {name}")
        units = self.ticked.num_units
        caps = (self.ticked.forward_caps, self.ticked.backward_caps)
        for name, array, cap in zip(ISLAND_ARRAYS[:2], saved[:2], caps, strict=True):
            check_chromosomes(array, units, cap, f"{owner} {name}")
        return JointGenes(
            *(self.xp.asarray(a.astype(c.dtype)) for a, c in zip(saved, current, strict=False))
        )

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Every island's population, times and peaks, and its stagnation: host copies (a
        state stays as it was while the search goes on)."""
        arrays: dict[str, np.ndarray] = {}
        for i, island in enumerate(self.islands):
            values = (*island.genes.arrays(), island.times, island.peaks)
            arrays |= {
                f"island{i}_{name}": host_copy(a)
                for name, a in zip(ISLAND_ARRAYS, values, strict=True)
            }
            arrays[f"island{i}_progress"] = np.array(
                [island.best_fitness, island.since_improvement]
            )
        return arrays

    def restore_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Put back the islands :meth:`state_arrays` saved (same shapes, checked; an
        island's generations since it improved at most :attr:`counters`' generations)."""
        xp = self.xp
        for i, island in enumerate(self.islands):
            values = [arrays[f"island{i}_{name}"] for name in ISLAND_ARRAYS]
            now = (island.times, island.peaks)
            for name, saved, current in zip(ISLAND_ARRAYS[4:], values[4:], now, strict=True):
                check_integers(saved, current.shape, f"island {i}'s {name}")
            island._replace(
                self.restored_genes(values[:4], island.genes, f"island {i}'s"),
                xp.asarray(values[4].astype(np.int64)),
                xp.asarray(values[5].astype(island.peaks.dtype)),
            )
            progress = arrays[f"island{i}_progress"]
            check_integers(progress, (2,), f"island {i}'s progress")
            if (progress < 0).any():
                raise ValueError(f"island {i}'s progress: {progress.tolist()}, not counts >= 0")
            run = self.counters.generation
            if progress[1] > run:
                raise ValueError(
                    f"island {i}'s progress: {int(progress[1])} generations since it "
                    f"improved, more than the {run} run"
                )
            island.best_fitness, island.since_improvement = (int(v) for v in progress)
