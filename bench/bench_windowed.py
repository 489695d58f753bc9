"""Ordered-plan evaluation throughput (issue 11): the windowed evaluators per CPU backend,
and one generation of the windowed search's joint GA.

Evaluation workloads (:data:`WORKLOADS`), ``P = 4096`` individuals each, unit 1, ``K = 32``,
12..20 microbatches per stage and direction, each individual with an explicit order: per
stage the order of a random window (1..B samples), repaired to validity
(``tidgap.schedules.ir.repair``), built outside the timed part:

- ``S = 8``, ``B = 256``: the flush benchmark's problem and chromosomes;
- ``S = 16``, ``B = 512``: that problem's stages twice over, and per individual two of its
  chromosomes side by side with every size doubled.

One evaluation is ``score`` of one individual. The pure-Python reference simulator runs on
a slice of 64 individuals. Numba and NumPy also score the populations priced as ``tidgap
run`` runs them (``tick_problem(problem, "run")``, ``tidgap search --pricing run``).

One generation: ``Island.step`` (the backend's breeding and repair as the search uses them,
``backend_breeding``, then ``evaluate``) on one island of ``P = 512`` under the stages' own
level, built as the windowed search builds them (``JointSpace.random``, ``Island.seeded``),
on the ``S = 8`` problem; it scores
``P - elites`` children (its evaluations), ``extra_info`` holds generations/s. Numba also
under the ``mirrored`` rule (``tidgap search --mirrored``: the island and every child
mirrored).

One annealing step: :func:`tidgap.optimize.anneal.anneal` for one step on four such
islands of ``ANNEAL_CHAINS`` (128, the search's chains per island: a search with four
memory levels): a mutation per chain, the repair, the evaluation and the acceptance.

Run: ``pytest bench/bench_windowed.py --benchmark-only`` (targets at ``S = 8``: Numba
>= 3e5/s, NumPy >= 2e4/s, Numba >= 50x the reference).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from bench_evaluate import BATCH, POPULATION, STAGES, WIDTH, random_chromosomes, synthetic_problem

from tidgap import Problem
from tidgap.analysis.workload import ORDERED_SEED, Draw, ordered_population
from tidgap.backends import BACKENDS, load
from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.ticks import RUN_PRICING, TickedProblem, tick_problem
from tidgap.backends.xp import to_host
from tidgap.optimize.anneal import Annealing, anneal
from tidgap.optimize.backward_rules import FREE, MIRRORED, rule_caps
from tidgap.optimize.ga import GeneticSettings
from tidgap.optimize.genome import Population, decode_plan
from tidgap.optimize.joint import Island, JointSpace, backend_breeding
from tidgap.optimize.limits import stage_level
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.run_memory import (
    BACKWARD,
    BACKWARD_CHUNK,
    DRAW_VIEWS,
    DRAWS,
    GRAPH_CHUNK,
    GRAPH_SAMPLE,
    INPUT,
    OUTPUT,
    ROWS,
    TASK,
    RunMemory,
)
from tidgap.optimize.windowed_finish import ANNEAL_CHAINS
from tidgap.schedules.families import SCHEDULES

ORACLE_SLICE = 64
#: Individuals of one island in the CPU generation benchmark (the search's default).
ISLAND = 512


def wide_problem() -> Problem:
    """``S = 16``, ``B = 512``: :func:`synthetic_problem`'s stages and links twice over."""
    base = synthetic_problem()
    links = [*base.links, base.links[-1], *base.links]
    return Problem(
        name="bench-s16-b512",
        batch_size=2 * BATCH,
        unit=1,
        stages=[*base.stages, *base.stages],
        links=links,
    )


def wide_chromosomes(rng: np.random.Generator, size: int) -> np.ndarray:
    """``(size, 16, K)``: two of :func:`random_chromosomes` per individual, sizes doubled
    (compositions of 512 with 12..20 parts)."""
    return 2 * random_chromosomes(rng, 2 * size).reshape(size, 2 * STAGES, WIDTH)


@dataclass(frozen=True)
class Workload:
    """One evaluation workload: ``label`` (``S=.. B=..``), its problem and chromosomes;
    ``suffix`` ends its benchmarks' names (none for the names the targets use)."""

    label: str
    problem: Callable[[], Problem]
    draw: Draw
    suffix: str


WORKLOADS = [
    Workload("S=8 B=256", synthetic_problem, random_chromosomes, ""),
    Workload("S=16 B=512", wide_problem, wide_chromosomes, " S=16 B=512"),
]


@pytest.fixture(scope="module", params=WORKLOADS, ids=[w.label for w in WORKLOADS])
def workload(request: pytest.FixtureRequest) -> tuple[Workload, Problem, TickedProblem, Population]:
    spec: Workload = request.param
    problem = spec.problem()
    population = ordered_population(np.random.default_rng(ORDERED_SEED), problem, spec.draw)
    return spec, problem, tick_problem(problem), population


@pytest.fixture(scope="module")
def reference(workload: tuple[Workload, Problem, TickedProblem, Population]) -> np.ndarray:
    """NumPy's scores, to check every backend's output outside the timed part."""
    _, _, ticked, population = workload
    return create_evaluator(ticked, "windowed", "numpy").score(population)


def group(spec: Workload) -> str:
    return f"windowed {spec.label} P={POPULATION}"


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_windowed_backend(
    benchmark: Any, throughput: Any, workload: Any, reference: np.ndarray, backend: str
) -> None:
    spec, _, ticked, population = workload
    evaluator = create_evaluator(ticked, "windowed", backend)
    evaluator.score(population)  # warm-up: Numba compiles (or loads its cache)
    benchmark.group = group(spec)
    if backend == "numba":
        from tidgap.fallback_cpu.threads import thread_count

        benchmark.extra_info["threads"] = thread_count()
    scores = benchmark(evaluator.score, population)
    assert np.array_equal(scores, reference)
    throughput(f"windowed-{backend}{spec.suffix}", benchmark, population.size)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_windowed_run_priced(benchmark: Any, throughput: Any, workload: Any, backend: str) -> None:
    """The same populations priced as ``tidgap run`` runs them (``tidgap search --pricing
    run``): Numba prices in its loop, NumPy through ``op_ticks``' array passes."""
    spec, problem, _, population = workload
    ticked = tick_problem(problem, RUN_PRICING)
    evaluator = create_evaluator(ticked, "windowed", backend)
    evaluator.score(population)  # warm-up
    benchmark.group = group(spec)
    scores = benchmark(evaluator.score, population)
    expected = create_evaluator(ticked, "windowed", "numpy").score(population)
    assert np.array_equal(scores, expected)
    throughput(f"windowed-{backend}-run-priced{spec.suffix}", benchmark, population.size)


def test_windowed_oracle(benchmark: Any, throughput: Any, workload: Any, reference: Any) -> None:
    spec, problem, ticked, population = workload
    plans = [
        decode_plan(population.forward[p], population.backward[p], problem, population.order[p])
        for p in range(ORACLE_SLICE)
    ]
    evaluate = SCHEDULES["windowed"].evaluate
    benchmark.group = group(spec)

    def run() -> list[float]:
        return [evaluate(problem, plan).iteration_time for plan in plans]

    times = benchmark(run)
    assert np.allclose(times, ticked.to_time(reference[:ORACLE_SLICE]), rtol=1e-6)
    throughput(f"windowed-oracle{spec.suffix}", benchmark, ORACLE_SLICE)


@dataclass
class Generation:
    """One island of the joint GA on the ``S = 8`` problem and what its ``step`` needs."""

    island: Island
    space: JointSpace
    settings: GeneticSettings
    rng: CounterRng

    @classmethod
    def on(cls, backend: str, size: int, seed: int = 0, backward: str = FREE) -> Generation:
        """An island of ``size`` random individuals (``K = 32``) on ``backend``, searched
        under the ``backward`` rule (its caps, :func:`rule_caps`)."""
        problem = synthetic_problem()
        ticked = tick_problem(problem)
        record = BACKENDS[backend]
        xp = record.namespace()
        caps = rule_caps(backward, ticked.forward_caps, ticked.backward_caps)
        space = JointSpace(
            create_evaluator(ticked, "windowed", backend),
            *(xp.asarray(c) for c in caps),
            WIDTH,
            *backend_breeding(record),
            backward=backward,
        )
        rng = CounterRng(seed, xp)
        start = space.random(size, rng)
        level = stage_level(problem)
        island = Island.seeded(level, start, *space.evaluate(start), size, space.limit(level))
        return cls(island, space, GeneticSettings(population=size), rng)

    def step(self) -> int:
        """One generation; the children scored."""
        return self.island.step(self.settings, self.space, self.rng)

    def check(self, backend: str = "numpy") -> None:
        """The island's times are ``backend``'s scores of its genes (on the host), and
        elitism kept its best."""
        genes = self.island.genes
        host = Population(*(to_host(a) for a in (genes.forward, genes.backward, genes.codes)))
        evaluator = create_evaluator(self.space.evaluator.ticked, "windowed", backend)
        assert np.array_equal(to_host(self.island.times), evaluator.score(host))
        assert int(self.island.fitness.min()) <= self.island.best_fitness


@pytest.mark.parametrize(
    ("backend", "backward"), [("numba", FREE), ("numpy", FREE), ("numba", MIRRORED)]
)
def test_windowed_generation(benchmark: Any, throughput: Any, backend: str, backward: str) -> None:
    generation = Generation.on(backend, ISLAND, backward=backward)
    children = generation.step()  # warm-up: Numba compiles (or loads its cache)
    rule = "" if backward == FREE else f" {backward}"
    benchmark.group = f"windowed generation{rule} S=8 B=256 P={ISLAND}"
    benchmark(generation.step)
    generation.check()
    genes = generation.island.genes
    assert backward == FREE or (to_host(genes.forward) == to_host(genes.backward)).all()
    throughput(f"generation-{backend}{rule} S=8 B=256 P={ISLAND}", benchmark, children)
    if benchmark.stats is not None:
        benchmark.extra_info["generations_per_second"] = 1 / benchmark.stats.stats.median


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_windowed_anneal_step(benchmark: Any, throughput: Any, backend: str) -> None:
    chains = ANNEAL_CHAINS or ISLAND
    generations = [Generation.on(backend, chains, seed) for seed in range(4)]
    islands, first = [g.island for g in generations], generations[0]

    def step() -> int:
        return anneal(islands, first.space, first.rng, Annealing(steps=1))[1]

    evaluations = step()  # warm-up: Numba compiles (or loads its cache)
    assert evaluations == 4 * chains
    benchmark.group = f"windowed annealing step S=8 B=256 4x{chains} chains"
    benchmark(step)
    throughput(f"anneal-{backend} S=8 B=256 4x{chains}", benchmark, evaluations)
    if benchmark.stats is not None:
        benchmark.extra_info["steps_per_second"] = 1 / benchmark.stats.stats.median


def run_memory(backend: str, batch_size: int = BATCH) -> RunMemory:
    """What the ``S = 8`` problem's stages hold as ``tidgap run`` runs them, with a GPT
    stage's figures (1.6 MB of activations a sample, a stored graph 1.59 MB a sample and
    8.7 KB a forward; recomputing: 32 KB of input, 70 KB of draws, a 1.4 MB working set a
    sample and 8.7 KB a forward), on ``backend``'s arrays, with its compiled twin where it
    has one."""
    record = BACKENDS[backend]
    xp = record.namespace()
    figures = np.zeros((ROWS, STAGES))
    figures[INPUT, 1:] = figures[OUTPUT, :-1] = 32768
    figures[DRAWS] = figures[DRAW_VIEWS] = 70000  # nn.Dropout masks
    figures[BACKWARD] = 1_400_000
    figures[TASK, 0] = figures[TASK, -1] = 512 * batch_size
    figures[GRAPH_SAMPLE], figures[GRAPH_CHUNK] = 1_590_000, 8704
    figures[BACKWARD_CHUNK] = 8704
    compiled = None if record.run_memory is None else load(record.run_memory)
    activation = xp.full(STAGES, 1_600_000.0)
    return RunMemory(xp.asarray(figures), activation, batch_size, 1, compiled)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_run_memory_count(benchmark: Any, throughput: Any, backend: str) -> None:
    """What an island's stages hold as ``tidgap run`` runs them (``RunMemory.held``, the
    run-priced search's memory count, about one evaluation per generation on Numba), equal
    on both backends."""
    generation = Generation.on(backend, ISLAND)
    genes, peaks = generation.island.genes, generation.island.peaks
    memory = run_memory(backend)

    def count() -> Any:
        return memory.held(peaks, genes.forward, genes.backward, genes.lead)

    held = count()  # warm-up: Numba compiles (or loads its cache)
    other = run_memory("numpy" if backend == "numba" else "numba")
    assert np.array_equal(held, other.held(peaks, genes.forward, genes.backward, genes.lead))
    benchmark.group = f"run memory count S=8 B=256 P={ISLAND}"
    benchmark(count)
    throughput(f"run-memory-{backend} S=8 B=256 P={ISLAND}", benchmark, ISLAND)
