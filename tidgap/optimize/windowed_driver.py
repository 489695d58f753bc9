"""The windowed search: ordered plans (per-stage partitions and orders) by the joint GA, on
islands, one per memory level, seeded so that it is never slower than the best 1F1B, the
best GPipe or the best flush plan found.

It runs a short flush search first (its plan, the heuristics and the baselines become
seeds; under run pricing a mirrored one, whose plan runs at the model's costs; a run-priced
search that admits recomputation runs a mirrored windowed search first instead, for half
its time: :func:`mirrored_first_search`), then the joint GA (:mod:`tidgap.optimize.joint`)
from the seeds of :mod:`tidgap.optimize.windowed_seeds`; this module prepares it
(:func:`prepare_windowed`). :mod:`tidgap.optimize.windowed_finish` then polishes each
level's best seed into its island (shallow pipelines), anneals every island's fittest and
polishes each level's best: the result is the fastest plan within the
memory limit in force, checked with the reference simulator, and the fastest within each
level of the trade-off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from types import ModuleType
from typing import Any

from tidgap.backends import Backend, first_usable, load, ordered_refusal
from tidgap.backends.evaluator import OrderedEvaluator, create_evaluator
from tidgap.backends.ticks import MODEL_PRICING, RUN_PRICING, TickedProblem, tick_problem
from tidgap.model.errors import InputError
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize import background_compile
from tidgap.optimize.anneal_checkpoint import resumed_annealing
from tidgap.optimize.backward_rules import FREE, MIRRORED, rule_caps
from tidgap.optimize.checkpoint import MIRRORED_PHASE, Checkpoint, SavedState, drive
from tidgap.optimize.flush_driver import flush_search
from tidgap.optimize.ga import DEFAULT_POPULATION, RESTART_AFTER, GeneticSettings, StopRule
from tidgap.optimize.joint import Breeding, Island, JointSpace, backend_breeding
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.joint_optimizer import JointOptimizer
from tidgap.optimize.limits import (
    ONE_F_ONE_B,
    bytes_level,
    capped,
    limit_in_force,
    stage_level,
    tradeoff_levels,
)
from tidgap.optimize.memory import joint_footprint
from tidgap.optimize.memory_seeds import (
    OneFOneBHolding,
    capped_one_f_one_b,
    fastest_one_f_one_b_within,
    fewest_within,
    reference_memory,
    require_room,
    seeded_time_within,
)
from tidgap.optimize.preparation import (
    POLISH_SHARE,
    Phases,
    add_heuristics,
    affordable,
    chromosome_width,
    heuristic_times,
    needed_counts,
    require_memory,
    start_search,
    warm_up_inputs,
)
from tidgap.optimize.results import SearchProgress, SearchResult
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.run_memory import ROWS, RunMemory, least_bytes
from tidgap.optimize.windowed_finish import ANNEAL_CHAINS, ANNEAL_SHARE, finish_windowed
from tidgap.optimize.windowed_run import SEARCHED, WindowedRun
from tidgap.optimize.windowed_seeds import (
    WINDOWED_SEED_COUNTS,
    encode_seeds,
    growing_ramp_plans,
    one_f_one_b_level,
    ramp_plans,
    seed_plans,
)
from tidgap.runtime.pricing import run_priced_baselines
from tidgap.runtime.recompute_memory import recompute_bytes
from tidgap.schedules.baselines import best_baselines, one_f_one_b_plan
from tidgap.schedules.families import family_of
from tidgap.schedules.held import flush_fits

#: The first, flush search: the share of a time limit (and of ``generations``) it takes at
#: most, its most generations and its stagnation rule (a search's own ``stagnation``, where
#: fewer, stops it too).
FLUSH_SHARE = 0.25
FLUSH_GENERATIONS = 300
FLUSH_STAGNATION = 100
#: A run-priced search that admits recomputation first searches mirrored plans (a windowed
#: search under the ``mirrored`` rule, :func:`mirrored_first_search`): the share of a time
#: limit and of ``generations`` it takes (on the calibrated fidelity GPT the free search
#: trailed the mirrored one by 0.1-1.9% at 10 s on 6 of 6 problems and seeds; a 5 s
#: mirrored search and then 5 s of the free one matched the mirrored: docs/measurements.md).
MIRRORED_SHARE = 0.5
#: About how long the islands take per gene (one stage's microbatch slot of one individual,
#: its three rows and op codes) to allocate and fill from the seeds: 4 islands of 512
#: individuals at 512 stages, 86 wide, in 2.5 s (page faults, one core).
ISLAND_GENE_SECONDS = 3e-8


def island_size(
    population: int, islands: int, stages: int, width: int, seconds: float | None
) -> int:
    """Individuals each island holds: ``population``, or where ``seconds`` (the time left
    before the GA's time limit; ``None``: no limit) would not even cover allocating that
    many (by :data:`ISLAND_GENE_SECONDS`), so that the GA could run no generation of them,
    the annealing's :data:`~tidgap.optimize.windowed_finish.ANNEAL_CHAINS` (its chains
    start from each island's fittest, which a population of that size holds too; the GA
    runs on them where time is left after all)."""
    genes = islands * population * stages * width
    return affordable(population, ANNEAL_CHAINS, genes, seconds, ISLAND_GENE_SECONDS)


def flush_generations(generations: int | None) -> int:
    """Generations of the first, flush search: :data:`FLUSH_SHARE` of ``generations`` (at
    least 1, but none of none), at most :data:`FLUSH_GENERATIONS`."""
    if generations is None:
        return FLUSH_GENERATIONS
    return min(max(min(generations, 1), int(generations * FLUSH_SHARE)), FLUSH_GENERATIONS)


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
    ``checkpoint`` saves its GA's state and its annealing (phase :data:`MIRRORED_PHASE`);
    ``resumed``, such a state, continues it (``generations`` then counts those it ran): a
    state saved in its annealing goes on annealing unless generations are left for its GA
    (which then goes on, and anneals afresh)."""
    if generations is not None:
        share = int(generations * MIRRORED_SHARE)
        generations = min(max(min(generations, 1), share), FLUSH_GENERATIONS)
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
            lean_islands=checkpoint is None and resumed is None,
            **options,
        )
    except InputError:  # no mirrored plan within the memory limits
        return None
    annealing = None
    if resumed is not None:
        resumed.restore(run.optimizer)
        if "anneal" in resumed.meta and not generations:  # else its GA goes on, then anneals
            annealing = resumed_annealing(resumed, run.optimizer, ANNEAL_CHAINS)
    with nullcontext() if checkpoint is None else checkpoint.in_phase(MIRRORED_PHASE):
        reason = drive(run, checkpoint) if annealing is None else annealing.reason
        try:
            return finish_windowed(run, reason, checkpoint, annealing)
        except InputError:  # none found within the memory limits
            return None


def compiled_loops(
    problem: Problem,
    record: Backend,
    pricing: str = MODEL_PRICING,
    counts_memory: bool = True,
    admitted: float | None = None,
) -> tuple[TickedProblem, OrderedEvaluator, ModuleType, Breeding]:
    """The tick tables of ``problem`` priced by ``pricing`` (their ceiling set by the plan
    time ``admitted``: :func:`~tidgap.backends.ticks.tick_problem`), and the evaluator,
    array module and breeding of the backend ``record``, its evaluator, repair, breeding and
    mutation compiled (or loaded from the disk cache) on :func:`warm_up_inputs`; its
    run-memory count too where ``counts_memory`` (a search that counts memory as ``tidgap
    run`` holds it: :func:`counts_run_memory`)."""
    ticked = tick_problem(problem, pricing, admitted)
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


def windowed_backend(
    problem: Problem, max_microbatches: int | None, memory_limit: str | int | None
) -> str:
    """The backend ``auto`` runs a windowed search of ``problem`` on: the default, or the
    first usable on the CPU where the default's evaluator cannot hold the chromosomes
    (:func:`~tidgap.backends.ordered_refusal`) at the width the search starts from, widened
    for the stages' limits and a byte ``memory_limit`` (not for the baselines' counts or
    the heuristics', which it learns later: there a too wide search refuses, saying so)."""
    record = first_usable()
    if record.ordered_refusal is None:
        return record.name
    level = stage_level(problem)
    if memory_limit is not None and memory_limit != ONE_F_ONE_B:
        level = capped(bytes_level(problem, int(memory_limit)), level)
    width = chromosome_width(problem, max_microbatches, [1, fewest_within(problem, level)])
    if ordered_refusal(record, problem.num_stages, width) is None:
        return record.name
    return first_usable("cpu").name


def counts_run_memory(problem: Problem, pricing: str) -> bool:
    """Whether a search priced by ``pricing`` counts memory as ``tidgap run`` holds it: run
    pricing of a problem whose profile says what stages hold (:meth:`RunMemory.of`)."""
    return pricing == RUN_PRICING and recompute_bytes(problem) is not None


def prepare_windowed(
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
    lean_islands: bool = False,
) -> WindowedRun:
    """Everything a windowed search does before its generations (the first search, flush
    or :func:`mirrored_first_search`, unless ``first_search`` gives its plan, generations
    and evaluations). ``checkpoint`` saves the mirrored first search's state, and
    ``mirrored_state``, one saved so, continues it (``generations`` counting the
    generations after it, as for a resumed GA). With ``lean_islands`` (a search whose
    state nothing saves or reads before it ends), where the time left would not cover
    allocating whole islands, they hold the annealing's chains (:func:`island_size`),
    unless a checkpoint, a first search or a mirrored state is given (a state saved or
    restored holds whole islands)."""
    begun = start_search(problem, backend, population, max_memory)
    backend, record = begun.backend, begun.record
    population, started = begun.population, begun.started
    S, U = problem.num_stages, problem.num_units
    require_windowed_room(problem, memory_limit, pricing, backward)  # before any work
    # the least the joint GA holds (one island, the narrowest chromosomes), before the first
    # search: the full estimate needs the levels and the width, known after it
    narrowest = chromosome_width(problem, max_microbatches, [1])
    least = joint_footprint(population, 1, S, narrowest, U, 0)
    require_memory(least, begun.budget, begun.budget_source)
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
                stagnation=FLUSH_STAGNATION
                if stagnation is None
                else min(stagnation, FLUSH_STAGNATION),
                backend=backend,
                max_microbatches=max_microbatches,
                on_progress=on_progress,
                initial_plans=[p for p in initial_plans if family_of(p).separable],
                interrupted=interrupted,
                on_phase=None if on_phase is None else lambda name: on_phase(f"flush {name}"),
                max_memory=max_memory,
                # Run-priced, a free flush plan recomputes: its seed would be slow.
                backward=MIRRORED if pricing == RUN_PRICING else FREE,
                lean=True,
            )
            phases.seconds |= {f"flush {name}": t for name, t in earlier.setup.items()}
        with phases("baselines"):
            baselines = earlier.baselines if earlier else best_baselines(problem)
            if pricing == RUN_PRICING and not mirrored:  # the order tables time them apart
                baselines = run_priced_baselines(problem, baselines)
            one_f_one_b = one_f_one_b_level(problem, baselines["1f1b"])
            in_force = limit_in_force(problem, memory_limit, one_f_one_b)
            levels = tradeoff_levels(problem, in_force, one_f_one_b)
            # the fastest 1F1B within each level, exactly, where it is not the best 1F1B (a
            # seed already): a limit's may have more microbatches than the default width,
            # which widens to hold it unless a width is given
            most = None if max_microbatches is None else narrowest
            memory = None
            if counting:  # as tidgap run holds them: 1F1B(m) within a level's samples can be
                # over its bytes, and one within its bytes over its samples
                memory = reference_memory(problem, in_force.bytes_cap, baselines["1f1b"])
            holding = OneFOneBHolding(problem, memory)
            best = baselines["1f1b"]
            within = [
                fastest_one_f_one_b_within(problem, level, pricing, most, holding, best)
                for level in levels
            ]
            # and within its samples: over its bytes perhaps, a start the GA mends
            sampled = (
                []
                if memory is None
                else [fastest_one_f_one_b_within(problem, level, pricing, most) for level in levels]
            )
            admitted = max(
                seeded_time_within(problem, level, fastest, pricing, most, holding)
                for level, fastest in zip(levels, within, strict=True)
            )
        with phases("compile"):
            background_compile.finish(helper)
            ticked, evaluator, xp, breeding = compiled_loops(
                problem, record, pricing, counting, admitted
            )
    finally:
        background_compile.stop(helper)
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
    counts = dict.fromkeys(b.microbatches for b in [*within, *sampled] if b is not None)
    best_count = baselines["1f1b"].microbatches
    fitting = [one_f_one_b_plan(problem, m) for m in counts if m != best_count]
    plans = [*first_plan, *fitting, *heuristics.values(), *initial_plans]
    kept = [*first_plan, *fitting, *initial_plans]
    times = heuristic_times(problem, heuristics, earlier.heuristic_times if earlier else None)
    needed = needed_counts(problem, baselines, heuristics, kept, times)
    fewest = fewest_within(problem, in_force)
    width = chromosome_width(problem, max_microbatches, [*needed, fewest])
    refusal = ordered_refusal(record, S, width)
    if refusal is not None:
        given = max_microbatches is not None and width <= max_microbatches
        fewer = ", or with fewer --max-microbatches" if given else ""
        raise InputError(f"{refusal}: search on the CPU (--cpu){fewer}", source="backend")
    if width < fewest:  # only a requested width can be this narrow
        raise InputError(
            f"{width} microbatches a stage cannot split the batch within the memory limit "
            f"({in_force.label}: at most {list(in_force.held)} samples per stage): that "
            f"takes at least {fewest}",
            source="max_microbatches",
        )
    equal = seed_plans(problem, width, population, baselines, stop.left())
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
    if memory is not None:
        memory = memory.on(xp, None if record.run_memory is None else load(record.run_memory))
    space = JointSpace(evaluator, *caps, width, *breeding, backward=backward, memory=memory)
    with phases("seeding"):
        capped = [p for level in levels for p in capped_one_f_one_b(problem, level, width, holding)]
        seeds = encode_seeds([*equal, *plans], partitions, levels, capped, problem, width)
        device_seeds = JointGenes(*(xp.asarray(a) for a in seeds.rows()))
        # a state saved or restored holds whole islands
        saved = (checkpoint, first_search, mirrored_state)
        whole = not lean_islands or any(given is not None for given in saved)
        size = island_size(population, len(levels), S, width, None if whole else stop.left())
        fill = max(size - seeds.size, size // 2)
        candidates = JointGenes.concatenate([space.repaired(device_seeds), space.random(fill, rng)])
        scored = (candidates, *space.evaluate(candidates))
        # the last island takes the candidates' arrays: no copy to fill anew
        last = len(levels) - 1
        islands = [
            Island.seeded(level, *scored, size, space.limit(level), owned=i == last)
            for i, level in enumerate(levels)
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
        [optimizer.best_within(level) for level in levels],
        earlier is not None and (earlier.interrupted if first_flush else earlier.first_cut),
        times,
    )
