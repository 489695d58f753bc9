"""``tidgap.Optimizer``: tidgap's GA as ask/tell, for planners that drive it in their own
loop (evosax / EvoX style).

    optimizer = tidgap.Optimizer(problem, seed=0, population=256)
    for _ in range(100):
        population = optimizer.ask()                   # arrays on the backend's xp
        optimizer.tell(population, optimizer.evaluate(population))
    plan, time = optimizer.best()

:meth:`Optimizer.ask` returns the individuals to score next (a generation's children, or
after a stagnation a restart's random individuals); :meth:`Optimizer.tell` takes their
fitness and makes the next generation. The fitness is the built-in evaluator's
(:meth:`Optimizer.evaluate`, :class:`~tidgap.optimize.scores.Scores`), a function of the
user's own given as ``fitness=`` (:data:`~tidgap.optimize.scores.Fitness`), or values the
caller computed. :func:`tidgap.search` is this loop with a stopping rule, checkpoints and
a final annealing (windowed) and polish (:meth:`Optimizer.result`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tidgap.backends import BACKENDS, default_backend
from tidgap.backends.ticks import MODEL_PRICING, PRICINGS, RUN_PRICING
from tidgap.model.errors import InputError
from tidgap.model.fileio import MAX_INTEGER_DIGITS
from tidgap.model.numbers import integer_at_least, is_number
from tidgap.model.plan import Plan, check_plan
from tidgap.model.problem import Problem, check_takes_time, require_problem
from tidgap.optimize.anneal_checkpoint import ResumedAnnealing, resumed_annealing
from tidgap.optimize.backward_rules import FREE, admitted_rule, check_rule
from tidgap.optimize.checkpoint import (
    ANNEAL_PHASE,
    DEFAULT_EVERY,
    MIRRORED_PHASE,
    Checkpoint,
    SavedState,
    SearchIdentity,
    current_state,
    drive,
    load_state,
    save_state,
)
from tidgap.optimize.flush_driver import finish_flush, prepare_flush
from tidgap.optimize.ga import DEFAULT_POPULATION
from tidgap.optimize.genome import Population
from tidgap.optimize.limits import ONE_F_ONE_B, bytes_level, checked_memory_limit
from tidgap.optimize.results import SearchProgress, SearchResult
from tidgap.optimize.scores import Fitness, Scores, checked_scores, to_ticks
from tidgap.optimize.windowed_driver import (
    prepare_windowed,
    searches_mirrored_first,
    windowed_backend,
)
from tidgap.optimize.windowed_finish import ANNEAL_CHAINS, finish_windowed
from tidgap.outputs.atomic import probe
from tidgap.schedules.families import SCHEDULES

#: The families a search can return.
SEARCHABLE = tuple(name for name, family in SCHEDULES.items() if not family.is_baseline)
#: The family searched by default.
DEFAULT_SCHEDULE = "windowed"
#: The smallest population a search takes (``--population``'s least).
MIN_POPULATION = 8
#: The family ``same_partition`` searches: the separable one (the dual GA shares a row).
SAME_PARTITION_SCHEDULE = next(name for name in SEARCHABLE if SCHEDULES[name].separable)


def plan_sequence(plans: Any) -> tuple[Plan, ...]:
    """``initial_plans`` as a tuple (a generator is read once, not used up by the checks);
    ``TypeError`` unless it is iterable (each plan is checked later)."""
    if isinstance(plans, Plan) or not isinstance(plans, Iterable):
        raise TypeError(f"initial_plans must be a sequence of tidgap.Plan (got {plans!r})")
    return tuple(plans)


def callable_or_none(*arguments: tuple[str, Any]) -> None:
    """``TypeError`` naming the first ``(name, value)`` whose value is neither ``None`` nor
    callable."""
    for name, value in arguments:
        if value is not None and not callable(value):
            raise TypeError(f"{name} must be a function or None (got {value!r})")


def at_least(*arguments: tuple[str, int | None, int | None]) -> None:
    """:class:`InputError` naming the first ``(name, value, least)`` whose value (unless
    ``None``) is not an integer (``bool`` is not one) or is below its least (``None``: no
    least)."""
    for name, value, least in arguments:
        if value is not None:
            integer_at_least(name, value, least)


#: What a stop request that answers ``True`` (``threading.Event().is_set``) is called.
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class PolledStop:
    """A caller's ``interrupted()`` as the search polls it: ``None`` or ``False`` go on,
    ``True`` stops as :data:`INTERRUPTED`, a non-empty string stops under that name (a
    signal's, ``"SIGINT"``); anything else is ``TypeError`` naming ``interrupted`` (a
    ``True`` became the result's ``stop_reason``, and the search failed at its end)."""

    asked: Callable[[], object]

    def __call__(self) -> str | None:
        answer = self.asked()
        if answer is None or answer is False:
            return None
        if answer is True:
            return INTERRUPTED
        if isinstance(answer, str) and answer:
            return answer
        raise TypeError(
            "interrupted() must return None, a bool or the name of what stopped it, such as "
            f"'SIGINT' (got {answer!r})"
        )


@dataclass(frozen=True)
class Stopping:
    """How a search driven by :func:`tidgap.search` stops and reports (the setup obeys
    it too: heuristics are skipped past the time limit, the first, flush search of a
    windowed one takes a share of it); see :func:`tidgap.search`."""

    generations: int | None = None
    time_limit: float | None = None
    stagnation: int | None = None
    interrupted: Callable[[], str | bool | None] | None = None
    on_progress: Callable[[SearchProgress], None] | None = None
    on_phase: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        """Refuse counts below their least (0 generations, 1 stagnant one), a time limit
        that is negative or NaN (which no elapsed time reaches: the search would not stop;
        infinity is allowed: stop on a signal) and callbacks that are not callable (which
        failed when first called, after the search)."""
        at_least(("generations", self.generations, 0), ("stagnation", self.stagnation, 1))
        callable_or_none(
            ("interrupted", self.interrupted),
            ("on_progress", self.on_progress),
            ("on_phase", self.on_phase),
        )
        if self.interrupted is not None and not isinstance(self.interrupted, PolledStop):
            object.__setattr__(self, "interrupted", PolledStop(self.interrupted))
        limit = self.time_limit
        if limit is not None and not (is_number(limit) and limit >= 0):
            raise InputError(
                f"must be a number of seconds >= 0 (got {limit!r})", source="time_limit"
            )
        try:
            float(limit or 0)
        except OverflowError:  # a Python integer beyond any float
            raise InputError(
                "is too large for a float (at most about 1.8e308 seconds; math.inf for no limit)",
                source="time_limit",
            ) from None


#: The default pricing: :data:`~tidgap.backends.ticks.RUN_PRICING` for a windowed search of
#: a problem ``tidgap calibrate`` timed through the runtime (its ``source.calibration``
#: has recompute or order tables: one recording ``source.batch_statistics`` has no
#: recompute tables), else :data:`~tidgap.backends.ticks.MODEL_PRICING`.
AUTO_PRICING = "auto"


def resolved_pricing(problem: Problem, pricing: str, schedule: str) -> str:
    """``pricing`` (:data:`AUTO_PRICING` or one of :data:`~tidgap.backends.ticks.PRICINGS`)
    as ``schedule`` is searched, else ``ValueError``: run pricing prices ordered plans only
    (a flush search's halves are priced apart, and a stage's backward cost depends on its
    forward partition)."""
    if pricing == AUTO_PRICING:
        calibrated = problem.recompute_times is not None or problem.order_times is not None
        return RUN_PRICING if calibrated and not SCHEDULES[schedule].separable else MODEL_PRICING
    if pricing not in PRICINGS:
        choices = ", ".join((AUTO_PRICING, *PRICINGS))
        raise ValueError(f"pricing must be one of {choices}, not {pricing!r}")
    if pricing != MODEL_PRICING and SCHEDULES[schedule].separable:
        raise ValueError(
            f"{pricing} pricing searches ordered plans (schedule windowed), not {schedule}"
        )
    return pricing


#: What a flush search refused for a memory limit should do instead.
WINDOWED_HINT = "search windowed plans under it (schedule windowed, not same-partition)"


def flush_memory_limit(problem: Problem, memory_limit: str | int) -> None:
    """Refuse a byte memory limit that no flush plan (every stage holds the whole batch)
    meets, and ``1f1b`` (a limit for ordered plans, documented so, even where the best 1F1B
    is 1F1B(1) and holds the whole batch too)."""
    if memory_limit == ONE_F_ONE_B:
        raise InputError(
            "a 1F1B limit is for ordered plans (flush plans hold the whole batch on every "
            f"stage, which 1F1B holds only with one microbatch); {WINDOWED_HINT}",
            source="memory_limit",
        )
    level = bytes_level(problem, int(memory_limit))
    if not level.admits([problem.batch_size] * problem.num_stages):
        raise InputError(
            f"every flush plan holds the whole batch, above {level.label} on some stage; "
            + WINDOWED_HINT,
            source="memory_limit",
        )


def resolved_backend(
    backend: str,
    problem: Problem,
    schedule: str,
    max_microbatches: int | None,
    memory_limit: str | int | None,
) -> str:
    """The backend that runs a search of ``schedule`` given ``backend``: ``auto`` is the
    default one, or for a windowed search :func:`windowed_backend`'s."""
    if backend != "auto":
        return backend
    if schedule == DEFAULT_SCHEDULE:
        return windowed_backend(problem, max_microbatches, memory_limit)
    return default_backend()


def checked_search(
    problem: Problem,
    *,
    schedule: str | None = None,
    seed: int = 0,
    population: int = DEFAULT_POPULATION,
    backend: str = "auto",
    memory_limit: str | int | None = None,
    initial_plans: Any = (),
    max_microbatches: int | None = None,
    same_partition: bool = False,
    backward: str = FREE,
    pricing: str = AUTO_PRICING,
    max_memory: int | None = None,
    checkpoint_every: float = DEFAULT_EVERY,
) -> tuple[SearchIdentity, tuple[Plan, ...], int | None]:
    """The arguments of a search of ``problem`` checked (:class:`InputError`, ``ValueError``
    or ``TypeError`` naming the first bad one, before any work) and made plain Python
    values: its identity (what a state file must match), its initial plans and its
    ``max_memory``. :class:`Optimizer` and :func:`~tidgap.optimize.many.search_many` (for
    every problem before any task starts) check with it."""
    if backend not in ("auto", *BACKENDS):
        raise ValueError(f"unknown backend {backend!r}; known: auto, {', '.join(BACKENDS)}")
    if not isinstance(same_partition, (bool, np.bool_)):
        raise InputError(f"must be True or False (got {same_partition!r})", source="same_partition")
    same_partition = bool(same_partition)
    if schedule is None:
        schedule = SAME_PARTITION_SCHEDULE if same_partition else DEFAULT_SCHEDULE
    if schedule not in SEARCHABLE:
        raise ValueError(f"unknown schedule {schedule!r}; searchable: {', '.join(SEARCHABLE)}")
    memory_limit = checked_memory_limit(memory_limit)
    if not (is_number(checkpoint_every) and checkpoint_every > 0):
        raise InputError(
            f"must be a positive number of seconds (got {checkpoint_every!r})",
            source="checkpoint_every",
        )
    integer_at_least("seed", seed, None)
    integer_at_least("population", population, MIN_POPULATION)
    seed, population = int(seed), int(population)
    at_least(
        ("max_microbatches", max_microbatches, 1),
        ("max_memory", max_memory, 1),
    )
    # plain Python values: they go into state files and plans as JSON
    max_microbatches = None if max_microbatches is None else int(max_microbatches)
    max_memory = None if max_memory is None else int(max_memory)
    for name, value in (
        ("seed", seed),
        ("population", population),
        ("max_microbatches", max_microbatches),
        ("max_memory", max_memory),
    ):
        if value is not None and len(str(abs(value))) > MAX_INTEGER_DIGITS:
            raise InputError(
                f"has {len(str(abs(value)))} digits, at most {MAX_INTEGER_DIGITS} (the longest "
                "integer a plan or state file keeps)",
                source=name,
            )
    initial_plans = plan_sequence(initial_plans)
    for i, plan in enumerate(initial_plans):
        check_plan(plan, problem, f"initial_plans[{i}]", repaired=True)
    identity = SearchIdentity(
        schedule,
        seed,
        population,
        resolved_backend(backend, problem, schedule, max_microbatches, memory_limit),
        same_partition,
        admitted_rule(check_rule(backward), problem),
        memory_limit,
        max_microbatches,
        resolved_pricing(problem, pricing, schedule),
    )
    return identity, initial_plans, max_memory


class Optimizer:
    """The GA of ``schedule`` (``windowed`` or ``flush``; default windowed, flush with
    ``same_partition``) for ``problem``, set up as :func:`tidgap.search` sets it up
    (baselines, heuristics and seeds; a windowed one runs a short flush search first, as
    it is built, sized by ``stopping`` as the search sizes it) and stopped between
    generations: :meth:`drive` then :meth:`result` with ``stopping`` give
    :func:`tidgap.search`'s plan under the same rule.

    ``fitness`` (:data:`~tidgap.optimize.scores.Fitness`) replaces the built-in objective
    in :meth:`evaluate` (the first population, drawn by the built-in one, is scored again
    with it). A windowed optimizer selects within each memory level on the ``peaks`` and
    returns the best plan within ``memory_limit``; a flush one selects each direction on
    its own half (the fitness must be separable: ``(forward, backward)`` values).
    ``resume`` (a state file or :class:`SavedState`) continues a saved optimizer with the
    same problem and options. ``checkpoint`` (a path) is where :meth:`drive` saves the
    state every ``checkpoint_every`` seconds and at the end; a run-priced windowed
    optimizer's mirrored first search, run as it is built, saves there too (a resume
    finishes that search first), and so does a windowed optimizer's annealing in
    :meth:`result` (a resume goes on annealing). The same seed, options and fitness give
    the same sequence of populations. ``lean``: nothing will read or save its state
    before :meth:`drive` ends (as in :func:`tidgap.search` without a checkpoint), so a
    windowed optimizer short of time for a generation may set up islands that hold only
    the annealing's chains (:func:`~tidgap.optimize.windowed_driver.island_size`).
    """

    def __init__(
        self,
        problem: Problem,
        *,
        schedule: str | None = None,
        seed: int = 0,
        population: int = DEFAULT_POPULATION,
        backend: str = "auto",
        memory_limit: str | int | None = None,
        initial_plans: Sequence[Plan] = (),
        max_microbatches: int | None = None,
        same_partition: bool = False,
        backward: str = FREE,
        pricing: str = AUTO_PRICING,
        max_memory: int | None = None,
        fitness: Fitness | None = None,
        resume: str | os.PathLike[str] | SavedState | None = None,
        stopping: Stopping = Stopping(),
        checkpoint: str | os.PathLike[str] | None = None,
        checkpoint_every: float = DEFAULT_EVERY,
        lean: bool = False,
    ) -> None:
        require_problem(problem)
        check_takes_time(problem)  # a Problem built in Python: speedups must be finite
        callable_or_none(("fitness", fitness))
        if not isinstance(stopping, Stopping):
            raise TypeError(f"stopping must be a tidgap.Stopping (got {stopping!r})")
        self.identity, initial_plans, max_memory = checked_search(
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
            checkpoint_every=checkpoint_every,
        )
        identity = self.identity  # the checked values, below
        schedule, seed, population = identity.schedule, identity.seed, identity.population
        max_microbatches, backward = identity.max_microbatches, identity.backward
        memory_limit, same_partition = identity.memory_limit, identity.same_partition
        if not (resume is None or isinstance(resume, (str, os.PathLike, SavedState))):
            raise InputError(
                f"must be a state file's path or a SavedState (got {type(resume).__name__})",
                source="resume",
            )
        if isinstance(resume, (str, os.PathLike)) and not os.fspath(resume):
            raise InputError("no file name (an empty argument)", source="resume")
        saved = load_state(resume) if isinstance(resume, (str, os.PathLike)) else resume
        if saved is not None:
            saved.check(problem, self.identity)
        phase = None if saved is None else saved.phase
        mirrors_first = not SCHEDULES[schedule].separable and searches_mirrored_first(
            self.identity.pricing, self.identity.backward
        )
        if phase == MIRRORED_PHASE and not mirrors_first:
            raise InputError(
                "was saved in a mirrored first search, which this search does not run",
                ("phase",),
                source=saved.source,
            )
        if phase == ANNEAL_PHASE and SCHEDULES[schedule].separable:
            raise InputError(
                "was saved in a windowed search's annealing, which a flush search does not run",
                ("phase",),
                source=saved.source,
            )
        self.checkpoint = None
        if checkpoint is not None:
            if not isinstance(checkpoint, (str, os.PathLike)):
                raise InputError(
                    f"must be a path (got {type(checkpoint).__name__})", source="checkpoint"
                )
            if not os.fspath(checkpoint):  # the current folder: found only at the first save
                raise InputError("no file name (an empty argument)", source="checkpoint")
            probe(checkpoint)  # before the search, not after it
            self.checkpoint = Checkpoint(str(checkpoint), self.identity, checkpoint_every)
        self.stopping = stopping
        options: dict[str, Any] = dict(
            seed=seed,
            population=population,
            generations=stopping.generations,
            time_limit=stopping.time_limit,
            stagnation=stopping.stagnation,
            backend=identity.backend,  # resolved once, in checked_search
            max_microbatches=max_microbatches,
            on_progress=stopping.on_progress,
            initial_plans=initial_plans,
            interrupted=stopping.interrupted,
            on_phase=stopping.on_phase,
            max_memory=max_memory,
        )
        self.separable = SCHEDULES[schedule].separable
        if self.separable and backward != FREE and fitness is not None:
            why = ""
            if problem.batch_statistics_layers:  # the rule admitted_rule gave it
                why = (
                    " (this problem's rule: its layers normalise by their batch's statistics, "
                    "source.batch_statistics, so it recomputes nowhere)"
                )
            raise ValueError(
                "a flush search with a backward rule repairs its result by iteration time; it "
                f"takes no fitness of its own (search windowed plans, or drop the rule){why}"
            )
        if self.separable:
            if memory_limit is not None:
                flush_memory_limit(problem, memory_limit)
            self.run: Any = prepare_flush(
                problem, same_partition=same_partition, backward=backward, **options
            )
        else:
            if same_partition:
                raise ValueError(f"same_partition searches {SAME_PARTITION_SCHEDULE} plans only")
            in_ga = saved is not None and phase != MIRRORED_PHASE
            self.run = prepare_windowed(
                problem,
                memory_limit=memory_limit,
                backward=backward,
                pricing=self.identity.pricing,
                first_search=saved.first_search(problem) if in_ga else None,
                checkpoint=self.checkpoint,
                mirrored_state=None if in_ga else saved,
                lean_islands=lean,
                **options,
            )
        self.run.optimizer.fitness = fitness
        if saved is not None and phase != MIRRORED_PHASE:
            saved.restore(self.run.optimizer)  # scored again with this fitness
        elif fitness is not None:
            self.run.optimizer.rescore()
        self.annealing: ResumedAnnealing | None = None
        #: the last :meth:`ask`'s population as handed out, and the optimizer's own
        self._asked: tuple[Population, Population] | None = None
        self._asks = 0  # ask() calls so far: Scores from evaluate() carry the count
        if phase == ANNEAL_PHASE and fitness is None:
            annealing = resumed_annealing(saved, self.run.optimizer, ANNEAL_CHAINS)  # checked
            if not stopping.generations:  # more generations: its GA goes on, then anneals
                self.annealing = annealing

    @property
    def problem(self) -> Problem:
        """The problem searched."""
        return self.run.problem

    @property
    def generation(self) -> int:
        """Generations told so far (a resumed optimizer's included)."""
        return self.run.optimizer.counters.generation

    @property
    def evaluations(self) -> int:
        """Individuals scored so far, the first population included."""
        return self.run.optimizer.counters.evaluations

    def ask(self) -> Population:
        """The next individuals to score: ``forward`` and ``backward`` ``(P', S, K)``
        microbatch sizes in units (zero padded) and, for a windowed optimizer, ``order``
        ``(P', S, 2K)`` op codes (:mod:`tidgap.optimize.genome`), on the backend's array
        module. Tell them back before asking again. The arrays are copies: changing them
        changes nothing the optimizer breeds from or evaluates."""
        internal = self.run.optimizer.ask()
        order = None if internal.order is None else internal.order.copy()
        handed = Population(internal.forward.copy(), internal.backward.copy(), order)
        self._asked = (handed, internal)
        self._asks += 1
        return handed

    def _asked_population(self, population: Population, call: str) -> Population:
        """The optimizer's own population behind ``population``, the last :meth:`ask`'s;
        ``ValueError`` naming ``call`` for any other."""
        if self._asked is None or self._asked[0] is not population:
            raise ValueError(f"{call} takes the population the last ask() returned")
        return self._asked[1]

    def evaluate(self, population: Population) -> Scores:
        """The optimizer's fitness of the last asked ``population``: the built-in
        evaluator's iteration times (and peaks, and a flush family's two halves), or the
        ``fitness`` given at construction applied to them (``ValueError`` for another
        population)."""
        scores = self.run.optimizer.evaluate(self._asked_population(population, "evaluate()"))
        return replace(scores, asked=self._asks)

    def tell(
        self, population: Population, fitness: Any, *, valid: Any = None, peaks: Any = None
    ) -> None:
        """Make the next generation from the last :meth:`ask`'s ``population`` and its
        ``fitness``: :class:`Scores` (from :meth:`evaluate`), or values in the problem's
        time unit (lower is better; ``inf`` rejects one): ``(P,)`` for a windowed
        optimizer (with ``peaks`` ``(P, S)`` samples, else the built-in evaluator
        computes them), ``(forward, backward)`` for a flush one. ``valid`` ``(P,)`` bool
        rejects the individuals where it is false (a constraint mask)."""
        optimizer = self.run.optimizer
        tick = optimizer.ticked.tick
        population = self._asked_population(population, "tell()")
        if self.separable and peaks is not None:
            raise ValueError(
                "peaks are a windowed optimizer's (its memory levels); flush takes none"
            )
        if isinstance(fitness, Scores):
            if fitness.asked not in (None, self._asks):
                raise ValueError(
                    "these Scores are of an earlier ask()'s population: tell the scores of the "
                    "last one (evaluate(population))"
                )
            scores = checked_scores(fitness, tick, optimizer.xp)
            scores = scores if valid is None else scores.masked(valid)
            if self.separable:
                optimizer.tell(population, scores)
            else:
                optimizer.tell(population, scores, peaks=peaks)
        elif self.separable:
            if not (isinstance(fitness, tuple) and len(fitness) == 2):
                raise ValueError("the flush family is separable: tell it (forward, backward)")
            forward, backward = fitness
            halves = (to_ticks(forward, tick, valid), to_ticks(backward, tick, valid))
            if halves[0].shape != halves[1].shape:  # else NumPy's broadcast error
                shapes = [half.shape for half in halves]
                raise ValueError(f"the flush fitness returned halves of shapes {shapes}")
            optimizer.tell(population, Scores(halves[0] + halves[1], tick, halves))
        else:
            optimizer.tell(population, Scores(to_ticks(fitness, tick, valid), tick), peaks=peaks)
        self._asked = None

    def best(self) -> tuple[Plan, float] | None:
        """The best plan so far (within the memory limit in force) and its fitness in the
        problem's time unit (its iteration time, for the built-in fitness); ``None`` when
        no individual is within the limit, or a fitness of the caller's own rejected every
        one (then :meth:`result` is ``ValueError``). A flush optimizer with a backward rule repairs
        its plan in :meth:`result` only: this one may recompute."""
        return self.run.optimizer.best()

    def plans(self, population: Population) -> list[Plan]:
        """Every individual of ``population`` as a :class:`~tidgap.Plan` (``TypeError``
        unless it is a :class:`Population`; ``ValueError`` naming an op code that is not one
        of :mod:`tidgap.optimize.genome`'s)."""
        if not isinstance(population, Population):
            raise TypeError(f"population must be a Population, as ask() gives (got {population!r})")
        if not self.separable and population.order is None:  # else an IndexError in decoding
            raise ValueError("a windowed optimizer's population has op codes: order is None")
        return self.run.optimizer.plans(population)

    @property
    def state(self) -> SavedState:
        """The state now, in memory (``meta`` and host ``arrays``, as a state file holds
        them); ``Optimizer(..., resume=optimizer.state)`` continues from it."""
        return current_state(self.run, self.identity)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the state (``tidgap.state/1``, :mod:`tidgap.optimize.checkpoint`) to
        ``path`` atomically; ``Optimizer(..., resume=path)`` continues from it."""
        if not os.fspath(path):  # else "cannot write: Is a directory" (the working folder)
            raise InputError("no file name (an empty argument)", source="path")
        save_state(path, self.run, self.identity)

    def drive(self) -> str:
        """Run generations until the stopping rule given at construction says why (its
        name), saving to the ``checkpoint`` given then; ``ValueError`` if it has no
        generations, time limit or stagnation rule (it would never stop). Resumed from a
        state saved in the annealing, without more generations asked for, it runs none
        (that GA is over) and gives the reason that GA stopped."""
        stop = self.stopping
        if stop.generations is None and stop.time_limit is None and stop.stagnation is None:
            raise ValueError("drive() needs Stopping(generations=, time_limit= or stagnation=)")
        if self.annealing is not None:  # its GA is over
            return self.annealing.reason
        return drive(self.run, self.checkpoint)

    def result(self, stop_reason: str = "generations") -> SearchResult:
        """The search's result now: the best plans annealed (windowed; the annealing a
        resumed state holds goes on, and the ``checkpoint`` saves it) and polished (unless
        ``stop_reason`` names a signal), decoded and checked with the reference simulator,
        beside the baselines."""
        if not isinstance(stop_reason, str):
            raise TypeError(f"stop_reason must be a str (got {stop_reason!r})")
        if self.separable:
            return finish_flush(self.run, stop_reason)
        annealing, self.annealing = self.annealing, None  # a resumed annealing goes on once
        if annealing is not None and self.generation != annealing.ga.meta["counters"]["generation"]:
            annealing = None  # generations told since: their islands anneal afresh
        return finish_windowed(self.run, stop_reason, self.checkpoint, annealing)
