"""``tidgap.search``: find the plan with the least iteration time in a schedule family, and
put it beside the baselines people use today.

The family's record chooses the GA: a separable family (``flush``) runs the dual GA
(:mod:`tidgap.optimize.flush_driver`), any other (``windowed``) the joint GA on memory
islands (:mod:`tidgap.optimize.windowed_driver`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from tidgap.model.errors import InputError
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.checkpoint import (
    DEFAULT_EVERY,
    Checkpoint,
    SavedState,
    SearchIdentity,
    load_state,
)
from tidgap.optimize.flush_driver import flush_search
from tidgap.optimize.limits import ONE_F_ONE_B, bytes_level
from tidgap.optimize.preparation import chromosome_width, equal_seed_counts
from tidgap.optimize.results import SearchProgress, SearchResult
from tidgap.optimize.windowed_driver import windowed_search
from tidgap.schedules.families import SCHEDULES

#: The families a search can return.
SEARCHABLE = tuple(name for name, family in SCHEDULES.items() if not family.is_baseline)
#: The family searched by default.
DEFAULT_SCHEDULE = "windowed"
#: The family ``same_partition`` searches: the separable one (the dual GA shares a row).
SAME_PARTITION_SCHEDULE = next(name for name in SEARCHABLE if SCHEDULES[name].separable)
#: Stagnation rule when neither a time limit, nor generations, nor a stagnation rule is given.
DEFAULT_STAGNATION = 200

__all__ = [
    "DEFAULT_SCHEDULE",
    "SAME_PARTITION_SCHEDULE",
    "SEARCHABLE",
    "SearchProgress",
    "SearchResult",
    "chromosome_width",
    "equal_seed_counts",
    "search",
]


def _flush_memory_limit(problem: Problem, memory_limit: str | int) -> None:
    """Refuse a memory limit that no flush plan (every stage holds the whole batch) meets."""
    if memory_limit == ONE_F_ONE_B:
        raise InputError(
            "flush plans hold the whole batch on every stage, more than 1F1B; search "
            "--schedule windowed under this limit",
            source="--memory-limit",
        )
    level = bytes_level(problem, int(memory_limit))
    if not level.admits([problem.batch_size] * problem.num_stages):
        raise InputError(
            f"every flush plan holds the whole batch, above {level.label} on some stage; "
            "search --schedule windowed under this limit",
            source="--memory-limit",
        )


def search(
    problem: Problem,
    *,
    schedule: str | None = None,
    seed: int = 0,
    population: int = 512,
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
    memory_limit: str | int | None = None,
    no_recompute: bool = False,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every: float = DEFAULT_EVERY,
    resume: str | os.PathLike[str] | SavedState | None = None,
) -> SearchResult:
    """Search ``schedule`` plans (``windowed`` or ``flush``; default windowed, flush with
    ``same_partition``) for ``problem``.

    The same seed, backend, input and stopping rule give the same plan, except that a
    time limit may stop at a different generation on a busier machine. The result is
    never worse than the best GPipe, local greedy or global DP plan (they seed the GA),
    nor than any feasible plan in ``initial_plans`` that fits the search; a windowed one
    is never worse than the best 1F1B nor than the best plan of its first, flush search.

    ``time_limit`` (seconds) covers the whole search after the backend's code is compiled
    (a first run compiles Numba's loops into the disk cache; ``setup["compile"]`` says how
    long it took). ``stagnation`` stops after that many generations without improvement;
    with ``None`` (the default) the search runs to ``time_limit`` or ``generations``,
    restarting what stagnates (keeping the best), and with neither given stops after
    :data:`DEFAULT_STAGNATION` generations without improvement. ``interrupted()`` is
    polled at every generation boundary: when it names a signal, the GA stops and the best
    plan so far is returned (``stop_reason`` is its name, ``"SIGINT"``). ``on_phase(name)``
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

    With ``no_recompute`` (windowed only), every stage's backward boundaries are forward
    boundaries, so ``tidgap run`` runs each backward on its forwards' stored graphs and
    recomputes nothing (:func:`tidgap.runtime.lowering.recomputes`); a constraint of the
    joint GA (other plans score as invalid; the 1F1B and GPipe seeds meet it).

    ``checkpoint`` (a path) saves the GA's state (:mod:`tidgap.optimize.checkpoint`)
    every ``checkpoint_every`` seconds, at the end and when a signal stops the search;
    ``resume`` (a path or a loaded state) continues from one, for the same problem, family,
    seed, population, backend and constraints (:class:`InputError` otherwise), and the
    stopping rule counts the generations after it: ``G1`` generations then ``G - G1``
    resumed give the plan of ``G``.
    """
    if schedule is None:
        schedule = SAME_PARTITION_SCHEDULE if same_partition else DEFAULT_SCHEDULE
    if schedule not in SEARCHABLE:
        raise ValueError(f"unknown schedule {schedule!r}; searchable: {', '.join(SEARCHABLE)}")
    if stagnation is None and time_limit is None and generations is None:
        stagnation = DEFAULT_STAGNATION
    identity = SearchIdentity(
        schedule, seed, population, backend, same_partition, no_recompute, memory_limit
    )
    saved = load_state(resume) if isinstance(resume, (str, os.PathLike)) else resume
    if saved is not None:
        saved.check(problem, identity)
    options = dict(
        checkpoint=None
        if checkpoint is None
        else Checkpoint(str(checkpoint), identity, checkpoint_every),
        resume=saved,
        seed=seed,
        population=population,
        generations=generations,
        time_limit=time_limit,
        stagnation=stagnation,
        backend=backend,
        max_microbatches=max_microbatches,
        on_progress=on_progress,
        initial_plans=initial_plans,
        interrupted=interrupted,
        on_phase=on_phase,
        max_memory=max_memory,
    )
    if SCHEDULES[schedule].separable:
        if no_recompute:
            raise InputError(
                "a flush search does not constrain backward boundaries; search --schedule "
                "windowed --no-recompute (it includes flush orders)",
                source="--no-recompute",
            )
        if memory_limit is not None:
            _flush_memory_limit(problem, memory_limit)
        return flush_search(problem, same_partition=same_partition, **options)
    if same_partition:
        raise ValueError(f"same_partition searches {SAME_PARTITION_SCHEDULE} plans only")
    return windowed_search(problem, memory_limit=memory_limit, no_recompute=no_recompute, **options)
