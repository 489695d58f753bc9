"""The flush search: DGAP on flush plans (separable, so the forward and backward
chromosomes evolve side by side), seeded with equal partitions and the heuristics, then
polished."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any, cast

import numpy as np

from tidgap.backends import Backend, load
from tidgap.backends.evaluator import SeparableEvaluator, create_evaluator
from tidgap.backends.ticks import TickedProblem, tick_problem
from tidgap.backends.xp import namespace, to_host
from tidgap.model.plan import Plan, check_plan
from tidgap.model.problem import Problem
from tidgap.optimize.aligned import aligned_pair, mirrored_start
from tidgap.optimize.backward_rules import ALIGNED, FREE, MIRRORED, rule_caps
from tidgap.optimize.checkpoint import drive
from tidgap.optimize.dual_optimizer import DualOptimizer
from tidgap.optimize.ga import (
    DEFAULT_POPULATION,
    RESTART_AFTER,
    Breeder,
    Chromosomes,
    GeneticSettings,
    StopRule,
    random_chromosomes,
)
from tidgap.optimize.generations import run_generations
from tidgap.optimize.genome import GENE, decode_plan, encode_partitions
from tidgap.optimize.interrupts import STOP_SIGNALS
from tidgap.optimize.memory import search_footprint
from tidgap.optimize.operators import breed, equal_rows
from tidgap.optimize.polish import Interrupted, polish
from tidgap.optimize.preparation import (
    POLISH_SHARE,
    Phases,
    add_heuristics,
    affordable,
    chromosome_width,
    equal_seed_counts,
    heuristic_times,
    more_rounds,
    needed_counts,
    progress_reporter,
    require_memory,
    runs_to_the_limit,
    start_search,
    warm_up_inputs,
)
from tidgap.optimize.results import SearchProgress, SearchResult
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.scores import require_some_valid
from tidgap.schedules.baselines import BaselineResult, best_baselines
from tidgap.schedules.families import SCHEDULES, family_of
from tidgap.schedules.held import require_flush_fits

#: The best forward chromosomes whose best coarsening an ``aligned`` search tries.
ALIGNED_CANDIDATES = 16
#: Mixed into the seed of the alignment's own generator.
ALIGN_STREAM = 0xA11C9
#: The family :func:`search` searches: flush plans, separable (``iteration = forward_end +
#: backward_span``), so DGAP evolves the two chromosomes side by side.
SEARCHED = SCHEDULES["flush"]
#: About how long a random chromosome takes per gene (one stage's microbatch slot) to draw
#: and score: 2 sides of 512 at 512 stages, 86 wide, in 1.4 s (one core).
RANDOM_GENE_SECONDS = 3e-8
#: Chromosomes per side of a lean first search (:func:`lean_population`).
LEAN_POPULATION = 2 * ALIGNED_CANDIDATES


def lean_population(population: int, stages: int, width: int, seconds: float | None) -> int:
    """Chromosomes per side: ``population``, or :data:`LEAN_POPULATION` where ``seconds``
    (the time left before the GA's time limit; ``None``: no limit) would not cover drawing
    that many random ones for both sides (by :data:`RANDOM_GENE_SECONDS`), so that the GA
    runs no generation (the polish starts from the best, the backward rules' repairs from
    the :data:`ALIGNED_CANDIDATES` best)."""
    drawn = 2 * population * stages * width
    return affordable(population, LEAN_POPULATION, drawn, seconds, RANDOM_GENE_SECONDS)


def _seeds(
    ticked: TickedProblem,
    caps: np.ndarray,
    width: int,
    partitions: list[list[list[int]]],
    counts: list[int],
) -> np.ndarray:
    """The equal partitions into each of ``counts`` microbatches (same on all ``len(caps)``
    rows) plus given partitions (a size list per row)."""
    units, stages = ticked.num_units, len(caps)
    equal = equal_rows(units, np.asarray(counts, dtype=np.int64), width)
    seeds = [np.repeat(equal[:, None, :], stages, axis=1)]
    for partition in partitions:
        if max(len(p) for p in partition) <= width:
            seeds.append(encode_partitions(partition, ticked.unit, width)[None])
    return np.concatenate(seeds).astype(GENE)


def _directions(
    ticked: TickedProblem, evaluator: SeparableEvaluator, same_partition: bool
) -> list[tuple[np.ndarray, Callable, str]]:
    """Per direction: caps ``(S,)`` in units, the score of ``(P, S, K)`` chromosomes, and the
    plan's attribute. With ``same_partition``, one row per chromosome: caps ``(1,)``, the
    least of any stage, and a score of ``(P, 1, K)`` whose row is broadcast to every stage."""
    directions = [
        (ticked.forward_caps, evaluator.forward_end, "forward"),
        (ticked.backward_caps, evaluator.backward_span, "backward"),
    ]
    if not same_partition:
        return directions
    return [
        (caps.min(keepdims=True), _shared(score, ticked.num_stages), direction)
        for caps, score, direction in directions
    ]


def _shared(score: Callable, stages: int) -> Callable:
    """``score`` of ``(P, 1, K)`` chromosomes: the one row broadcast to all ``stages``."""

    def shared(genes: Any) -> Any:
        xp = namespace(genes)
        population, _, width = genes.shape
        return score(xp.ascontiguousarray(xp.broadcast_to(genes, (population, stages, width))))

    return shared


def _breeder(record: Backend) -> Breeder:
    """The backend's fused breeding kernel if it has one, else the ``xp`` operators."""
    return breed if record.breeder is None else load(record.breeder)


def _population(
    seeds: np.ndarray,
    caps: Any,
    size: int,
    units: int,
    score: Callable,
    rng: CounterRng,
    breeder: Breeder,
) -> Chromosomes:
    """Seeds first (the best ``size`` if there are more), then random chromosomes, all in
    the array module of ``caps``."""
    xp = namespace(caps)
    _, stages, width = seeds.shape
    fill = max(size - len(seeds), 0)
    randoms = random_chromosomes(fill, stages, width, units, caps, rng)
    genes = xp.concatenate([xp.asarray(seeds), randoms])
    fitness = score(genes)
    keep = xp.argsort(fitness, kind="stable")[:size]
    return Chromosomes(genes[keep], fitness[keep], caps, score, breeder)


def _polished(
    genes: Any,
    fitness: int,
    caps: np.ndarray,
    score: Callable,
    xp: ModuleType,
    deadline: float | None,
    interrupted: Interrupted | None,
) -> Any:
    """:func:`polish` on the host until ``deadline`` or a signal (``interrupted``), scoring
    neighbours with the backend's ``score``."""

    def host_score(candidates: np.ndarray) -> np.ndarray:
        return to_host(score(xp.asarray(candidates)))

    return polish(to_host(genes), fitness, caps, host_score, deadline, interrupted=interrupted)[0]


def _compile(
    evaluator: SeparableEvaluator, breeder: Breeder, ticked: TickedProblem, xp: ModuleType
) -> None:
    """Compile (or load from the disk cache) the setup's loops and the backend's evaluation
    and breeding, on :func:`warm_up_inputs` in ``xp``."""
    from tidgap.fallback_cpu.setup_loops import warm_up

    warm_up()
    genes, caps = warm_up_inputs(ticked, xp)
    evaluator.forward_end(genes)
    evaluator.backward_span(genes)
    breeder(genes, xp.zeros((1,), dtype=xp.int64), caps, CounterRng(0, xp), 1, 1.0, 1.0, 2)


@dataclass
class FlushRun:
    """A prepared flush search: the optimizer and what its result needs."""

    problem: Problem
    optimizer: DualOptimizer
    stop: StopRule
    directions: list[tuple[np.ndarray, Callable, str]]
    baselines: dict[str, BaselineResult]
    heuristics: dict[str, Plan]
    backend: str
    seed: int
    started: float
    time_limit: float | None
    phases: Phases
    on_progress: Callable[[SearchProgress], None] | None
    backward: str = FREE
    first: tuple[int, int] = (0, 0)
    flush_plan: None = None
    first_cut: bool = False
    heuristic_times: dict[str, float] = field(default_factory=dict)

    def report(self) -> Callable | None:
        """The progress reporter of the GA."""
        gpipe_time = self.baselines["gpipe"].iteration_time
        return progress_reporter(self.optimizer.ticked, gpipe_time, self.on_progress)


def flush_search(problem: Problem, **options: Any) -> SearchResult:
    """Search flush plans for ``problem`` (options as :func:`prepare_flush`'s), as the
    first search of a windowed one does; see :func:`tidgap.optimize.driver.search`."""
    run = prepare_flush(problem, **options)
    return finish_flush(run, drive(run))


def prepare_flush(
    problem: Problem,
    *,
    seed: int = 0,
    population: int = DEFAULT_POPULATION,
    generations: int | None = None,
    time_limit: float | None = None,
    stagnation: int | None = None,
    backend: str = "auto",
    max_microbatches: int | None = None,
    on_progress: Callable[[SearchProgress], None] | None = None,
    same_partition: bool = False,
    initial_plans: Sequence[Plan] = (),
    interrupted: Callable[[], str | None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    max_memory: int | None = None,
    backward: str = FREE,
    lean: bool = False,
) -> FlushRun:
    """Everything a search of forward and backward partitions for ``problem`` with
    DGAP/TiDGAP does before its generations.

    The same seed, backend, input and stopping rule give the same plan, except that a
    time limit may stop at a different generation on a busier machine. The result is
    never worse than the best GPipe, local greedy or global DP plan that ran (they seed the GA),
    nor than any feasible plan in ``initial_plans`` that fits the search.

    ``time_limit`` (seconds) covers the whole search after the backend's code is compiled
    (a first run compiles Numba's loops into the disk cache; ``setup["compile"]`` says how
    long it took): baselines, heuristics (each skipped when it would not end within the
    limit), seeding, the GA (which leaves a tenth of the limit) and the polish.
    ``interrupted()`` is polled at
    every generation boundary: when it names a signal, the GA stops, the polish is skipped
    and the best plan so far is returned (``stop_reason`` is its name, ``"SIGINT"``).
    ``on_phase(name)`` is called as each setup phase starts. ``max_memory`` (bytes,
    default half the available memory) bounds the estimated footprint
    (:mod:`tidgap.optimize.memory`); a larger one raises :class:`InputError` before allocating.

    With ``same_partition``, every stage runs one shared partition per direction (what
    runtimes with variable microbatch sizes but one partition can execute): a chromosome
    is one row, ``(P, 1, K)``; seeds whose stages differ are left out.

    With ``lean`` (a windowed search's first search, whose state is never saved), where
    the time left would not cover drawing the random chromosomes, so that the GA runs no
    generation, each side holds its :data:`LEAN_POPULATION` fittest seeds
    (:func:`lean_population`).
    """
    for i, plan in enumerate(initial_plans):
        if not family_of(plan).separable:
            raise ValueError(
                f"initial_plans[{i}] has an order that is not the flush order; the search "
                "searches flush plans and would drop it (give its partitions alone)"
            )
    begun = start_search(problem, backend, population, max_memory)
    backend, record = begun.backend, begun.record
    population, started = begun.population, begun.started
    budget, budget_source = begun.budget, begun.budget_source
    U = problem.num_units
    require_flush_fits(problem)
    phases = Phases(on_phase)
    with phases("compile"):
        ticked = tick_problem(problem)
        # The family searched is separable: its evaluators offer both halves (the dual GA).
        evaluator = cast(SeparableEvaluator, create_evaluator(ticked, SEARCHED.name, backend))
        xp = record.namespace()
        breeder = _breeder(record)
        _compile(evaluator, breeder, ticked, xp)
    ga_limit = None if time_limit is None else time_limit * (1 - POLISH_SHARE)
    stop = StopRule(generations, ga_limit, stagnation, interrupted)
    with phases("baselines"):
        baselines = best_baselines(problem)
    heuristics: dict[str, Plan] = {}
    with phases("heuristics"):
        add_heuristics(problem, stop, heuristics)
    wanted = [b.microbatches for b in baselines.values()]
    times = heuristic_times(problem, heuristics)
    width = chromosome_width(
        problem, max_microbatches, needed_counts(problem, baselines, heuristics, times=times)
    )
    directions = _directions(ticked, evaluator, same_partition)
    counts = [
        equal_seed_counts(U, int(caps.min()), width, population, wanted)
        for caps, _, _ in directions
    ]
    seeds_count = max(map(len, counts)) + len(heuristics) + len(initial_plans)
    footprint = search_footprint(population, len(directions[0][0]), width, U, seeds_count)
    require_memory(footprint, budget, budget_source)
    settings = GeneticSettings(population=population)
    rng = CounterRng(seed, xp)
    sides = []
    left = stop.left() if lean else None
    size = lean_population(population, len(directions[0][0]), width, left)
    with phases("seeding"):
        for (caps, score, direction), direction_counts in zip(directions, counts, strict=True):
            plans = (*heuristics.values(), *initial_plans)
            partitions = [getattr(plan, direction) for plan in plans]
            if same_partition:
                partitions = [p[:1] for p in partitions if p.count(p[0]) == len(p)]
            seeds = _seeds(ticked, caps, width, partitions, direction_counts)
            sides.append(
                _population(
                    seeds,
                    xp.asarray(caps),
                    size,
                    ticked.num_units,
                    score,
                    rng,
                    breeder,
                )
            )
    optimizer = DualOptimizer(
        problem,
        ticked,
        evaluator,
        (sides[0], sides[1]),
        settings,
        rng,
        same_partition,
        restart_after=RESTART_AFTER if stagnation is None else None,
    )
    return FlushRun(
        problem,
        optimizer,
        stop,
        directions,
        baselines,
        heuristics,
        backend,
        seed,
        started,
        time_limit,
        phases,
        on_progress,
        backward,
        heuristic_times=times,
    )


def finish_flush(run: FlushRun, stop_reason: str) -> SearchResult:
    """:func:`finished`; then, for a search that stops on its time limit only
    (:func:`runs_to_the_limit`), :func:`more_rounds` of generations and another ending,
    keeping the faster plan (the populations keep their elites, so the GA's own best never
    gets worse)."""
    started = time.perf_counter()
    result = finished(run, stop_reason)
    ending = time.perf_counter() - started
    if (
        run.time_limit is None
        or not runs_to_the_limit(run.stop, run.time_limit)
        or result.stop_reason != "time limit"
        or run.optimizer.fitness is not None
    ):
        return result

    def round_(deadline: float) -> float | None:
        nonlocal result
        more = replace(run.stop, time_limit=deadline - run.stop.started)
        reason = run_generations(run.optimizer, more, run.report())
        started = time.perf_counter()
        again = finished(run, reason)
        took = time.perf_counter() - started
        faster = again.evaluation.iteration_time < result.evaluation.iteration_time
        result = again if faster else replace(again, plan=result.plan, evaluation=result.evaluation)
        return took if again.stop_reason == "time limit" else None

    more_rounds(run.stop.started + run.time_limit, run.time_limit, ending, round_)
    return result


def finished(run: FlushRun, stop_reason: str) -> SearchResult:
    """The result of ``run`` after its generations stopped for ``stop_reason``: the best
    chromosomes polished (unless a signal stopped it, or a fitness of the user's own ranks
    them: the polish minimises the iteration time; a signal during the polish stops it
    within a batch and becomes the stop reason), decoded and checked. Under the
    ``aligned`` backward rule the backward is then the best coarsening of one of the best
    forwards (:func:`~tidgap.optimize.aligned.aligned_pair`, equal partitions among the
    candidates: never slower than the best GPipe), so every backward boundary is a forward
    boundary; under ``mirrored`` both partitions are the best of the good chromosomes of
    either side and the equal partitions (:func:`~tidgap.optimize.aligned.mirrored_start`),
    polished as a pair. Decoding, checking and evaluating the plan is phase ``decode``."""
    optimizer, problem, phases = run.optimizer, run.problem, run.phases
    xp = optimizer.xp
    deadline = None if run.time_limit is None else run.stop.started + run.time_limit
    (forward_caps, forward_score, _), (backward_caps, backward_score, _) = run.directions
    forward, backward, forward_ticks, backward_ticks = optimizer.best_genes()
    require_some_valid(max(forward_ticks, backward_ticks))
    polish = stop_reason not in STOP_SIGNALS.values() and optimizer.fitness is None
    signal = run.stop.interrupted
    with phases("polish"):
        if polish:
            forward = _polished(
                forward, forward_ticks, forward_caps, forward_score, xp, deadline, signal
            )

        def ranked(side: int) -> Any:
            """The side's best chromosomes, best first."""
            genes, fitness = optimizer.sides[side].genes, optimizer.sides[side].fitness
            return genes[xp.argsort(fitness, kind="stable")[:ALIGNED_CANDIDATES]]

        best = xp.asarray(forward)[None]
        if run.backward == ALIGNED:  # the best coarsening of a good forward: nothing recomputes
            pair = aligned_pair(
                xp.concatenate([best, ranked(0)]),
                forward_caps,
                forward_score,
                backward,
                backward_caps,
                backward_score,
                CounterRng(run.seed ^ ALIGN_STREAM, xp),  # the GA's own draws are untouched
                deadline=deadline,
                interrupted=signal,
            )
            forward, backward = pair.forward, pair.backward
        elif run.backward == MIRRORED:  # the best good chromosome as both partitions
            both = xp.concatenate([best, ranked(0), xp.asarray(backward)[None], ranked(1)])

            def score(genes: Any) -> Any:
                return forward_score(genes) + backward_score(genes)

            forward, ticks = mirrored_start(both, forward_caps, backward_caps, score)
            if polish:
                caps = to_host(rule_caps(MIRRORED, forward_caps, backward_caps)[0])
                forward = _polished(forward, ticks, caps, score, xp, deadline, signal)
            backward = forward
        elif polish:
            backward = _polished(
                backward, backward_ticks, backward_caps, backward_score, xp, deadline, signal
            )
    stop_reason = run.stop.signal() or stop_reason  # one that stopped the polish
    with phases("decode"):
        plan = decode_plan(forward, backward, problem)
        if optimizer.same_partition:
            plan = Plan.of(plan.forward * problem.num_stages, plan.backward * problem.num_stages)
        check_plan(plan, problem)
        evaluation = SEARCHED.evaluate(problem, plan)
    return SearchResult(
        problem=problem,
        plan=plan,
        evaluation=evaluation,
        baselines=run.baselines,
        heuristics=run.heuristics,
        heuristic_times=run.heuristic_times,
        backend=run.backend,
        seed=run.seed,
        generations=optimizer.counters.generation,
        evaluations=optimizer.counters.evaluations,
        wall_time=time.perf_counter() - run.started,
        stop_reason=stop_reason,
        same_partition=optimizer.same_partition,
        setup=phases.seconds,
        backward=run.backward,
    )
