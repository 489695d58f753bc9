"""Batched simulated annealing after the joint GA: every island's fittest individuals
become annealing chains, all stepped at once.

Each step gives every chain one mutation drawn from the joint GA's registry and repairs it
(the space's ``mutate``: :func:`~tidgap.optimize.joint_operators.mutate_repaired`, rate 1,
or the backend's fused twin), scores the whole batch with the backend's evaluator, and
each chain takes its move if it is no slower under its island's memory level, or else with
probability ``exp(-delta / T)`` (Metropolis). ``T`` falls geometrically from
:data:`START_TEMPERATURE` to :data:`END_TEMPERATURE` times the level's best time at the
start, over the steps or the time given. A move over the level is never taken, so a chain
within it stays within it.
The GA converges into one basin; the chains' uphill moves cross to neighbouring ones
(gpt1-14 within 1F1B's memory, 20 s: from the GA's 7214.71 ms to 7172.12; the best plan
known there takes 7153.19). The same seed and step count give the same chains on NumPy
and Numba (tested), and on CUDA, which runs the same array code on CuPy (tested through
the stand-in; on a real GPU, ``exp`` may round differently in the last place).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidgap.backends.xp import namespace
from tidgap.optimize.joint import Island, JointSpace
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.limits import OVER_LIMIT, penalised
from tidgap.optimize.rng import CounterRng

#: Temperatures at the first and the last step, relative to each level's best time.
START_TEMPERATURE = 1e-2
END_TEMPERATURE = 1e-4


@dataclass(frozen=True)
class Annealing:
    """How long the chains run: at most ``steps`` steps, until ``deadline`` (a
    ``time.perf_counter()`` value; at least one of the two is given) and until
    ``interrupted()`` names a signal. ``begun`` is how far the schedule was before a
    resume (``0..1``): the time to the deadline covers the rest."""

    steps: int | None = None
    deadline: float | None = None
    interrupted: Callable[[], str | None] | None = None
    begun: float = 0.0

    def stopped(self) -> bool:
        """Whether a signal asked to stop."""
        return self.interrupted is not None and self.interrupted() is not None

    def progress(self, step: int, started: float) -> float:
        """How far the schedule is, ``0..1``: the larger of the steps and the time done."""
        if self.steps == 0:
            return 1.0
        done = 0.0 if self.steps is None else step / self.steps
        if self.deadline is not None:
            span = max(self.deadline - started, 1e-9)
            elapsed = (time.perf_counter() - started) / span
            done = max(done, self.begun + (1 - self.begun) * elapsed)
        return min(done, 1.0)


@dataclass
class Chains:
    """The chains, island after island: ``genes`` (``(C, S, K)``, repaired), ``fitness``
    ``(C,)`` ticks under each chain's level, ``held`` ``(C, S)`` its level's samples,
    ``scale`` ``(C,)`` its level's best time at the start (ticks, at least 1), ``offsets``
    where each island's chains start (its fittest first) and where the last island's end."""

    genes: JointGenes
    fitness: Any
    held: Any
    scale: Any
    offsets: list[int]

    @classmethod
    def of(cls, islands: list[Island], count: int | None = None) -> Chains:
        """One chain per individual of every island (its ``count`` fittest, when given)."""
        xp = namespace(islands[0].fitness)
        chosen = [
            island.elites(island.genes.size if count is None else count) for island in islands
        ]
        sizes = [len(c) for c in chosen]
        offsets = [0, *itertools.accumulate(sizes)]
        fitness = xp.concatenate([i.fitness[c] for i, c in zip(islands, chosen, strict=True)])
        best = fitness[xp.asarray(offsets[:-1])].astype(xp.float64)
        best = xp.clip(best, 1.0, float(OVER_LIMIT))  # a plan of 0 ticks: temperatures of 1
        return cls(
            JointGenes.concatenate([i.genes.take(c) for i, c in zip(islands, chosen, strict=True)]),
            fitness,
            xp.repeat(xp.stack([island.held for island in islands]), sizes, axis=0),
            xp.repeat(best, sizes),
            offsets,
        )


@dataclass
class AnnealState:
    """An annealing under way: its ``chains``; each island's fittest individual any of its
    chains reached (``best``, ``(1, S, K)`` genes each, ``best_fitness`` ticks); the
    ``step`` s taken and how far the schedule is (``done``, ``0..1``: 1 once it ended on
    its steps or deadline)."""

    chains: Chains
    best: list[JointGenes]
    best_fitness: list[int]
    step: int = 0
    done: float = 0.0

    @classmethod
    def start(cls, islands: list[Island], per_island: int | None = None) -> AnnealState:
        """Chains from every island's population (its ``per_island`` fittest, when given),
        each island's best its fittest chain."""
        chains = Chains.of(islands, per_island)
        first = chains.offsets[:-1]
        best = [_copy(chains.genes.take(slice(i, i + 1))) for i in first]
        return cls(chains, best, [int(chains.fitness[i]) for i in first])

    @property
    def evaluations(self) -> int:
        """Chains scored: steps times chains."""
        return self.step * self.chains.genes.size

    def found(self) -> list[tuple[JointGenes, int] | None]:
        """Per island, its best and fitness; ``None`` where none is within its level."""
        return [
            (genes, value) if value < OVER_LIMIT else None
            for genes, value in zip(self.best, self.best_fitness, strict=True)
        ]


def anneal(
    islands: list[Island],
    space: JointSpace,
    rng: CounterRng,
    annealing: Annealing,
    per_island: int | None = None,
    state: AnnealState | None = None,
    after_step: Callable[[AnnealState], None] | None = None,
) -> tuple[list[tuple[JointGenes, int] | None], int]:
    """Anneal chains started from every island's population (its ``per_island`` fittest,
    when given), or go on with ``state`` (a resumed one); ``after_step(state)`` is called
    after each step (a checkpoint). Returns, per island, the fittest individual any of its
    chains reached (``(1, S, K)`` genes and its fitness in ticks, ``None`` if none is within
    the island's level) and the evaluations made (steps times chains, a resumed state's
    steps included)."""
    xp = namespace(islands[0].fitness)
    state = AnnealState.start(islands, per_island) if state is None else state
    chains = state.chains
    started = time.perf_counter()
    ratio = END_TEMPERATURE / START_TEMPERATURE
    while not annealing.stopped():
        state.done = annealing.progress(state.step, started)
        if state.done >= 1:
            break
        moved = space.mutate(
            chains.genes, space.forward_caps, space.backward_caps, rng, 1.0, mirrored=space.mirrored
        )
        fitness = penalised(*space.evaluate(moved), chains.held)
        delta = (fitness - chains.fitness).astype(xp.float64)
        temperature = chains.scale * (START_TEMPERATURE * ratio**state.done)
        chance = xp.exp(-xp.clip(delta / temperature, 0.0, 700.0))
        take = (delta <= 0) | (rng.random((chains.genes.size,)) < chance)
        take &= fitness < OVER_LIMIT
        _take_moves(take, moved, chains.genes)
        chains.fitness = xp.where(take, fitness, chains.fitness)
        _keep_best(state.best, state.best_fitness, moved, fitness, chains.offsets)
        state.step += 1
        if after_step is not None:
            after_step(state)
    return state.found(), state.evaluations


def _take_moves(take: Any, moved: JointGenes, chains: JointGenes) -> None:
    """Copy into ``chains``, in place, the ``moved`` chains that ``take`` ``(C,)`` marks
    (only their rows: most steps take few)."""
    xp = namespace(take)
    index = xp.flatnonzero(take)
    for new, old in zip(moved.arrays(), chains.arrays(), strict=True):
        if new is not old:
            old[index] = new[index]


def _copy(genes: JointGenes) -> JointGenes:
    """``genes`` in arrays of their own (not views of the chains, which change in place)."""
    xp = namespace(genes.forward)
    return JointGenes(*(xp.array(a, copy=True) for a in genes.arrays()))


def _keep_best(
    best: list[JointGenes],
    best_fitness: list[int],
    moved: JointGenes,
    fitness: Any,
    offsets: list[int],
) -> None:
    """Each island's fittest so far, updated with this step's ``moved`` chains (island
    ``i``'s at ``offsets[i]:offsets[i + 1]``)."""
    xp = namespace(fitness)
    for i, (start, end) in enumerate(itertools.pairwise(offsets)):
        index = start + int(xp.argmin(fitness[start:end]))
        if int(fitness[index]) < best_fitness[i]:
            best_fitness[i] = int(fitness[index])
            best[i] = _copy(moved.take(slice(index, index + 1)))
