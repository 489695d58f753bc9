"""``tidgap.search``: find the plan with the least iteration time in a schedule family, and
put it beside the baselines people use today.

A short driver over :class:`tidgap.optimize.optimizer.Optimizer`: set up, run generations
(ask, evaluate, tell) until the stopping rule says so, checkpointing as asked, then anneal
(windowed) and polish.
The family's record chooses the GA: a separable family (``flush``) runs the dual GA
(:mod:`tidgap.optimize.flush_driver`), any other (``windowed``) the joint GA on memory
islands (:mod:`tidgap.optimize.windowed_driver`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.backward_rules import FREE
from tidgap.optimize.checkpoint import DEFAULT_EVERY, SavedState
from tidgap.optimize.ga import DEFAULT_POPULATION
from tidgap.optimize.optimizer import (
    AUTO_PRICING,
    DEFAULT_SCHEDULE,
    SAME_PARTITION_SCHEDULE,
    SEARCHABLE,
    Optimizer,
    Stopping,
)
from tidgap.optimize.preparation import chromosome_width, equal_seed_counts
from tidgap.optimize.results import SearchProgress, SearchResult

#: Stagnation rule when neither a time limit, nor generations, nor a stagnation rule is given.
DEFAULT_STAGNATION = 200

__all__ = [
    "AUTO_PRICING",
    "DEFAULT_SCHEDULE",
    "SAME_PARTITION_SCHEDULE",
    "SEARCHABLE",
    "SearchProgress",
    "SearchResult",
    "chromosome_width",
    "equal_seed_counts",
    "search",
]


def search(
    problem: Problem,
    *,
    schedule: str | None = None,
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
    interrupted: Callable[[], str | bool | None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    max_memory: int | None = None,
    memory_limit: str | int | None = None,
    backward: str = FREE,
    pricing: str = AUTO_PRICING,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every: float = DEFAULT_EVERY,
    resume: str | os.PathLike[str] | SavedState | None = None,
) -> SearchResult:
    """Search ``schedule`` plans (``windowed`` or ``flush``; default windowed, flush with
    ``same_partition``) for ``problem``.

    The same seed, backend, input and stopping rule give the same plan, except that a
    time limit may stop at a different generation on a busier machine. The result is
    never worse than the best GPipe, local greedy or global DP plan that ran (they seed the GA),
    nor than any feasible plan in ``initial_plans``, each where it fits the search (a
    ``max_microbatches`` given is kept, not raised for a plan of more microbatches); a
    windowed one is never worse than the best 1F1B nor than the best plan of its first
    search (flush; a run-priced one that admits recomputation: a mirrored windowed
    search, for half its time limit or half its generations, at most 300).

    ``time_limit`` (seconds) covers the whole search after the backend's code is compiled
    (a first run compiles Numba's loops into the disk cache; ``setup["compile"]`` says how
    long it took); a heuristic that would not end within it is skipped
    (:func:`tidgap.optimize.preparation.add_heuristics`). ``stagnation``
    stops after that many generations without improvement; with ``None`` (the default)
    the search runs to ``time_limit`` or ``generations``, restarting what stagnates
    (keeping the best), and with neither given stops after :data:`DEFAULT_STAGNATION`
    generations without improvement. ``interrupted()`` is
    polled at every generation boundary: when it returns ``True`` or a name (a signal's,
    ``"SIGINT"``), the GA stops and the best plan so far is returned (``stop_reason`` is
    the name, or ``"interrupted"``; ``None`` or ``False`` go on: ``threading.Event().is_set``
    serves). ``on_phase(name)``
    is called as each setup phase starts. ``max_memory`` (bytes, default half the available
    memory) bounds the estimated footprint (:mod:`tidgap.optimize.memory`); a larger one
    raises :class:`InputError`.

    ``memory_limit`` (``"1f1b"`` or bytes per stage, with ``activation_bytes``) and the
    stages' ``memory_limit`` bound every stage's peak memory: the result is never over
    them (:class:`InputError` if no plan within them is found). A windowed result also
    gives ``tradeoff``: the fastest plan within the best 1F1B's memory, 1.5x and 2x that,
    and unlimited.

    With ``same_partition`` (flush only), every stage runs one shared partition per
    direction (what runtimes with variable microbatch sizes but one partition can
    execute): a chromosome is one row, ``(P, 1, K)``; seeds whose stages differ are left
    out.

    ``backward`` is the rule of the backward partitions (:mod:`tidgap.optimize.backward_rules`).
    With ``aligned``, every stage's backward boundaries are forward boundaries, so
    ``tidgap run`` runs each backward on its forwards' stored graphs and recomputes nothing
    (:func:`tidgap.runtime.lowering.recomputes`): for the joint GA a constraint (other
    plans score as invalid; the 1F1B and GPipe seeds meet it); for flush, seeded and
    repaired (the backward becomes the best coarsening of one of the best forwards, equal
    partitions among them, so never slower than the best GPipe).

    ``pricing`` is how plans are timed: ``"model"``, model.md's op times (what the golden
    cases and UMPIPE price); ``"run"`` (windowed only), as ``tidgap run`` runs them (a
    stage whose backward boundaries are all forward boundaries runs each backward over its
    forwards' stored graphs, at the sum of their backward times, and where calibrated so
    the ops timed by the op before them at the order tables' times; any other recomputes, at
    the calibrated or profiled recompute costs), so the result's time is
    :func:`tidgap.runtime.pricing.run_evaluation`'s; ``"auto"`` (the default), run for a
    windowed search of a problem ``tidgap calibrate`` timed through the runtime (its
    recompute or order tables), else model.
    ``result.pricing`` says which.

    ``checkpoint`` (a path) saves the GA's state (:mod:`tidgap.optimize.checkpoint`)
    every ``checkpoint_every`` seconds, at the end and when a signal stops the search (during
    a mirrored first search, that search's GA's; during a windowed search's annealing, the
    annealing's, which a resume goes on with: :mod:`tidgap.optimize.anneal_checkpoint`);
    ``resume`` (a path or a loaded state) continues from one, for the same problem, family,
    seed, population, backend and constraints (:class:`InputError` otherwise), and the
    stopping rule counts the generations after it: ``G1`` generations then ``G - G1``
    resumed give the plan of ``G``.
    """
    if stagnation is None and time_limit is None and generations is None:
        stagnation = DEFAULT_STAGNATION
    stopping = Stopping(generations, time_limit, stagnation, interrupted, on_progress, on_phase)
    optimizer = Optimizer(
        problem,
        schedule=schedule,
        seed=seed,
        population=population,
        backend=backend,
        memory_limit=memory_limit,
        initial_plans=initial_plans,
        max_microbatches=max_microbatches,
        same_partition=same_partition,
        backward=backward,
        pricing=pricing,
        max_memory=max_memory,
        resume=resume,
        stopping=stopping,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        lean=True,
    )
    return optimizer.result(optimizer.drive())
