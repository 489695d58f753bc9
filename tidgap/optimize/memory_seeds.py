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
from tidgap.optimize.limits import ONE_F_ONE_B, MemoryLevel, bytes_level, stage_level
from tidgap.optimize.memory import exact_bytes
from tidgap.optimize.run_memory import RunMemory
from tidgap.optimize.windowed_seeds import encode_plans
from tidgap.runtime.pricing import plan_pricing, run_priced_baselines
from tidgap.schedules.baselines import (
    BaselineResult,
    best_baselines,
    equal_partition,
    feasible_microbatch_counts,
    least_feasible_count,
    one_f_one_b_plan,
)
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
    stage without: :meth:`~tidgap.optimize.run_memory.RunMemory.limit`)."""
    limits: list[tuple[MemoryLevel, str | None]] = [(stage_level(problem), None)]
    if memory_limit is not None and memory_limit != ONE_F_ONE_B:
        limits.append((bytes_level(problem, int(memory_limit)), "memory_limit"))
    for level, option in limits:
        caps = level.bytes_cap or (math.inf,) * problem.num_stages
        for s, held in enumerate(level.held):
            stage = problem.stages[s]
            if least is None and held < problem.unit:
                why = (
                    f"holds {held} samples of {exact_bytes(stage.activation_bytes)} on stage {s}; "
                    f"every plan holds at least one microbatch there (unit {problem.unit} "
                    "samples)"
                )
            elif least is not None and stage.activation_bytes and caps[s] < least[s]:
                why = (
                    f"is below the {exact_bytes(least[s])} every plan holds on stage {s} as "
                    "tidgap run holds it (at least the task's tensors and one unit of "
                    "samples' activations)"
                )
            else:
                continue
            limit = exact_bytes(memory_limit if option else stage.memory_limit)
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


#: Most gene entries (plans x stages x width) :class:`OneFOneBHolding` encodes at once.
ENCODED_AT_ONCE = 2**22


@dataclass
class OneFOneBHolding:
    """How a search counts what 1F1B(m) holds on each stage: its samples
    (:func:`one_f_one_b_held`, model.md), or with ``memory`` (host figures referenced to
    the best 1F1B: :func:`reference_memory`) in its units, as ``tidgap run`` holds it
    (where a level in samples and one in bytes disagree: 1F1B(m) within a level's samples
    can be over its bytes, and the fastest 1F1B within the bytes then was never seeded);
    the units counted once per ``m``."""

    problem: Problem
    memory: RunMemory | None = None
    _units: dict[int, np.ndarray] = field(default_factory=dict)

    def fits(self, level: MemoryLevel, counts: np.ndarray) -> np.ndarray:
        """``(M,)`` bool: whether 1F1B(m) is within ``level``, for each of ``counts``."""
        if self.memory is None:
            return (one_f_one_b_held(self.problem, counts) <= np.asarray(level.held)).all(axis=1)
        limit = to_host(self.memory.limit(level))
        return (self.units(counts) <= limit).all(axis=1) if counts.size else np.zeros(0, bool)

    def units(self, counts: np.ndarray) -> np.ndarray:
        """``(M, S)`` int64: what 1F1B(m) holds as ``tidgap run`` holds it, in the
        memory's units, for each of ``counts`` (a few at a time: :data:`ENCODED_AT_ONCE`)."""
        assert self.memory is not None, "counted in samples"
        missing = sorted({int(m) for m in counts} - set(self._units))
        S = self.problem.num_stages
        while missing:
            block = [missing.pop(0)]
            while missing and (len(block) + 1) * S * missing[0] <= ENCODED_AT_ONCE:
                block.append(missing.pop(0))
            plans = [one_f_one_b_plan(self.problem, m) for m in block]
            genes = encode_plans(plans, self.problem, block[-1]).repaired()
            peaks = one_f_one_b_held(self.problem, np.asarray(block, dtype=np.int64))
            held = self.memory.held(peaks, genes.forward, genes.backward, genes.lead)
            self._units.update(zip(block, held, strict=True))
        return np.asarray([self._units[int(m)] for m in counts], dtype=np.int64).reshape(-1, S)


def reference_memory(
    problem: Problem, caps: tuple[float, ...] | None, best: BaselineResult
) -> RunMemory | None:
    """The problem's run memory figures on the host (:meth:`RunMemory.of`; ``None``
    without them), fitted to the byte limits ``caps`` in force (:meth:`RunMemory.fitted`)
    and referenced to the best 1F1B ``best`` (:meth:`RunMemory.with_reference`)."""
    memory = RunMemory.of(problem)
    if memory is None:
        return None
    memory = memory.fitted(caps)
    m = np.asarray([best.microbatches], dtype=np.int64)
    genes = encode_plans([one_f_one_b_plan(problem, best.microbatches)], problem, best.microbatches)
    genes = genes.repaired()
    return memory.with_reference(
        one_f_one_b_held(problem, m), genes.forward, genes.backward, genes.lead
    )


def one_f_one_b_held(problem: Problem, counts: np.ndarray) -> np.ndarray:
    """``(M, S)``: the samples 1F1B(m) holds on each stage for each of ``counts``, its first
    ``min(S - s, m)`` microbatches of the equal partition (larger first: model.md)."""
    units = problem.num_units
    m = counts[:, None]
    quotient, remainder = units // m, units % m
    k = np.minimum(problem.num_stages - np.arange(problem.num_stages)[None, :], m)
    return problem.unit * (k * quotient + np.minimum(k, remainder))


def fastest_one_f_one_b_within(
    problem: Problem,
    level: MemoryLevel,
    pricing: str = MODEL_PRICING,
    most: int | None = None,
    holding: OneFOneBHolding | None = None,
) -> BaselineResult | None:
    """The fastest 1F1B(m) within ``level`` (:func:`best_baselines` over the counts that fit
    it, at most ``most`` where given, as ``holding`` counts them, else in samples;
    :data:`RUN_PRICING`: as ``tidgap run`` prices them), ``None`` where none fits. A limit
    admits other counts than the unlimited best's, often more microbatches than a search's
    default width: seeded (and the width widened to hold it), the search is never slower
    than it."""
    holding = OneFOneBHolding(problem) if holding is None else holding
    counts = np.asarray(feasible_microbatch_counts(problem), np.int64)
    if most is not None:
        counts = counts[counts <= most]
    fitting = counts[holding.fits(level, counts)]
    if fitting.size == 0:
        return None
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
    if holding.fits(level, counts).any():
        return []
    plans = []
    for m in range(fewest_within(problem, level), top + 1):
        sizes = equal_partition(problem, m)
        flight = in_flight(problem, level, sizes[0])
        if min(flight) >= 1:
            order = [alternating_letters(m, min(f, m) - 1) for f in flight]
            plans.append(Plan.of([sizes] * S, [sizes] * S, order=order))
    return plans
