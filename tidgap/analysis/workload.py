"""The throughput workload of ``tidgap bench`` and ``pytest bench``: problems and random
valid populations to evaluate.

The default problem (:func:`synthetic_problem`) is the one of the README's performance
table: ``S = 8`` heterogeneous affine stages, ``B = 256`` samples in units of 1; its
populations have ``K = 32`` columns and 12..20 microbatches per stage and direction
(:func:`random_chromosomes`), with, for ordered plans, per stage the repaired order of a
random window (:func:`ordered_population`). Any other problem gets the random individuals
a search starts from (:func:`search_population`). Populations larger than :data:`BASE`
repeat :data:`BASE` drawn individuals (:func:`repeated`): an evaluation's cost does not
depend on which partitions it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from tidgap.backends.evaluator import OrderedEvaluator, create_evaluator
from tidgap.backends.ticks import TickedProblem, tick_problem
from tidgap.model.plan import Plan
from tidgap.model.problem import Link, Problem, Stage
from tidgap.model.timefn import affine
from tidgap.optimize.ga import random_chromosomes as search_chromosomes
from tidgap.optimize.genome import Population, decode_plan, encode_order
from tidgap.optimize.joint import JointSpace
from tidgap.optimize.preparation import chromosome_width
from tidgap.optimize.rng import CounterRng
from tidgap.schedules.families import SCHEDULES
from tidgap.schedules.ir import repair, window_order

STAGES, BATCH, WIDTH = 8, 256, 32
#: Microbatches per stage and direction of the default problem's individuals, inclusive.
COUNTS = (12, 20)
#: Individuals drawn; a larger population repeats them.
BASE = 4096
#: Seeds of the flush and the ordered populations (those of ``pytest bench``).
FLUSH_SEED, ORDERED_SEED = 20240601, 20261201

#: ``draw(rng, size)``: ``(size, S, K)`` int32 chromosomes.
Draw = Callable[[np.random.Generator, int], np.ndarray]


def synthetic_problem() -> Problem:
    """The default problem: heterogeneous affine stages and links (deterministic)."""
    stages = [
        Stage(
            forward=affine(0.4 + 0.05 * s, 0.010 * (1 + s % 3)),
            backward=affine(0.8 + 0.10 * s, 0.021 * (1 + s % 3)),
            tail=0.3 + 0.02 * s,
        )
        for s in range(STAGES)
    ]
    links = [
        Link(forward=affine(0.05, 0.002 + 0.0005 * s), backward=affine(0.06, 0.0025))
        for s in range(STAGES - 1)
    ]
    return Problem(name="bench-s8-b256", batch_size=BATCH, unit=1, stages=stages, links=links)


def random_chromosomes(rng: np.random.Generator, size: int) -> np.ndarray:
    """``(size, S, K)`` int32: random compositions of ``B`` with 12..20 parts, zero-padded."""
    genes = np.zeros((size, STAGES, WIDTH), dtype=np.int32)
    for p in range(size):
        for s in range(STAGES):
            count = int(rng.integers(COUNTS[0], COUNTS[1] + 1))
            cuts = np.sort(rng.choice(np.arange(1, BATCH), size=count - 1, replace=False))
            genes[p, s, :count] = np.diff(np.concatenate(([0], cuts, [BATCH])))
    return genes


def ordered_population(
    rng: np.random.Generator, problem: Problem, draw: Draw = random_chromosomes, size: int = BASE
) -> Population:
    """``size`` random chromosomes from ``draw`` and, per individual, repaired
    random-window orders (``(size, S, 2K)`` int8)."""
    forward, backward = draw(rng, size), draw(rng, size)
    width = forward.shape[2]
    orders = np.empty((size, forward.shape[1], 2 * width), dtype=np.int8)
    for p in range(size):
        plan = decode_plan(forward[p], backward[p], problem)
        windows = rng.integers(1, problem.batch_size + 1, size=problem.num_stages).tolist()
        order = repair(
            window_order(plan.forward, plan.backward, windows), plan.forward, plan.backward
        )
        orders[p] = encode_order(
            Plan.of(plan.forward, plan.backward, order=list(order.stages)), width
        )
    return Population(forward, backward, orders)


def default_population(family: str, size: int) -> Population:
    """``size`` individuals of the default problem for ``family`` (``flush``: chromosomes
    only; ``windowed``: with orders), as ``pytest bench`` draws them."""
    if SCHEDULES[family].separable:
        rng = np.random.default_rng(FLUSH_SEED)
        return Population(random_chromosomes(rng, size), random_chromosomes(rng, size))
    return ordered_population(np.random.default_rng(ORDERED_SEED), synthetic_problem(), size=size)


def search_population(problem: Problem, family: str, size: int, width: int) -> Population:
    """``size`` random individuals of ``problem`` with ``width`` columns, as a search draws
    its first generation (``windowed``: with the repaired orders of random leads)."""
    ticked = tick_problem(problem)
    rng = CounterRng(0)
    S, U = problem.num_stages, problem.num_units
    if SCHEDULES[family].separable:
        return Population(
            search_chromosomes(size, S, width, U, ticked.forward_caps, rng),
            search_chromosomes(size, S, width, U, ticked.backward_caps, rng),
        )
    evaluator = cast(OrderedEvaluator, create_evaluator(ticked, family, "numpy"))
    space = JointSpace(evaluator, ticked.forward_caps, ticked.backward_caps, width)
    genes = space.random(size, rng)
    return Population(genes.forward, genes.backward, genes.codes)


def population_arrays(population: Population) -> list[Any]:
    """``forward``, ``backward`` and, for an ordered population, ``order``."""
    genes = [population.forward, population.backward]
    return genes if population.order is None else [*genes, population.order]


def repeated(base: Population, size: int) -> Population:
    """``size`` individuals: ``base``'s first ones, or ``base`` repeated end to end."""
    arrays = population_arrays(base)
    if size <= base.size:
        return Population(*(a[:size] for a in arrays))
    count = -(-size // base.size)
    return Population(*(np.tile(a, (count,) + (1,) * (a.ndim - 1))[:size] for a in arrays))


@dataclass(frozen=True)
class Workload:
    """A problem, its tick tables, the chromosomes' ``width`` (``K``) and ``draw(family,
    size)``: ``size`` host individuals of that family."""

    problem: Problem
    ticked: TickedProblem
    width: int
    draw: Callable[[str, int], Population]


def default_workload() -> Workload:
    """The README's: :func:`synthetic_problem`, ``K = 32``, :func:`default_population`."""
    problem = synthetic_problem()
    return Workload(problem, tick_problem(problem), WIDTH, default_population)


def problem_workload(problem: Problem) -> Workload:
    """``problem`` with :func:`search_population`'s individuals, ``K = 32`` (or the problem's
    units if fewer, or the fewest microbatches its caps allow if more)."""
    width = chromosome_width(problem, WIDTH, [])

    def draw(family: str, size: int) -> Population:
        return search_population(problem, family, size, width)

    return Workload(problem, tick_problem(problem), width, draw)
