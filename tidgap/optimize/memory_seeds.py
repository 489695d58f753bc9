"""Seeds within a tight memory limit: 1F1B with fewer microbatches in flight.

1F1B(m) keeps ``S - s`` microbatches in flight on stage ``s``; a limit below that (a
stage's ``memory_limit`` of a unit or two) admits no baseline, and random orders rarely
fit it. The same equal partition with fewer in flight always does, down to one microbatch
of one unit per stage (``FBFB...``): so a search seeded with these finds a plan within
every limit that leaves each stage a unit of samples (:func:`require_room`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from tidgap.backends.ticks import MODEL_PRICING, RUN_PRICING
from tidgap.backends.xp import to_host
from tidgap.model.errors import InputError
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.limits import ONE_F_ONE_B, MemoryLevel, bytes_level, stage_level
from tidgap.optimize.memory import exact_bytes
from tidgap.optimize.run_memory import RunMemory
from tidgap.optimize.windowed_seeds import encode_plans
from tidgap.runtime.pricing import (
    order_credit,
    plan_pricing,
    run_evaluation,
    run_priced_baselines,
)
from tidgap.schedules.baselines import (
    BASELINE_ROWS,
    BaselineResult,
    baseline_times,
    best_baselines,
    equal_partition,
    feasible_microbatch_counts,
    least_feasible_count,
    one_f_one_b_plan,
)
from tidgap.schedules.held import one_f_one_b_held
from tidgap.schedules.ir import alternating_letters


def require_room(
    problem: Problem, memory_limit: str | int | None, least: Sequence[float] | None = None
) -> None:
    """Raise :class:`InputError` where the stages' own ``memory_limit`` (on
    ``stages[s].memory_limit``) or ``memory_limit`` bytes (on ``--memory-limit``; ``1f1b``
    always leaves room) leave some stage no room for any plan: less than one unit of
    samples, which every plan holds at its first forward (model.md, Memory), or where the
    search counts memory as ``tidgap run`` holds it, fewer bytes than ``least``
    (:func:`~tidgap.optimize.run_memory.least_bytes`: a recomputing stage holds less than
    its samples' activations) on a stage with ``activation_bytes`` (no byte limit binds a
    stage without: :meth:`~tidgap.optimize.run_memory.RunMemory.limit`). A stage's own limit
    names the first such stage; ``memory_limit``, the one that needs the most bytes."""
    limits: list[tuple[MemoryLevel, str | None]] = [(stage_level(problem), None)]
    if memory_limit is not None and memory_limit != ONE_F_ONE_B:
        limits.append((bytes_level(problem, int(memory_limit)), "memory_limit"))
    for level, option in limits:
        caps = level.bytes_cap or (math.inf,) * problem.num_stages
        short: list[tuple[float, int, str]] = []  # (bytes a plan needs, stage, why)
        for s, held in enumerate(level.held):
            stage = problem.stages[s]
            if least is None and held < problem.unit:
                need = problem.unit * (stage.activation_bytes or 0.0)
                why = (
                    f"holds {held} samples of {exact_bytes(stage.activation_bytes)} on stage {s}; "
                    f"every plan holds at least one microbatch there (unit {problem.unit} "
                    "samples)"
                )
            elif least is not None and stage.activation_bytes and caps[s] < least[s]:
                need = least[s]
                why = (
                    f"is below the {exact_bytes(least[s])} every plan holds on stage {s} as "
                    "tidgap run holds it (at least the task's tensors and one unit of "
                    "samples' activations)"
                )
            else:
                continue
            short.append((need, s, why))
        if not short:
            continue
        _, s, why = max(short, key=lambda entry: entry[0]) if option else short[0]
        limit = exact_bytes(memory_limit if option else problem.stages[s].memory_limit)
        raise InputError(
            f"a limit of {limit} {why}, so no plan fits",
            () if option else ("stages", s, "memory_limit"),
            option,
        )


def fewest_within(problem: Problem, level: MemoryLevel) -> int:
    """The fewest equal microbatches whose largest fits every stage's ``level.held`` and
    the caps (at least one unit per stage: :func:`require_room`)."""
    most = min(problem.common_cap(), *level.held) // problem.unit
    return -(-problem.num_units // max(most, 1))


def in_flight(problem: Problem, level: MemoryLevel, size: int) -> list[int]:
    """Per stage, the most microbatches of ``size`` samples 1F1B may keep in flight within
    ``level``: at most ``S - s`` (1F1B's own), within ``held[s] // size``, and no more
    than on the stage before (then no backward waits for a forward its stage has not run:
    model.md, rule 2); a 0 where some stage up to it cannot hold one."""
    S = problem.num_stages
    fits = [min(S - s, held // size) for s, held in enumerate(level.held)]
    return list(accumulate(fits, min))


#: Most gene entries (stages x width, summed over the counts) :class:`OneFOneBHolding`
#: counts as ``tidgap run`` holds them, per search: a few seconds (every 1F1B of 64 stages
#: and batch 1024 took a minute and 1 GB); past it, 1F1B is counted in samples.
COUNTED_AT_MOST = 2**23
#: The most counts :meth:`OneFOneBHolding.any_within` tries, fewest samples in flight first.
TRIED_FOR_ANY = 8


@dataclass
class OneFOneBHolding:
    """How a search counts what 1F1B(m) holds on each stage: its samples
    (:func:`one_f_one_b_held`, model.md), or with ``memory`` (host figures referenced to
    the best 1F1B: :func:`reference_memory`) in its units, as ``tidgap run`` holds it
    (where a level in samples and one in bytes disagree: 1F1B(m) within a level's samples
    can be over its bytes, and the fastest 1F1B within the bytes then was never seeded);
    the units counted once per ``m``, one count at a time, at most
    :data:`COUNTED_AT_MOST` gene entries in all."""

    problem: Problem
    memory: RunMemory | None = None
    _units: dict[int, np.ndarray] = field(default_factory=dict)
    _spent: int = 0

    def fits(self, level: MemoryLevel, counts: np.ndarray) -> np.ndarray:
        """``(M,)`` bool: whether 1F1B(m) is within ``level``'s samples, for each of
        ``counts``."""
        return (one_f_one_b_held(self.problem, counts) <= np.asarray(level.held)).all(axis=1)

    def units(self, m: int) -> np.ndarray | None:
        """``(S,)`` int64: what 1F1B(``m``) holds as ``tidgap run`` holds it, in the
        memory's units; ``None`` where counting it would pass :data:`COUNTED_AT_MOST`."""
        assert self.memory is not None, "counted in samples"
        units = self._units.get(m)
        if units is None:
            cost = self.problem.num_stages * m
            if self._spent + cost > COUNTED_AT_MOST:
                return None
            self._spent += cost
            peaks = one_f_one_b_held(self.problem, np.asarray([m], dtype=np.int64))[0]
            units = run_units(self.memory, self.problem, one_f_one_b_plan(self.problem, m), peaks)
            self._units[m] = units
        return units

    def within(self, limit: np.ndarray, m: int) -> bool | None:
        """Whether 1F1B(``m``) is within ``limit`` (a level's :meth:`RunMemory.limit` on
        the host) as ``tidgap run`` holds it; ``None`` where counting it would pass
        :data:`COUNTED_AT_MOST`."""
        units = self.units(m)
        return None if units is None else bool((units <= limit).all())

    def _limit(self, level: MemoryLevel) -> np.ndarray:
        """``level``'s :meth:`RunMemory.limit` on the host, once per call that tries counts."""
        assert self.memory is not None, "counted as the run holds it"
        return to_host(self.memory.limit(level))

    def candidates(self, level: MemoryLevel, counts: np.ndarray, pricing: str) -> np.ndarray:
        """The counts of ``counts`` (ascending) within ``level`` among which the fastest
        1F1B within it is, as ``pricing`` times them: in order of model time, the first
        within it and, under run pricing, every other within it whose model time times
        :func:`~tidgap.runtime.pricing.order_credit` is not above that one's run-priced
        time (no other can be faster); counted as ``tidgap run`` holds them, or in samples
        (:meth:`fits`) where that would pass :data:`COUNTED_AT_MOST`."""
        if self.memory is None or not counts.size:
            return counts[self.fits(level, counts)]
        ms, times = baseline_times(self.problem, counts)
        row = times[BASELINE_ROWS.index("1f1b")]
        credit = order_credit(self.problem)
        limit = self._limit(level)
        chosen: list[int] = []
        bound = math.inf
        for i in np.argsort(row, kind="stable"):
            if credit * row[i] > bound:
                break
            inside = self.within(limit, int(ms[i]))
            if inside is None:
                return counts[self.fits(level, counts)]
            if not inside:
                continue
            chosen.append(int(ms[i]))
            if pricing != RUN_PRICING:
                break
            if len(chosen) == 1:
                plan = one_f_one_b_plan(self.problem, int(ms[i]))
                bound = run_evaluation(self.problem, plan).iteration_time
        return np.asarray(sorted(chosen), dtype=np.int64)

    def any_within(self, level: MemoryLevel, counts: np.ndarray) -> bool:
        """Whether some 1F1B(m) of ``counts`` is within ``level``: in samples, or as
        ``tidgap run`` holds it trying the :data:`TRIED_FOR_ANY` largest counts (fewest
        samples in flight; ``False`` where none of those is, so that
        :func:`capped_one_f_one_b` seeds its plans: more seeds, never fewer)."""
        if self.memory is None:
            return bool(self.fits(level, counts).any())
        tried = sorted(map(int, counts), reverse=True)[:TRIED_FOR_ANY]
        limit = self._limit(level)
        return any(self.within(limit, m) for m in tried)


def reference_memory(
    problem: Problem, caps: tuple[float, ...] | None, best: BaselineResult
) -> RunMemory | None:
    """The problem's run memory figures on the host (:meth:`RunMemory.of`; ``None``
    without them), fitted to the byte limits ``caps`` in force (:meth:`RunMemory.fitted`)
    and referenced to the best 1F1B ``best`` (:meth:`RunMemory.with_reference`)."""
    memory = RunMemory.of(problem)
    if memory is None:
        return None
    peaks, genes = one_f_one_b_genes(problem, best.microbatches)
    return memory.fitted(caps).with_reference(peaks, *genes.rows())


def run_units(memory: RunMemory, problem: Problem, plan: Plan, peaks: Sequence[int]) -> np.ndarray:
    """``(S,)`` int64: what ``plan`` (holding ``peaks[s]`` samples in the model) holds on
    each stage as ``tidgap run`` holds it, in ``memory``'s units (:meth:`RunMemory.held`
    of its repaired host genes, at its own width)."""
    width = max(map(len, plan.forward + plan.backward))
    genes = encode_plans([plan], problem, width).repaired()
    return memory.held(np.asarray([peaks], dtype=np.int64), *genes.rows())[0]


def one_f_one_b_genes(problem: Problem, m: int) -> tuple[np.ndarray, JointGenes]:
    """1F1B(``m``)'s ``(1, S)`` peak held samples and its repaired ``(1, S, m)`` host genes
    (what :meth:`RunMemory.held` counts)."""
    genes = encode_plans([one_f_one_b_plan(problem, m)], problem, m).repaired()
    return one_f_one_b_held(problem, np.asarray([m], dtype=np.int64)), genes


def fastest_one_f_one_b_within(
    problem: Problem,
    level: MemoryLevel,
    pricing: str = MODEL_PRICING,
    most: int | None = None,
    holding: OneFOneBHolding | None = None,
    best: BaselineResult | None = None,
) -> BaselineResult | None:
    """The fastest 1F1B(m) within ``level`` (:func:`best_baselines` over the counts that fit
    it, at most ``most`` where given, as ``holding`` counts them, else in samples;
    :data:`RUN_PRICING`: as ``tidgap run`` prices them), ``None`` where none fits. A limit
    admits other counts than the unlimited best's, often more microbatches than a search's
    default width: seeded (and the width widened to hold it), the search is never slower
    than it. ``best``, the model's fastest 1F1B over every feasible count, is the answer
    under :data:`MODEL_PRICING` where it fits (ties go to the fewest microbatches either
    way): the counts are not timed again (4 levels at 512 stages timed them for 3.5 s)."""
    holding = OneFOneBHolding(problem) if holding is None else holding
    counts = np.asarray(feasible_microbatch_counts(problem), np.int64)
    if most is not None:
        counts = counts[counts <= most]
    fitting = holding.candidates(level, counts, pricing)
    if fitting.size == 0:
        return None
    if best is not None and pricing == MODEL_PRICING and best.microbatches in fitting:
        return best
    best = best_baselines(problem, fitting)
    if pricing == RUN_PRICING:
        best = run_priced_baselines(problem, best, fitting)
    return best["1f1b"]


def seeded_time_within(
    problem: Problem,
    level: MemoryLevel,
    fastest: BaselineResult | None,
    pricing: str = MODEL_PRICING,
    most: int | None = None,
    holding: OneFOneBHolding | None = None,
) -> float:
    """The time (ms, priced by ``pricing``) of a plan within ``level`` that a windowed
    search of chromosomes ``most`` wide (``None``: as wide as the 1F1B needs) seeds:
    ``fastest``, the fastest 1F1B within it (:func:`fastest_one_f_one_b_within` at that
    ``most``, as ``holding`` counts), else the :func:`capped_one_f_one_b` of the fewest
    microbatches; ``inf`` where neither fits."""
    if fastest is not None:
        return fastest.iteration_time
    fewest = fewest_within(problem, level)
    if most is not None and fewest > most:
        return math.inf
    capped = capped_one_f_one_b(problem, level, fewest, holding)
    if not capped:
        return math.inf
    return plan_pricing(pricing)(problem, capped[0]).iteration_time


def capped_one_f_one_b(
    problem: Problem, level: MemoryLevel, most: int, holding: OneFOneBHolding | None = None
) -> list[Plan]:
    """Where no 1F1B(m) with ``m <= most`` is within ``level`` (as ``holding`` counts, else
    in samples): for each count ``m`` from :func:`fewest_within` up to ``most``, the equal
    partition in the 1F1B order with :func:`in_flight` microbatches on each stage, within
    ``level``'s samples by construction (``peak_held[s] <= held[s]``). None where some
    1F1B(m) fits (it is a seed already)."""
    holding = OneFOneBHolding(problem) if holding is None else holding
    S, top = problem.num_stages, min(most, problem.num_units)
    counts = np.arange(least_feasible_count(problem), top + 1, dtype=np.int64)
    if holding.any_within(level, counts):
        return []
    plans = []
    for m in range(fewest_within(problem, level), top + 1):
        sizes = equal_partition(problem, m)
        flight = in_flight(problem, level, sizes[0])
        if min(flight) >= 1:
            order = [alternating_letters(m, min(f, m) - 1) for f in flight]
            plans.append(Plan.of([sizes] * S, [sizes] * S, order=order))
    return plans
