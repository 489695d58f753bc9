"""The windowed search: ordered plans (per-stage partitions and orders) by the joint GA, on
islands, one per memory level, seeded so that it is never slower than the best 1F1B, the
best GPipe or the best flush plan found.

It runs a short flush search first (its plan, the heuristics and the baselines become
seeds; under run pricing a mirrored one, whose plan runs at the model's costs; a run-priced
search that admits recomputation runs a mirrored windowed search first instead, for half
its time: :func:`mirrored_first_search`), then the joint GA (:mod:`tidgap.optimize.joint`),
then anneals every island's fittest (:mod:`tidgap.optimize.anneal`) and polishes each
level's best. Its result is the fastest plan within the memory limit in force, checked
with the reference simulator, and the fastest within each level of the trade-off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from tidgap.backends import Backend, load
from tidgap.backends.evaluator import OrderedEvaluator, create_evaluator
from tidgap.backends.ticks import MODEL_PRICING, RUN_PRICING, TickedProblem, tick_problem
from tidgap.backends.xp import namespace, to_host
from tidgap.model.errors import InputError
from tidgap.model.plan import Plan, check_plan
from tidgap.model.problem import Problem
from tidgap.optimize import background_compile
from tidgap.optimize.anneal import Annealing, AnnealState, anneal
from tidgap.optimize.anneal_checkpoint import AnnealSaving, ResumedAnnealing
from tidgap.optimize.backward_rules import FREE, MIRRORED, refusal, rule_caps
from tidgap.optimize.checkpoint import (
    MIRRORED_PHASE,
    Checkpoint,
    SavedState,
    current_state,
    drive,
)
from tidgap.optimize.flush_driver import flush_search
from tidgap.optimize.ga import RESTART_AFTER, GeneticSettings, StopRule
from tidgap.optimize.genome import GENE, Population, decode_plan, encode_partitions
from tidgap.optimize.interrupts import STOP_SIGNALS
from tidgap.optimize.joint import (
    Breeding,
    Island,
    JointSpace,
    backend_breeding,
    fastest_within,
)
from tidgap.optimize.joint_operators import JointGenes, Repair
from tidgap.optimize.joint_optimizer import JointOptimizer
from tidgap.optimize.joint_polish import joint_polish, scan_seconds
from tidgap.optimize.limits import (
    STAGE_LIMITS,
    MemoryLevel,
    limit_in_force,
    tradeoff_levels,
)
from tidgap.optimize.memory import format_bytes, joint_footprint
from tidgap.optimize.memory_seeds import capped_one_f_one_b, fewest_within, require_room
from tidgap.optimize.order_genes import encode_lead
from tidgap.optimize.preparation import (
    POLISH_SHARE,
    Phases,
    add_heuristics,
    chromosome_width,
    equal_seed_counts,
    more_rounds,
    needed_counts,
    progress_reporter,
    require_memory,
    runs_to_the_limit,
    start_search,
    warm_up_inputs,
)
from tidgap.optimize.results import SearchProgress, SearchResult, TradeoffPoint
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.run_memory import ROWS, RunMemory, least_bytes, run_evaluated
from tidgap.runtime.pricing import run_evaluation, run_priced_baselines
from tidgap.runtime.recompute_memory import recompute_bytes
from tidgap.schedules.baselines import BaselineResult, best_baselines, equal_sizes
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import (
    SCHEDULES,
    TIMED_BASELINES,
    baseline_evaluation,
    family_of,
)
from tidgap.schedules.held import flush_fits

#: Equal partitions (spread over the feasible counts) that also seed window orders.
WINDOWED_SEED_COUNTS = 16
#: Ramp seeds: the counts of one-unit forwards in front, as offsets from ``S``.
RAMP_OFFSETS = (-1, 0, 1)
#: The family searched.
SEARCHED = SCHEDULES["windowed"]
#: The first, flush search: the share of a time limit (and of ``generations``) it takes at
#: most, its most generations and its stagnation rule.
FLUSH_SHARE = 0.25
FLUSH_GENERATIONS = 300
FLUSH_STAGNATION = 100
#: A run-priced search that admits recomputation first searches mirrored plans (a windowed
#: search under the ``mirrored`` rule, :func:`mirrored_first_search`): the share of a time
#: limit and of ``generations`` it takes (on the calibrated fidelity GPT the free search
#: trailed the mirrored one by 0.1-1.9% at 10 s on 6 of 6 problems and seeds; a 5 s
#: mirrored search and then 5 s of the free one matched the mirrored: docs/measurements.md).
MIRRORED_SHARE = 0.5
#: The annealing after the GA: its share of a time limit (less what the final polish keeps
#: beyond :data:`~tidgap.optimize.preparation.POLISH_SHARE`), and without one its steps per
#: generation the GA ran.
ANNEAL_SHARE = 0.4
ANNEAL_STEPS_PER_GENERATION = 4
#: The final polish keeps time for this many scans of every stage of the level in force's
#: best (:func:`~tidgap.optimize.joint_polish.scan_seconds`), at least ``POLISH_SHARE`` and
#: at most :data:`MOST_POLISH_SHARE` of a time limit: a deep pipeline's polish gains more
#: per second than its annealing (64 stages at 10 s: 8 scans and a quarter, then 16 and
#: 40%, each faster on average over 8-16 seeds; docs/measurements.md), a shallow one's ends
#: in a fraction of its share.
POLISH_SCANS = 16
MOST_POLISH_SHARE = 0.4
#: The share of the polish's time the level in force takes, polished first; the other
#: levels share the rest, what one leaves going to the next.
IN_FORCE_POLISH_SHARE = 0.5
#: Annealing chains per island (its fittest; ``None``: its whole population).
ANNEAL_CHAINS: int | None = 128


def flush_generations(generations: int | None) -> int:
    """Generations of the first, flush search: :data:`FLUSH_SHARE` of ``generations`` (at
    least 1), at most :data:`FLUSH_GENERATIONS`."""
    if generations is None:
        return FLUSH_GENERATIONS
    return min(max(1, int(generations * FLUSH_SHARE)), FLUSH_GENERATIONS)


def require_windowed_room(
    problem: Problem, memory_limit: str | int | None, pricing: str, backward: str
) -> None:
    """:func:`~tidgap.optimize.memory_seeds.require_room` as a windowed search priced by
    ``pricing`` under the ``backward`` rule counts memory: as ``tidgap run`` holds plans
    (:func:`counts_run_memory`: a recomputing stage, under the free rule, holds less than
    its samples' activations), else as the model does."""
    least = least_bytes(problem, backward == FREE) if pricing == RUN_PRICING else None
    require_room(problem, memory_limit, least)


def searches_mirrored_first(pricing: str, backward: str) -> bool:
    """Whether a windowed search with ``pricing`` and ``backward`` rule first runs
    :func:`mirrored_first_search`: a run-priced one under another rule than ``mirrored``."""
    return pricing == RUN_PRICING and backward != MIRRORED


def mirrored_first_search(
    problem: Problem,
    generations: int | None,
    time_limit: float | None,
    checkpoint: Checkpoint | None = None,
    resumed: SavedState | None = None,
    **options: Any,
) -> SearchResult | None:
    """The first search of a run-priced windowed search that admits recomputation: the
    same search (``options``) under the ``mirrored`` rule, whose plans run every op at the
    model's costs and which finds them faster than the free search does, for
    :data:`MIRRORED_SHARE` of ``time_limit`` and of ``generations``, at most
    :data:`FLUSH_GENERATIONS` of them as for the flush first search (so a search resumed
    past them equals one search; with neither, as an ask/tell optimizer is built, that
    many); ``None`` where it finds no plan (none mirrored within the memory limits).
    ``checkpoint`` saves its GA's state (phase :data:`MIRRORED_PHASE`); ``resumed``, such
    a state, continues it (``generations`` then counts those it ran)."""
    if generations is not None:
        generations = min(max(1, int(generations * MIRRORED_SHARE)), FLUSH_GENERATIONS)
    elif time_limit is None:
        generations = FLUSH_GENERATIONS
    first = None
    if resumed is not None:
        first = resumed.first_search(problem)
        if generations is not None:
            generations = max(generations - resumed.generations_run(problem), 0)
    try:
        run = prepare_windowed(
            problem,
            generations=generations,
            time_limit=None if time_limit is None else time_limit * MIRRORED_SHARE,
            backward=MIRRORED,
            pricing=RUN_PRICING,
            first_search=first,
            **options,
        )
    except InputError:  # no mirrored plan within the memory limits
        return None
    if resumed is not None:
        resumed.restore(run.optimizer)
    if checkpoint is None:
        reason = drive(run)
    else:
        with checkpoint.in_phase(MIRRORED_PHASE):
            reason = drive(run, checkpoint)
    try:
        return finish_windowed(run, reason)
    except InputError:  # none found within the memory limits
        return None


def encode_plans(plans: Sequence[Plan], problem: Problem, width: int) -> JointGenes:
    """``plans`` with at most ``width`` microbatches per stage as ``(n, S, width)`` host genes
    (others left out)."""
    fitting = [p for p in plans if max(map(len, p.forward + p.backward)) <= width]
    return JointGenes(
        np.stack([encode_partitions(p.forward, problem.unit, width) for p in fitting]),
        np.stack([encode_partitions(p.backward, problem.unit, width) for p in fitting]),
        np.stack([encode_lead(p, width) for p in fitting]).astype(GENE),
    )


def seed_plans(
    problem: Problem, width: int, population: int, baselines: dict[str, BaselineResult]
) -> list[Plan]:
    """GPipe(m) and 1F1B(m) for every feasible ``m`` up to ``width`` (an even spread of at
    most ``population`` counts, the best ones among them: :func:`equal_seed_counts`)."""
    wanted = [baselines[name].microbatches for name in TIMED_BASELINES]
    cap = problem.common_cap() // problem.unit
    counts = equal_seed_counts(problem.num_units, cap, width, population, wanted)
    builders = [SCHEDULES[name].baseline for name in TIMED_BASELINES]
    return [build(problem, m) for m in counts for build in builders if build is not None]


def near_equal(units: int, size: int) -> list[int]:
    """``units`` (at least 1) as ``ceil(units / size)`` near-equal sizes, larger first."""
    return equal_sizes(units, -(-units // size))


def ramp_size(problem: Problem, best_1f1b: BaselineResult) -> int:
    """Units per microbatch of the best 1F1B, within the caps: where a ramp ends."""
    return min(
        round(problem.num_units / best_1f1b.microbatches), problem.common_cap() // problem.unit
    )


def growing_ramp_plans(problem: Problem, width: int, best_1f1b: BaselineResult) -> list[Plan]:
    """Mirrored partitions that fill and drain the pipeline early: every stage's forwards
    and backwards are ``1, 2, ..., k`` units (``k < b``, :func:`ramp_size`), then
    near-equal ones of ``b`` units; those with at most ``width`` microbatches. Seeds of the
    ``mirrored`` rule, whose mirror of a :func:`ramp_plans` seed runs its backward ramp in
    single units (a 60 s mirrored search on gpt1-14 found ``1 2 3x9 2`` on every stage)."""
    S, U, unit = problem.num_stages, problem.num_units, problem.unit
    b, plans = ramp_size(problem, best_1f1b), []
    for k in range(1, b):
        head = list(range(1, k + 1))
        if sum(head) >= U:
            break
        row = [x * unit for x in head + near_equal(U - sum(head), b)]
        if len(row) <= width:
            plans.append(Plan.of([row] * S, [row] * S, windows=[problem.batch_size] * S))
    return plans


def ramp_plans(problem: Problem, width: int, best_1f1b: BaselineResult) -> list[Plan]:
    """Partitions that fill and drain the pipeline early, for window orders: every stage's
    forwards start with ``r`` of one unit (``r = S + RAMP_OFFSETS``), then near-equal ones of
    ``b`` units (the best 1F1B's size, within the caps), its backwards with one of ``b - 1``
    units, then near-equal ones of ``b``; those with at most ``width`` microbatches per
    row. None when ``b`` is one unit (all sizes one: an equal seed already). The GA rarely
    reaches this shape from equal partitions (the annealed gpt1-14 plan in docs/ has it)."""
    S, U, unit = problem.num_stages, problem.num_units, problem.unit
    b = ramp_size(problem, best_1f1b)
    if b < 2:
        return []
    backward = [b - 1, *near_equal(U - b + 1, b)]
    plans = []
    for r in (S + offset for offset in RAMP_OFFSETS):
        if not 0 < r < U:
            continue
        forward = [1] * r + near_equal(U - r, b)
        if max(len(forward), len(backward)) <= width:
            rows = [[x * unit for x in forward]] * S, [[x * unit for x in backward]] * S
            plans.append(Plan.of(*rows, windows=[problem.batch_size] * S))
    return plans


def windowed_seeds(plans: Sequence[Plan], levels: Sequence[MemoryLevel]) -> list[Plan]:
    """Each plan's partitions with, per level, the window order that fills each stage up to
    the level's samples (model.md, Windows): the greediest order within it, before the
    repair."""
    return [
        Plan.of(plan.forward, plan.backward, windows=[max(1, h) for h in level.held])
        for plan in plans
        for level in levels
    ]


def one_f_one_b_level(problem: Problem, best: BaselineResult) -> MemoryLevel:
    """What the best 1F1B holds on each stage (samples)."""
    held = baseline_evaluation(problem, best.schedule, best.microbatches)
    assert held is not None, "1F1B has a timeline"
    return MemoryLevel("1F1B", tuple(held.peak_held))


def compiled_loops(
    problem: Problem, record: Backend, pricing: str = MODEL_PRICING, counts_memory: bool = True
) -> tuple[TickedProblem, OrderedEvaluator, ModuleType, Breeding]:
    """The tick tables of ``problem`` priced by ``pricing``, and the evaluator, array
    module and breeding of the backend ``record``, its evaluator, repair, breeding and
    mutation compiled (or loaded from the disk cache) on :func:`warm_up_inputs`; its
    run-memory count too where ``counts_memory`` (a search that counts memory as ``tidgap
    run`` holds it: :func:`counts_run_memory`)."""
    ticked = tick_problem(problem, pricing)
    evaluator = create_evaluator(ticked, SEARCHED.name, record.name)
    xp = record.namespace()
    breeding = backend_breeding(record)
    genes, caps = warm_up_inputs(ticked, xp)
    space = JointSpace(evaluator, caps, caps, 1, *breeding)
    one = JointGenes(genes, genes, xp.zeros_like(genes)).repaired(space.repair)
    space.evaluate(one)
    space.mutate(one, caps, caps, CounterRng(0, xp), 1.0)
    if counts_memory and record.run_memory is not None:
        nothing = RunMemory(xp.zeros((ROWS, caps.size)), xp.zeros(caps.size), 1, 1)
        peaks = xp.zeros(one.forward.shape[:2], dtype=xp.int64)
        load(record.run_memory)(peaks, one.forward, one.backward, one.lead, nothing)
    space.breed(one, xp.zeros((1,), dtype=xp.int64), caps, caps, CounterRng(0, xp), 1, 1.0, 1.0, 2)
    return ticked, evaluator, xp, breeding


def counts_run_memory(problem: Problem, pricing: str) -> bool:
    """Whether a search priced by ``pricing`` counts memory as ``tidgap run`` holds it: run
    pricing of a problem whose profile says what stages hold (:meth:`RunMemory.of`)."""
    return pricing == RUN_PRICING and recompute_bytes(problem) is not None


def polished(
    found: list[tuple[JointGenes, int] | None],
    levels: list[MemoryLevel],
    in_force: MemoryLevel,
    space: JointSpace,
    deadline: float | None,
) -> list[tuple[JointGenes, int] | None]:
    """:func:`joint_polish` on each level's best until ``deadline``: first the level in
    force, for :data:`IN_FORCE_POLISH_SHARE` of the time left, then the others in turn, each
    an equal share of what is left; then each level takes the fastest polished plan it
    admits (a plan polished within a tighter level may beat the looser level's own)."""
    first = levels.index(in_force)
    result = list(found)
    for n, i in enumerate([first, *(i for i in range(len(levels)) if i != first)]):
        share = None
        if deadline is not None:
            part = IN_FORCE_POLISH_SHARE if n == 0 else 1 / (len(levels) - n)
            share = time.perf_counter() + (deadline - time.perf_counter()) * part
        best = found[i]
        result[i] = None if best is None else joint_polish(*best, levels[i], space, share)
    return fastest_admitted(result, levels, space)


def fastest_admitted(
    found: list[tuple[JointGenes, int] | None], levels: list[MemoryLevel], space: JointSpace
) -> list[tuple[JointGenes, int] | None]:
    """For each of ``levels``, the fastest of ``found`` (first on ties) within it, or
    ``None`` (``found`` scored once)."""
    kept = [best for best in found if best is not None]
    if not kept:
        return [None] * len(levels)
    scored = space.evaluate(JointGenes.concatenate([b[0] for b in kept]))
    chosen = [fastest_within(*scored, space.limit(level)) for level in levels]
    return [None if index is None else kept[index] for index in chosen]


def referenced(
    memory: RunMemory,
    problem: Problem,
    best: BaselineResult,
    width: int,
    evaluator: OrderedEvaluator,
    repair: Repair,
) -> RunMemory:
    """``memory`` with the best 1F1B (``best``) as its reference
    (:meth:`~tidgap.optimize.run_memory.RunMemory.with_reference`): the levels in its
    samples then allow what it holds beside them."""
    plan = SCHEDULES[best.schedule].baseline(problem, best.microbatches)
    encoded = encode_plans([plan], problem, width)
    xp = namespace(memory.activation)
    genes = JointGenes(*(xp.asarray(a) for a in encoded.rows())).repaired(repair)
    peaks = evaluator.evaluate(Population(genes.forward, genes.backward, genes.codes))[1]
    return memory.with_reference(peaks, genes.forward, genes.backward, genes.lead)


def decoded(
    genes: JointGenes,
    problem: Problem,
    level: MemoryLevel,
    pricing: str = MODEL_PRICING,
    memory: RunMemory | None = None,
) -> TradeoffPoint:
    """The plan of one individual within ``level``, checked and evaluated with the
    reference simulator (:func:`priced_plan`)."""
    plan, evaluation, held = priced_plan(genes, problem, pricing, memory)
    allowed = allowed_held(level, memory)
    if any(h > a for h, a in zip(held, allowed, strict=True)):
        raise AssertionError(f"the plan for {level.label} holds {held}, over {allowed}")
    return TradeoffPoint(level, plan, evaluation)


def priced_plan(
    genes: JointGenes,
    problem: Problem,
    pricing: str = MODEL_PRICING,
    memory: RunMemory | None = None,
) -> tuple[Plan, Evaluation, list[int]]:
    """The plan of one individual (``(1, S, K)`` genes), checked and evaluated with the
    reference simulator (its times priced by ``pricing``; with ``memory``, its
    ``peak_memory`` as ``tidgap run`` holds it:
    :func:`~tidgap.optimize.run_memory.run_evaluated`), and what each stage holds as the
    search counts it (samples; with ``memory``, its units)."""
    plan = decode_plan(genes.forward[0], genes.backward[0], problem, genes.codes[0])
    check_plan(plan, problem)
    if pricing == RUN_PRICING:
        evaluation = run_evaluation(problem, plan)
    else:
        evaluation = SEARCHED.evaluate(problem, plan)
    if memory is None:
        return plan, evaluation, list(evaluation.peak_held)
    xp = namespace(genes.forward)
    peaks = xp.asarray([evaluation.peak_held], dtype=xp.int64)
    held = to_host(memory.held(peaks, genes.forward, genes.backward, genes.lead))[0].tolist()
    return plan, run_evaluated(problem, plan, evaluation), held


def allowed_held(level: MemoryLevel, memory: RunMemory | None) -> list[int]:
    """What ``level`` lets each stage hold as the search counts it (:func:`priced_plan`)."""
    return list(level.held) if memory is None else to_host(memory.limit(level)).tolist()


def leanest_held(run: WindowedRun) -> str:
    """For a search that found no plan within its limit in force: what the plan least over
    it holds where it is most over, as ``"; the leanest plan found holds 121 kB (120712 B) on
    stage 1"`` (samples without bytes per sample); empty where no order was valid."""
    genes = run.optimizer.leanest(run.in_force)
    if genes is None:
        return ""
    memory = run.optimizer.space.memory
    _, evaluation, held = priced_plan(genes, run.problem, run.pricing, memory)
    allowed = allowed_held(run.in_force, memory)
    stage = max(range(len(held)), key=lambda s: held[s] - allowed[s])
    amount = f"{evaluation.peak_held[stage]} samples"
    if evaluation.peak_memory is not None:
        peak = evaluation.peak_memory[stage]
        amount = f"{format_bytes(peak)} ({int(peak)} B)"
    return f"; the leanest plan found holds {amount} on stage {stage}"


@dataclass
class WindowedRun:
    """A prepared windowed search: the optimizer and what its result needs (the levels,
    the baselines and heuristics, the first, flush search's effort ``first`` and plan
    ``flush_plan``, the clocks)."""

    problem: Problem
    optimizer: JointOptimizer
    stop: StopRule
    levels: list[MemoryLevel]
    in_force: MemoryLevel
    baselines: dict[str, BaselineResult]
    heuristics: dict[str, Plan]
    backend: str
    seed: int
    first: tuple[int, int]
    flush_plan: Plan | None
    started: float
    clock: float
    time_limit: float | None
    phases: Phases
    backward: str
    pricing: str
    on_progress: Callable[[SearchProgress], None] | None

    @property
    def memory_pricing(self) -> str:
        """How the limits count memory: ``run`` where the search counts every stage as
        ``tidgap run`` holds it (:mod:`tidgap.optimize.run_memory`), else ``model``."""
        return MODEL_PRICING if self.optimizer.space.memory is None else RUN_PRICING

    def report(self) -> Callable | None:
        """The progress reporter of the GA (counts after the flush search's)."""
        gpipe_time = self.baselines["gpipe"].iteration_time
        return progress_reporter(self.optimizer.ticked, gpipe_time, self.on_progress, self.first)


def prepare_windowed(
    problem: Problem,
    *,
    seed: int = 0,
    population: int = 512,
    generations: int | None = None,
    time_limit: float | None = None,
    stagnation: int | None = None,
    backend: str = "auto",
    max_microbatches: int | None = None,
    on_progress: Callable[[SearchProgress], None] | None = None,
    initial_plans: Sequence[Plan] = (),
    interrupted: Callable[[], str | None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    max_memory: int | None = None,
    memory_limit: str | int | None = None,
    backward: str = FREE,
    first_search: tuple[Plan, int, int] | None = None,
    pricing: str = MODEL_PRICING,
    checkpoint: Checkpoint | None = None,
    mirrored_state: SavedState | None = None,
) -> WindowedRun:
    """Everything a windowed search does before its generations (the first search, flush
    or :func:`mirrored_first_search`, unless ``first_search`` gives its plan, generations
    and evaluations). ``checkpoint`` saves the mirrored first search's state, and
    ``mirrored_state``, one saved so, continues it (``generations`` counting the
    generations after it, as for a resumed GA)."""
    begun = start_search(problem, backend, population, max_memory)
    backend, record = begun.backend, begun.record
    population, started = begun.population, begun.started
    S, U = problem.num_stages, problem.num_units
    require_windowed_room(problem, memory_limit, pricing, backward)  # before any work
    counting = counts_run_memory(problem, pricing)
    phases = Phases(on_phase)
    earlier = None  # the first search's result
    if first_search is None and searches_mirrored_first(pricing, backward):
        if mirrored_state is not None and generations is not None:
            generations += mirrored_state.generations_run(problem)  # as one unbroken search
        earlier = mirrored_first_search(
            problem,
            generations,
            time_limit,
            checkpoint,
            mirrored_state,
            seed=seed,
            population=population,
            stagnation=stagnation,
            backend=backend,
            max_microbatches=max_microbatches,
            on_progress=on_progress,
            initial_plans=initial_plans,
            interrupted=interrupted,
            on_phase=None if on_phase is None else lambda name: on_phase(f"mirrored {name}"),
            max_memory=max_memory,
            memory_limit=memory_limit,
        )
        if earlier is not None:
            phases.seconds |= {f"mirrored {name}": t for name, t in earlier.setup.items()}
            if time_limit is not None:  # this search's shares are of the time left
                time_limit *= 1 - MIRRORED_SHARE
    mirrored = earlier is not None
    first_flush = flush_fits(problem) and first_search is None and not mirrored
    # A first run compiles the windowed loops beside the flush search's.
    helper = background_compile.start(record) if first_flush else None
    try:
        if first_flush:
            earlier = flush_search(
                problem,
                seed=seed,
                population=population,
                generations=flush_generations(generations),
                time_limit=None if time_limit is None else time_limit * FLUSH_SHARE,
                stagnation=FLUSH_STAGNATION,
                backend=backend,
                max_microbatches=max_microbatches,
                on_progress=on_progress,
                initial_plans=[p for p in initial_plans if family_of(p).separable],
                interrupted=interrupted,
                on_phase=None if on_phase is None else lambda name: on_phase(f"flush {name}"),
                max_memory=max_memory,
                # Run-priced, a free flush plan recomputes: its seed would be slow.
                backward=MIRRORED if pricing == RUN_PRICING else FREE,
            )
            phases.seconds |= {f"flush {name}": t for name, t in earlier.setup.items()}
        with phases("compile"):
            background_compile.finish(helper)
            ticked, evaluator, xp, breeding = compiled_loops(problem, record, pricing, counting)
    finally:
        background_compile.stop(helper)
    with phases("baselines"):
        baselines = earlier.baselines if earlier else best_baselines(problem)
        if pricing == RUN_PRICING and not mirrored:  # the order tables time them apart
            baselines = run_priced_baselines(problem, baselines)
        one_f_one_b = one_f_one_b_level(problem, baselines["1f1b"])
        in_force = limit_in_force(problem, memory_limit, one_f_one_b)
        levels = tradeoff_levels(problem, in_force, one_f_one_b)
    first = (earlier.generations, earlier.evaluations) if earlier else (0, 0)
    flush_plan = earlier.plan if earlier else None
    if first_search is not None:
        flush_plan, first = first_search[0], first_search[1:]
    # The first search's generations count in ``generations``, unless it ran before a resume.
    done = 0 if first_search is not None else first[0]
    left = None if generations is None else max(generations - done, 0)
    ga_limit = None if time_limit is None else time_limit * (1 - POLISH_SHARE - ANNEAL_SHARE)
    # The time limit does not cover compiling (the flush search's and this one's); after a
    # mirrored first search it is what is left (from now).
    clock = started + phases.seconds.get("flush compile", 0.0) + phases.seconds["compile"]
    if mirrored:
        clock = time.perf_counter()
    stop = StopRule(left, ga_limit, stagnation, interrupted, started=clock)
    heuristics = dict(earlier.heuristics) if earlier else {}
    with phases("heuristics"):
        add_heuristics(problem, stop, heuristics)
    first_plan = [flush_plan] if flush_plan else []
    plans = [*first_plan, *heuristics.values(), *initial_plans]
    kept = [*first_plan, *initial_plans]
    needed = needed_counts(problem, baselines, heuristics.values(), kept)
    fewest = fewest_within(problem, in_force)
    width = chromosome_width(problem, max_microbatches, [*needed, fewest])
    if width < fewest:  # only a requested width can be this narrow
        raise InputError(
            f"{width} microbatches a stage cannot split the batch within the memory limit "
            f"({in_force.label}: at most {list(in_force.held)} samples per stage): that "
            f"takes at least {fewest}",
            source="--max-microbatches",
        )
    equal = seed_plans(problem, width, population, baselines)
    ramps = ramp_plans(problem, width, baselines["1f1b"])
    if backward == MIRRORED or pricing == RUN_PRICING:  # mirrored: no recomputation
        ramps += growing_ramp_plans(problem, width, baselines["1f1b"])
    partitions = [*equal[:: 2 * max(1, len(equal) // (2 * WINDOWED_SEED_COUNTS))], *ramps, *plans]
    footprint = joint_footprint(
        population, len(levels), S, width, U, len(equal) + len(partitions) * (len(levels) + 1)
    )
    require_memory(footprint, begun.budget, begun.budget_source)
    settings = GeneticSettings(population=population)
    rng = CounterRng(seed, xp)
    caps = rule_caps(backward, xp.asarray(ticked.forward_caps), xp.asarray(ticked.backward_caps))
    memory = None
    if counting:
        compiled = None if record.run_memory is None else load(record.run_memory)
        memory = RunMemory.of(problem, xp, compiled)
    if memory is not None:
        memory = referenced(memory, problem, baselines["1f1b"], width, evaluator, breeding[1])
    space = JointSpace(evaluator, *caps, width, *breeding, backward=backward, memory=memory)
    with phases("seeding"):
        capped = [p for level in levels for p in capped_one_f_one_b(problem, level, width)]
        found = [*equal, *plans, *windowed_seeds(partitions, levels), *capped]
        seeds = encode_plans(found, problem, width)
        device_seeds = JointGenes(*(xp.asarray(a) for a in seeds.rows()))
        fill = max(population - seeds.size, population // 2)
        candidates = JointGenes.concatenate([space.repaired(device_seeds), space.random(fill, rng)])
        scored = (candidates, *space.evaluate(candidates))
        islands = [
            Island.seeded(level, *scored, population, space.limit(level)) for level in levels
        ]
    optimizer = JointOptimizer(
        problem,
        ticked,
        islands,
        space,
        settings,
        rng,
        reported=levels.index(in_force),
        restart_after=RESTART_AFTER if stagnation is None else None,
    )
    return WindowedRun(
        problem,
        optimizer,
        stop,
        levels,
        in_force,
        baselines,
        heuristics,
        backend,
        seed,
        first,
        flush_plan,
        started,
        clock,
        time_limit,
        phases,
        backward,
        pricing,
        on_progress,
    )


def annealed(
    run: WindowedRun,
    found: list[tuple[JointGenes, int] | None],
    deadline: float | None = None,
    saving: AnnealSaving | None = None,
    resumed: ResumedAnnealing | None = None,
) -> list[tuple[JointGenes, int] | None]:
    """:func:`anneal` from every island (or on from ``resumed``), then each level takes the
    fastest it admits of ``found`` and the chains' bests. The chains run until ``deadline``
    (default: for :data:`ANNEAL_SHARE` of a time limit, up to the polish's share); when the
    GA stops on generations or stagnation, for at most :data:`ANNEAL_STEPS_PER_GENERATION`
    steps per generation it ran (so the same seed and generations give the same plan).
    ``saving`` checkpoints the annealing: when due, when a signal stops it and at its end."""
    optimizer, time_limit, stop = run.optimizer, run.time_limit, run.stop
    steps = None
    if not runs_to_the_limit(run.stop, time_limit):
        steps = ANNEAL_STEPS_PER_GENERATION * optimizer.counters.generation
    if deadline is None and time_limit is not None:
        deadline = run.clock + time_limit - polish_reserve(run, found, time_limit)
    if resumed is None:
        state = AnnealState.start(optimizer.islands, ANNEAL_CHAINS)
    else:
        state, optimizer.rng.draws = resumed.state, resumed.draws
    annealing = Annealing(steps, deadline, stop.interrupted, state.done)
    after_step = None if saving is None else saving.due
    reached, evaluations = anneal(
        optimizer.islands,
        optimizer.space,
        optimizer.rng,
        annealing,
        state=state,
        after_step=after_step,
    )
    if saving is not None:
        saving.save(state)
        saving.checkpoint.closed |= annealing.stopped()
    optimizer.counters.evaluations += evaluations
    return fastest_admitted([*found, *reached], run.levels, optimizer.space)


def polish_reserve(
    run: WindowedRun, found: list[tuple[JointGenes, int] | None], time_limit: float
) -> float:
    """The seconds of ``time_limit`` the final polish keeps: :data:`POLISH_SCANS` scans of
    the level in force's best in ``found``, within ``POLISH_SHARE`` and
    :data:`MOST_POLISH_SHARE` of the limit (the least when that level has no plan)."""
    least, most = POLISH_SHARE * time_limit, MOST_POLISH_SHARE * time_limit
    best = found[run.levels.index(run.in_force)]
    if best is None:
        return least
    wanted = POLISH_SCANS * scan_seconds(best[0], run.in_force, run.optimizer.space)
    return min(max(wanted, least), most)


def used_to_the_end(
    run: WindowedRun,
    found: list[tuple[JointGenes, int] | None],
    stop_reason: str,
    saving: AnnealSaving | None = None,
) -> tuple[list[tuple[JointGenes, int] | None], str]:
    """:func:`more_rounds` for a time-limited search (:func:`runs_to_the_limit`): each
    round, each island takes its level's best in place of its least fit, the chains anneal
    from them, and the bests are polished again. ``saving`` checkpoints each round's
    annealing (its chains' bests hold the bests it began from), so a resume goes on from
    the latest round. Returns the bests and the stop reason (a signal's name if one came)."""
    if run.time_limit is None or not runs_to_the_limit(run.stop, run.time_limit):
        return found, stop_reason
    optimizer, phases = run.optimizer, run.phases
    end = run.clock + run.time_limit

    def round_(deadline: float) -> float | None:
        nonlocal found, stop_reason
        for island, best in zip(optimizer.islands, found, strict=True):
            if best is not None:
                island.adopt(best[0], *optimizer.space.evaluate(best[0]))
        with phases("anneal"):
            found = annealed(run, found, deadline, saving)
        if (name := run.stop.signal()) is not None:
            stop_reason = name
            return None
        started = time.perf_counter()
        with phases("polish"):
            found = polished(found, run.levels, run.in_force, optimizer.space, end)
        return time.perf_counter() - started

    more_rounds(end, run.time_limit, phases.seconds["polish"], round_)
    return found, stop_reason


def finish_windowed(
    run: WindowedRun,
    stop_reason: str,
    checkpoint: Checkpoint | None = None,
    resumed: ResumedAnnealing | None = None,
) -> SearchResult:
    """The result of ``run`` after its generations stopped for ``stop_reason``: each level's
    best annealed (or, ``resumed``, the annealing a state holds goes on), then polished
    (unless a signal stopped it, or a fitness of the user's own ranks them: both minimise
    the iteration time; a signal during the annealing skips the polish and becomes the stop
    reason), decoded and checked. ``checkpoint`` saves the annealing (phase
    :data:`~tidgap.optimize.checkpoint.ANNEAL_PHASE`) and, once the search ends without a
    signal, the GA's state again."""
    optimizer, levels, in_force, problem = run.optimizer, run.levels, run.in_force, run.problem
    phases, time_limit, clock = run.phases, run.time_limit, run.clock
    found = [optimizer.best_within(level) for level in levels]
    if stop_reason not in STOP_SIGNALS.values() and optimizer.fitness is None:
        saving = None
        if checkpoint is not None:
            ga = current_state(run, checkpoint.identity) if resumed is None else resumed.ga
            saving = AnnealSaving(checkpoint, ga, stop_reason, optimizer.rng)
        with phases("anneal"):
            found = annealed(run, found, saving=saving, resumed=resumed)
        stop_reason = run.stop.signal() or stop_reason
        if stop_reason not in STOP_SIGNALS.values():
            with phases("polish"):
                deadline = None if time_limit is None else clock + time_limit
                found = polished(found, levels, in_force, optimizer.space, deadline)
            found, stop_reason = used_to_the_end(run, found, stop_reason, saving)
            if saving is not None and stop_reason not in STOP_SIGNALS.values():
                saving.finished()
    tradeoff = [
        TradeoffPoint(level, None, None)
        if best is None
        else decoded(best[0], problem, level, run.pricing, run.optimizer.space.memory)
        for level, best in zip(levels, found, strict=True)
    ]
    chosen = tradeoff[levels.index(in_force)]
    if chosen.plan is None or chosen.evaluation is None:
        held = f"at most {list(in_force.held)} samples per stage"
        if run.memory_pricing == RUN_PRICING:
            held = "as tidgap run holds plans"
        raise InputError(
            f"no plan found within the memory limit ({in_force.label}: {held})"
            + refusal(run.backward)
            + leanest_held(run),
            source="stages' memory_limit" if in_force.label == STAGE_LIMITS else "--memory-limit",
        )
    return SearchResult(
        problem=problem,
        plan=chosen.plan,
        evaluation=chosen.evaluation,
        baselines=run.baselines,
        heuristics=run.heuristics,
        backend=run.backend,
        seed=run.seed,
        generations=optimizer.counters.generation + run.first[0],
        evaluations=optimizer.counters.evaluations + run.first[1],
        wall_time=time.perf_counter() - run.started,
        stop_reason=stop_reason,
        setup=phases.seconds,
        schedule=SEARCHED.name,
        memory_limit=in_force,
        tradeoff=tuple(tradeoff),
        backward=run.backward,
        pricing=run.pricing,
        memory_pricing=run.memory_pricing,
    )
