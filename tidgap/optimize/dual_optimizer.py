"""DGAP as ask/tell: the dual GA of a separable family (flush) between generations.

:meth:`DualOptimizer.ask` breeds the next children of both directions (or, after a
stagnation, the random individuals of a restart); :meth:`DualOptimizer.tell` takes their
scores, the two halves of the flush time, and makes the next generation. One
:meth:`ask` then :meth:`tell` with the built-in scores is exactly a generation of the
closed loop this replaces: the same draws in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tidgap.backends.evaluator import INVALID, SeparableEvaluator
from tidgap.backends.ticks import TickedProblem
from tidgap.backends.xp import host_copy, namespace, to_host
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.ga import Chromosomes, GeneticSettings
from tidgap.optimize.genome import Population, decode_plan
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.scores import Fitness, Scores, custom_scores, to_ticks


@dataclass
class Counters:
    """The GA's effort and stagnation: ``generation`` (children told), ``evaluations``
    (individuals told, the first population included), ``since_improvement``
    (generations) and ``best`` (ticks)."""

    generation: int = 0
    evaluations: int = 0
    since_improvement: int = 0
    best: int = 0

    def improved(self, current: int) -> None:
        """Note a generation whose best is ``current`` ticks."""
        self.generation += 1
        self.since_improvement = 0 if current < self.best else self.since_improvement + 1
        self.best = min(self.best, current)


@dataclass
class Asked:
    """The population handed out by the last ``ask`` and what it is: ``restart`` (random
    individuals for all but the elites) or children; ``draws``: the generator's counter
    before it (a state saved while it is pending is the state before the ``ask``)."""

    population: Population
    restart: Any
    draws: int


def check_integers(saved: np.ndarray, shape: tuple[int, ...], name: str) -> None:
    """``ValueError`` naming ``name`` unless ``saved`` is an integer array of ``shape``."""
    if saved.shape != tuple(shape) or saved.dtype.kind not in "iu":
        raise ValueError(f"{name}: {saved.dtype} {saved.shape}, not integers {tuple(shape)}")


def check_chromosomes(genes: np.ndarray, units: int, caps: np.ndarray, name: str) -> None:
    """``ValueError`` naming ``name`` unless every row of ``genes`` ``(P, S, K)`` is a
    partition of ``units``: sizes ``1..caps[s]`` first, zeros after."""
    sizes = genes.astype(np.int64)
    used = sizes > 0
    trailing = np.all(used[..., :-1] | ~used[..., 1:])
    within = np.all((sizes >= 0) & (sizes <= np.asarray(caps).reshape(1, -1, 1)))
    if not (trailing and within and np.all(sizes.sum(axis=2) == units)):
        raise ValueError(f"{name} population holds rows that are not partitions")


def check_told(asked: Asked | None, population: Population, call: str = "tell()") -> Asked:
    """The pending ask ``population`` answers (``ValueError`` naming ``call`` if it is not
    the last one asked)."""
    if asked is None or asked.population is not population:
        raise ValueError(f"{call} takes the population the last ask() returned")
    return asked


@dataclass
class DualOptimizer:
    """The dual GA's state: the forward and backward ``sides``, the GA ``settings``, the
    generator, the counters, and ``restart_after`` (generations without improvement after
    which both sides restart, keeping their elites; ``None``: never). With
    ``same_partition`` the chromosomes are one row, ``(P, 1, K)``, shared by every stage."""

    problem: Problem
    ticked: TickedProblem
    evaluator: SeparableEvaluator
    sides: tuple[Chromosomes, Chromosomes]
    settings: GeneticSettings
    rng: CounterRng
    same_partition: bool = False
    restart_after: int | None = None
    fitness: Fitness | None = None
    counters: Counters = field(default_factory=Counters)
    restarting: bool = False
    asked: Asked | None = None

    def __post_init__(self) -> None:
        if not self.counters.best:
            self.counters.best = self._best_total()
            self.counters.evaluations = self.sides[0].genes.shape[0]

    @property
    def xp(self) -> Any:
        """The array module of the populations."""
        return namespace(self.sides[0].genes)

    def ask(self) -> Population:
        """The next individuals to score: both sides' children (``(P - elites, S, K)``
        each), or random ones when both sides restart."""
        draws = self.rng.draws
        make = "fresh" if self.restarting else "offspring"
        forward, backward = (getattr(side, make)(self.settings, self.rng) for side in self.sides)
        population = Population(forward, backward)
        self.asked = Asked(population, self.restarting, draws)
        return population

    def evaluate(self, population: Population) -> Scores:
        """The scores of ``population``: the forward end and backward span (ticks), with the
        optimizer's own fitness applied when it has one."""
        halves = self.sides[0].score(population.forward), self.sides[1].score(population.backward)
        scores = Scores(halves[0] + halves[1], self.ticked.tick, halves)
        return scores if self.fitness is None else custom_scores(self.fitness, population, scores)

    def rescore(self) -> None:
        """Score the current populations again with :meth:`evaluate` (after the fitness
        changed)."""
        forward, backward = self.sides
        scores = self.evaluate(Population(forward.genes, backward.genes))
        assert scores.halves is not None, "a separable fitness has halves"
        forward.fitness, backward.fitness = scores.halves
        self.counters.best = self._best_total()

    def tell(self, population: Population, fitness: Scores | tuple[Any, Any]) -> None:
        """Make the next generation from the last :meth:`ask`'s ``population`` and its
        ``fitness``: :class:`Scores` with halves, or ``(forward, backward)`` values in the
        problem's time unit (each half selects its own side)."""
        asked = check_told(self.asked, population)
        if isinstance(fitness, Scores):
            if fitness.halves is None:
                raise ValueError("the flush family is separable: tell it Scores with halves")
            halves = fitness.halves
        else:
            forward, backward = fitness
            halves = (to_ticks(forward, self.ticked.tick), to_ticks(backward, self.ticked.tick))
        halves = tuple(self.xp.asarray(half, dtype=self.xp.int64) for half in halves)
        if any(half.shape != (population.size,) for half in halves):
            raise ValueError(f"fitness halves of shapes {[h.shape for h in halves]}, not "
                             f"({population.size},)")  # fmt: skip
        for side, children, ticks in zip(
            self.sides, (population.forward, population.backward), halves, strict=True
        ):
            side.accept(self.settings, children, ticks)
        self.asked = None
        self.counters.evaluations += population.size
        if asked.restart:
            self.restarting = False
            return
        self.counters.improved(self._best_total())
        if self.restart_after is not None and self.counters.since_improvement >= self.restart_after:
            self.restarting, self.counters.since_improvement = True, 0

    def progress_ticks(self) -> int:
        """The best flush time so far, in ticks."""
        return self.counters.best

    def _best_total(self) -> int:
        """Least forward plus least backward fitness, in ticks: one device-to-host copy."""
        forward, backward = (side.fitness for side in self.sides)
        return int(to_host(self.xp.stack([forward.min(), backward.min()])).sum())

    def best_genes(self) -> tuple[Any, Any, int, int]:
        """The best forward and backward chromosomes ``(S, K)`` and their ticks."""
        (forward, forward_ticks), (backward, backward_ticks) = (s.best() for s in self.sides)
        return forward, backward, forward_ticks, backward_ticks

    def best(self) -> tuple[Plan, float] | None:
        """The best plan (best forward joined to best backward) and its fitness in the
        problem's time unit (the iteration time, for the built-in fitness); ``None`` where
        a fitness of the caller's own rejected every individual of either side."""
        forward, backward, forward_ticks, backward_ticks = self.best_genes()
        if max(forward_ticks, backward_ticks) >= INVALID:
            return None
        plan = self.plan(forward, backward)
        return plan, float(self.ticked.to_time(forward_ticks + backward_ticks))

    def plan(self, forward: Any, backward: Any) -> Plan:
        """The plan of one individual's ``(S, K)`` (or shared ``(1, K)``) chromosomes."""
        plan = decode_plan(forward, backward, self.problem)
        if not self.same_partition:
            return plan
        stages = self.problem.num_stages
        return Plan.of(plan.forward * stages, plan.backward * stages)

    def plans(self, population: Population) -> list[Plan]:
        """Every individual of ``population`` as a plan."""
        forward, backward = to_host(population.forward), to_host(population.backward)
        return [self.plan(f, b) for f, b in zip(forward, backward, strict=True)]

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The populations and their fitness: host copies (a state stays as it was while
        the search goes on)."""
        names = ("forward", "backward")
        arrays = {f"{n}_genes": host_copy(s.genes) for n, s in zip(names, self.sides, strict=True)}
        arrays |= {
            f"{n}_fitness": host_copy(s.fitness) for n, s in zip(names, self.sides, strict=True)
        }
        arrays["restarting"] = np.array(self.restarting)
        return arrays

    def restore_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Put back the populations :meth:`state_arrays` saved (shapes and partitions
        checked: ``ValueError``); :meth:`rescore` then scores them."""
        for name, side in zip(("forward", "backward"), self.sides, strict=True):
            genes = arrays[f"{name}_genes"]
            check_integers(genes, side.genes.shape, name)
            check_chromosomes(genes, self.ticked.num_units, to_host(side.caps), name)
            side.genes = self.xp.asarray(genes.astype(side.genes.dtype))
        restarting = arrays["restarting"]
        if restarting.shape != () or restarting.dtype != np.bool_:
            raise ValueError("restarting is not one bool")
        self.restarting = bool(restarting)
