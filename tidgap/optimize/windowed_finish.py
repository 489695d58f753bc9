"""The end of a windowed search: each level's best seed polished over the moves of groups
of stages into its island (pipelines under
:data:`~tidgap.optimize.polish.GROUP_MOVES_FROM_STAGES` stages), every island's fittest
annealed (:mod:`tidgap.optimize.anneal`), each level's best polished
(:mod:`tidgap.optimize.joint_polish`), more rounds of both while a time limit lasts, and
the result decoded and checked."""

from __future__ import annotations

import time

import numpy as np

from tidgap.backends.ticks import RUN_PRICING
from tidgap.backends.xp import to_host
from tidgap.model.errors import InputError
from tidgap.optimize.anneal import Annealing, AnnealState, anneal
from tidgap.optimize.anneal_checkpoint import AnnealSaving, ResumedAnnealing
from tidgap.optimize.backward_rules import refusal
from tidgap.optimize.checkpoint import Checkpoint, current_state
from tidgap.optimize.interrupts import STOP_SIGNALS
from tidgap.optimize.joint import JointSpace, fastest_within
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.joint_polish import joint_polish, scan_seconds
from tidgap.optimize.limits import STAGE_LIMITS, MemoryLevel
from tidgap.optimize.polish import Interrupted, groups_first
from tidgap.optimize.preparation import POLISH_SHARE, more_rounds, runs_to_the_limit
from tidgap.optimize.results import SearchResult
from tidgap.optimize.scores import require_some_valid
from tidgap.optimize.windowed_run import SEARCHED, WindowedRun, decoded, leanest_held

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
#: On pipelines whose final polish moves single stages only (under
#: :data:`~tidgap.optimize.polish.GROUP_MOVES_FROM_STAGES`), each level's best seed is
#: polished over the moves of groups of stages first, after the GA, for at most this share
#: of a time limit, and joins the islands and the levels' bests: 16 stages at 20 s within
#: 1F1B's memory 1.2-2.7% faster on two problems of three, 4-8 stages 0-0.7% faster or
#: slower, as one run from another (docs/measurements.md).
SEED_POLISH_SHARE = 0.1
#: About how long the reference simulator takes per op (a forward or backward of one
#: microbatch on one stage) of a plan it checks and times at the end, in seconds (one
#: core: 512 stages, 88064 ops, 0.27 s; 1024 stages, 193536 ops, 0.64 s, 0.7-1.1 s within a
#: search; 1.5e-5 until 2026-12-08, when the evaluation still built every step, then 6e-6
#: until the simulator stopped asking waiting stages again): a time limit keeps that long
#: for it (phase ``decode``).
DECODE_SECONDS_PER_OP = 4.5e-6


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
    unsaved = saving is None and resumed is None
    if deadline is None and time_limit is not None:
        # the polish keeps at least POLISH_SHARE: past that, no step would run, and timing
        # its scans for its reserve (0.5 s at 1024 stages) would only spend more time
        if unsaved and time.perf_counter() >= run.end() - POLISH_SHARE * time_limit:
            return fastest_admitted(found, run.levels, optimizer.space)
        deadline = run.end() - polish_reserve(run, found, time_limit)
    if unsaved and deadline is not None and time.perf_counter() >= deadline:
        return fastest_admitted(found, run.levels, optimizer.space)  # no step would run
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


def polished(
    found: list[tuple[JointGenes, int] | None],
    levels: list[MemoryLevel],
    in_force: MemoryLevel,
    space: JointSpace,
    deadline: float | None,
    interrupted: Interrupted | None = None,
    groups: bool | None = None,
    kicks: bool | None = None,
) -> list[tuple[JointGenes, int] | None]:
    """:func:`joint_polish` (moving groups of stages first where ``groups``, by default on
    deep pipelines; its kicks where ``kicks``, by default on the others) on each level's
    best until ``deadline``: first the level in force, for :data:`IN_FORCE_POLISH_SHARE` of
    the time left, then the others in turn, each an equal share of what is left; then each
    level takes the fastest polished plan it admits (a plan polished within a tighter level
    may beat the looser level's own). A signal (``interrupted``) stops the polish within a
    batch; the levels after it keep their bests."""
    first = levels.index(in_force)
    result = list(found)
    for n, i in enumerate([first, *(i for i in range(len(levels)) if i != first)]):
        share = None
        if deadline is not None:
            part = IN_FORCE_POLISH_SHARE if n == 0 else 1 / (len(levels) - n)
            share = time.perf_counter() + (deadline - time.perf_counter()) * part
        best = found[i]
        if best is not None:
            result[i] = joint_polish(*best, levels[i], space, share, interrupted, groups, kicks)
    return fastest_admitted(result, levels, space)


def with_polished_seeds(
    run: WindowedRun, found: list[tuple[JointGenes, int] | None]
) -> list[tuple[JointGenes, int] | None]:
    """Each level's best seed (:attr:`WindowedRun.seed_bests`) :func:`polished` over the
    moves of groups of stages first (until a local optimum, or for
    :data:`SEED_POLISH_SHARE` of a time limit; without the final polish's kicks, which
    changed the seeds the annealing starts from: s11 within 1F1B's memory 357.67 ->
    358.14 ms), put in its level's island in place of the least fit, and each level's
    fastest of those and ``found``. For pipelines whose final polish moves single stages
    alone (a deep one's moves groups first already). The GA does not see them: bred from
    the start they took the islands over (on one problem of six 1.2-1.4% slower within
    1F1B's memory; docs/measurements.md)."""
    deadline = None
    if run.time_limit is not None:
        end = run.end()
        deadline = min(time.perf_counter() + SEED_POLISH_SHARE * run.time_limit, end)
    space = run.optimizer.space
    levels, interrupted = run.levels, run.stop.interrupted
    seeds = polished(
        run.seed_bests, levels, run.in_force, space, deadline, interrupted, groups=True, kicks=False
    )
    adopt(run, seeds)
    return fastest_admitted([*found, *seeds], levels, space)


def adopt(run: WindowedRun, found: list[tuple[JointGenes, int] | None]) -> None:
    """Each island takes its level's plan in ``found`` in place of its least fit."""
    optimizer = run.optimizer
    for island, best in zip(optimizer.islands, found, strict=True):
        if best is not None:
            island.adopt(best[0], *optimizer.space.evaluate(best[0]))


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
    the latest round. Returns the bests and the stop reason (a signal's name if one came:
    it stops a round's annealing or polish)."""
    signalled = stop_reason in STOP_SIGNALS.values()
    if signalled or run.time_limit is None or not runs_to_the_limit(run.stop, run.time_limit):
        return found, stop_reason
    optimizer, phases = run.optimizer, run.phases
    end = run.end()

    def round_(deadline: float) -> float | None:
        nonlocal found, stop_reason
        adopt(run, found)
        with phases("anneal"):
            found = annealed(run, found, deadline, saving)
        started = time.perf_counter()
        if run.stop.signal() is None:
            with phases("polish"):
                levels, space = run.levels, optimizer.space
                found = polished(found, levels, run.in_force, space, end, run.stop.interrupted)
        if (name := run.stop.signal()) is not None:  # in the annealing or the polish
            stop_reason = name
            return None
        return time.perf_counter() - started

    more_rounds(end, run.time_limit, phases.seconds["polish"], round_)
    return found, stop_reason


def improved(
    run: WindowedRun,
    found: list[tuple[JointGenes, int] | None],
    stop_reason: str,
    checkpoint: Checkpoint | None,
    resumed: ResumedAnnealing | None,
) -> tuple[list[tuple[JointGenes, int] | None], str]:
    """The levels' bests ``found`` (the GA's) made faster for :func:`finish_windowed`:
    the seed polish (:func:`with_polished_seeds`; on a resumed annealing too, so that its
    islands take the unbroken search's plans), the annealing, the polish and later rounds
    (:func:`used_to_the_end`), each skipped once a signal came, whose name becomes the stop
    reason. ``checkpoint`` saves the annealing (phase
    :data:`~tidgap.optimize.checkpoint.ANNEAL_PHASE`, or the checkpoint's own in a first
    search) beside the GA's state from before the seed polish, and that state alone again
    once the search ends without a signal (more generations resume from it as an unbroken
    search of them goes on); a signal in the seed polish leaves the state the GA saved. A
    signal in a first search closes the checkpoint: the search after it saves nothing over
    the state to resume."""
    optimizer, phases = run.optimizer, run.phases

    def signalled(name: str) -> tuple[list[tuple[JointGenes, int] | None], str]:
        if checkpoint is not None:
            checkpoint.signalled()
        return found, name

    saving = None
    if checkpoint is not None:
        if resumed is None:
            ga = current_state(run, checkpoint.identity, checkpoint.phase)
        else:
            ga = resumed.ga
        saving = AnnealSaving(checkpoint, ga, stop_reason, optimizer.rng)
    if not groups_first(run.problem.num_stages):
        with phases("seed polish"):
            found = with_polished_seeds(run, found)
        if (name := run.stop.signal()) is not None:
            return signalled(name)
    with phases("anneal"):
        found = annealed(run, found, saving=saving, resumed=resumed)
    if (name := run.stop.signal()) is not None:
        return signalled(name)
    with phases("polish"):
        deadline = None if run.time_limit is None else run.end()
        interrupted = run.stop.interrupted
        found = polished(found, run.levels, run.in_force, optimizer.space, deadline, interrupted)
    stop_reason = run.stop.signal() or stop_reason
    found, stop_reason = used_to_the_end(run, found, stop_reason, saving)
    if stop_reason in STOP_SIGNALS.values():
        return signalled(stop_reason)
    if saving is not None:
        saving.finished()
    return found, stop_reason


def decoding_seconds(found: list[tuple[JointGenes, int] | None]) -> float:
    """About how long :func:`~tidgap.optimize.windowed_run.decoded` takes to simulate the
    distinct plans of ``found`` (by :data:`DECODE_SECONDS_PER_OP`): what a time limit keeps
    for it."""
    ops: dict[bytes, int] = {}
    for best in found:
        if best is not None:
            arrays = [to_host(a) for a in best[0].rows()]
            key = b"".join(a.tobytes() for a in arrays)
            ops[key] = int(np.count_nonzero(arrays[0]) + np.count_nonzero(arrays[1]))
    return DECODE_SECONDS_PER_OP * sum(ops.values())


def finish_windowed(
    run: WindowedRun,
    stop_reason: str,
    checkpoint: Checkpoint | None = None,
    resumed: ResumedAnnealing | None = None,
) -> SearchResult:
    """The result of ``run`` after its generations stopped for ``stop_reason``: each level's
    best :func:`improved` (or, ``resumed``, the annealing a state holds goes on; unless a
    signal stopped the GA, or a fitness of the user's own ranks them: the seed polish,
    annealing and polish minimise the iteration time), decoded and checked (phase
    ``decode``: the reference simulator, seconds at 1024 stages); ``checkpoint`` as
    :func:`improved` saves."""
    optimizer, levels, in_force, problem = run.optimizer, run.levels, run.in_force, run.problem
    require_some_valid(optimizer.pooled()[0])
    found = [optimizer.best_within(level) for level in levels]
    if stop_reason not in STOP_SIGNALS.values() and optimizer.fitness is None:
        run.reserve = decoding_seconds(found)
        found, stop_reason = improved(run, found, stop_reason, checkpoint, resumed)
    best_genes = [None if best is None else best[0] for best in found]
    with run.phases("decode"):
        tradeoff = decoded(best_genes, problem, levels, run.pricing, run.optimizer.space.memory)
    chosen = tradeoff[levels.index(in_force)]
    if chosen.plan is None or chosen.evaluation is None:
        held = f"at most {list(in_force.held)} samples per stage"
        if run.memory_pricing == RUN_PRICING:
            held = "as tidgap run holds plans"
        raise InputError(
            f"no plan found within the memory limit ({in_force.label}: {held})"
            + refusal(run.backward)
            + leanest_held(run),
            source="stages' memory_limit" if in_force.label == STAGE_LIMITS else "memory_limit",
        )
    return SearchResult(
        problem=problem,
        plan=chosen.plan,
        evaluation=chosen.evaluation,
        baselines=run.baselines,
        heuristics=run.heuristics,
        heuristic_times=run.heuristic_times,
        backend=run.backend,
        seed=run.seed,
        generations=optimizer.counters.generation + run.first[0],
        evaluations=optimizer.counters.evaluations + run.first[1],
        wall_time=time.perf_counter() - run.started,
        stop_reason=stop_reason,
        setup=run.phases.seconds,
        schedule=SEARCHED.name,
        memory_limit=in_force,
        tradeoff=tuple(tradeoff),
        backward=run.backward,
        pricing=run.pricing,
        memory_pricing=run.memory_pricing,
        first_cut=run.first_cut,
    )
