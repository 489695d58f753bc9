"""Memory limits of a search, in samples held per stage (model.md, Memory).

A limit is a :class:`MemoryLevel`: ``(S,)`` samples each stage may hold at most. The one
in force comes from ``--memory-limit`` (``1f1b``: what the best 1F1B holds on each stage;
``BYTES``: bytes per stage, over ``activation_bytes``) and from the stages' own
``memory_limit`` (always in force). The windowed search also plans for a few looser levels,
to show the time-memory trade-off (:func:`tradeoff_levels`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tidgap.backends.xp import namespace
from tidgap.model.errors import InputError
from tidgap.model.numbers import is_integer
from tidgap.model.problem import Problem
from tidgap.optimize.memory import MAX_SIZE, format_bytes, parse_size
from tidgap.schedules.held import within_limit

#: ``--memory-limit`` word for "what the best 1F1B holds on each stage".
ONE_F_ONE_B = "1f1b"
#: Multiples of the best 1F1B's memory the trade-off shows, besides the unlimited level.
TRADEOFF_FACTORS = (1.0, 1.5, 2.0)
#: Fitness of a plan over the limit of its island: above any iteration time (at most
#: ``2**50`` ticks), below :data:`tidgap.backends.evaluator.INVALID`, plus the samples over.
OVER_LIMIT = 2**56

#: The label of the level the stages' own ``memory_limit`` make, without ``--memory-limit``.
STAGE_LIMITS = "stage memory_limit"


@dataclass(frozen=True)
class MemoryLevel:
    """``held[s]``: the most samples stage ``s`` may hold; ``label`` says where it comes
    from (``1F1B``, ``1.5x 1F1B``, ``8 GB``, ``unlimited``); ``bytes_cap[s]``: the byte
    limit in force on stage ``s`` (``inf`` where none; ``None``: on no stage), even where
    it allows the whole batch; ``bound[s]``: the best 1F1B's samples (or a multiple of
    them) that bind stage ``s`` (``None`` where none does; ``None``: on no stage), at
    least ``held[s]`` (a byte limit may allow fewer samples), not a byte limit's rounded
    down or the whole batch of no limit. A search counting bytes as ``tidgap run`` holds
    them compares with the byte limit and, where a bound is, with those samples and what
    the best 1F1B holds beside them, even at the whole batch
    (:meth:`tidgap.optimize.run_memory.RunMemory.limit`: a stage can hold more than its
    batch's activations, or, on a profile's figures, a little less)."""

    label: str
    held: tuple[int, ...]
    bytes_cap: tuple[float, ...] | None = None
    bound: tuple[int | None, ...] | None = None

    def admits(self, peak_held: list[int]) -> bool:
        """Whether a plan holding ``peak_held[s]`` samples is within this level."""
        return not self.over(peak_held)

    def over(self, peak_held: list[int]) -> list[int]:
        """The stages where a plan holding ``peak_held[s]`` samples is above this level."""
        return [s for s, (p, h) in enumerate(zip(peak_held, self.held, strict=True)) if p > h]


def parse_memory_limit(text: str) -> str | int:
    """``"1f1b"`` or a byte count (``80GB``, ``24GiB``, a number > 0); ``ValueError`` with
    one line otherwise."""
    if text.strip().lower() == ONE_F_ONE_B:
        return ONE_F_ONE_B
    try:
        value = parse_size(text)
    except ValueError as error:
        raise ValueError(f"{error}; or the word {ONE_F_ONE_B}") from None
    if value <= 0:
        raise ValueError(f"{text!r} is less than 1 byte")
    return value


def checked_memory_limit(limit: str | int | None) -> str | int | None:
    """A search's ``memory_limit`` as given to the Python API: ``None``, ``"1f1b"``, a size
    (:func:`parse_memory_limit`) or a positive number of bytes; :class:`InputError` on
    ``memory_limit`` otherwise."""
    if limit is None:
        return None
    try:
        if isinstance(limit, str):
            return parse_memory_limit(limit)
        if not is_integer(limit) or limit <= 0:
            raise ValueError(f"{limit!r} is not {ONE_F_ONE_B!r}, a size or a positive int of bytes")
        if limit >= MAX_SIZE:  # as a size given in text: a float overflowed past 1e308
            raise ValueError(f"too large: {limit!r} (at most 2**63 - 1 bytes)")
    except ValueError as error:
        raise InputError(str(error), source="memory_limit") from None
    return int(limit)  # a NumPy integer too, as Python's (it goes into state files)


def held_within(limit: float, activation_bytes: float, batch_size: int) -> int:
    """The most samples ``h`` with ``h * activation_bytes`` within ``limit``
    (:func:`~tidgap.schedules.held.within_limit`; the whole batch when a sample takes no
    memory)."""
    if activation_bytes <= 0 or within_limit(batch_size * activation_bytes, limit):
        return batch_size
    held = math.floor(limit / activation_bytes)
    while held < batch_size and within_limit((held + 1) * activation_bytes, limit):
        held += 1
    while held > 0 and not within_limit(held * activation_bytes, limit):
        held -= 1
    return held


def stage_level(problem: Problem) -> MemoryLevel:
    """What the stages' own ``memory_limit`` allows (the whole batch where none is given),
    labelled ``unlimited`` when no stage gives one."""
    B = problem.batch_size
    held = [
        B
        if stage.memory_limit is None
        else held_within(stage.memory_limit, stage.activation_bytes, B)
        for stage in problem.stages
    ]
    limits = [stage.memory_limit for stage in problem.stages]
    limited = any(limit is not None for limit in limits)
    label = STAGE_LIMITS if limited else "unlimited"
    caps = tuple(math.inf if limit is None else float(limit) for limit in limits)
    return MemoryLevel(label, tuple(held), caps if limited else None)


def bytes_level(problem: Problem, limit: int) -> MemoryLevel:
    """``limit`` bytes on every stage; :class:`InputError` on ``memory_limit`` when the
    problem gives no ``activation_bytes``."""
    if not problem.has_memory:
        raise InputError(
            f"a limit in bytes ({limit}) needs activation_bytes on every stage of the "
            f"problem; it has none (use the limit {ONE_F_ONE_B})",
            source="memory_limit",
        )
    held = [held_within(limit, s.activation_bytes, problem.batch_size) for s in problem.stages]
    return MemoryLevel(format_bytes(limit), tuple(held), (float(limit),) * len(held))


def scaled(level: MemoryLevel, factor: float, batch_size: int) -> MemoryLevel:
    """``factor`` times ``level`` (samples rounded down, at most the batch; a level in
    samples: the best 1F1B's), bound where ``level`` is, but where a factor above 1
    reaches the whole batch (no limit there)."""

    def times(samples: int) -> int:
        return min(batch_size, int(samples * factor))

    held = tuple(map(times, level.held))
    label = level.label if factor == 1 else f"{factor:g}x {level.label}"
    bounds = tuple(
        None if b is None or (factor != 1 and times(b) >= batch_size) else times(b)
        for b in level.bound or (None,) * len(held)
    )
    return MemoryLevel(label, held, bound=_some(bounds))


def _some(bounds: tuple[int | None, ...]) -> tuple[int | None, ...] | None:
    """``bounds``, or ``None`` where no stage has one."""
    return None if all(b is None for b in bounds) else bounds


def capped(level: MemoryLevel, cap: MemoryLevel) -> MemoryLevel:
    """``level`` within ``cap`` stage by stage (the stages' own limits stay in force): the
    fewer samples, the smaller byte limit and the smaller bound, each where either side
    has one: a plan within it is within both. As ``tidgap run`` holds plans, a stage
    storing graphs can hold more than its samples' activations (the best 1F1B's samples
    at a stage's limit in samples over its bytes) or, on a profile's figures (chunks
    larger than it measured), a little less (a stage's byte limit that allows fewer
    samples than the best 1F1B's, above that 1F1B's bytes): so both bind."""
    held = tuple(map(min, level.held, cap.held))
    count = len(held)
    bounds = tuple(
        min((b for b in pair if b is not None), default=None)
        for pair in zip(level.bound or (None,) * count, cap.bound or (None,) * count, strict=True)
    )
    if level.bytes_cap is None and cap.bytes_cap is None:
        return MemoryLevel(level.label, held, bound=_some(bounds))
    ours_cap = level.bytes_cap or (math.inf,) * count
    theirs_cap = cap.bytes_cap or (math.inf,) * count
    caps = tuple(map(min, ours_cap, theirs_cap))
    return MemoryLevel(level.label, held, caps, _some(bounds))


def limit_in_force(
    problem: Problem, requested: str | int | None, one_f_one_b: MemoryLevel
) -> MemoryLevel:
    """The level a search must respect: ``requested`` (``1f1b``, bytes or ``None``) within
    the stages' own limits."""
    stages = stage_level(problem)
    if requested is None:
        return stages
    level = one_f_one_b if requested == ONE_F_ONE_B else bytes_level(problem, int(requested))
    return capped(level, stages)


def tradeoff_levels(
    problem: Problem, in_force: MemoryLevel, one_f_one_b: MemoryLevel
) -> list[MemoryLevel]:
    """The levels a windowed search plans for, tightest first, ``in_force`` among them:
    the best 1F1B's memory times :data:`TRADEOFF_FACTORS` and unlimited, each within the
    stages' own limits; levels that equal another are dropped."""
    stages = stage_level(problem)
    B = problem.batch_size
    levels = [capped(scaled(one_f_one_b, f, B), stages) for f in TRADEOFF_FACTORS]
    levels += [stages, in_force]
    unique: dict[tuple[int, ...], MemoryLevel] = {}
    for level in levels:
        unique.setdefault(level.held, level)
    unique[in_force.held] = in_force
    return sorted(unique.values(), key=lambda level: (sum(level.held), level.held))


def penalised(times: Any, peaks: Any, held: Any) -> Any:
    """``(P,)`` fitness: ``times`` where every stage's ``peaks`` ``(P, S)`` is within
    ``held`` (``(S,)``, or ``(P, S)``: one level per individual), else :data:`OVER_LIMIT`
    plus the samples over (invalid orders keep their score, which is larger)."""
    xp = namespace(times)
    over = xp.maximum(peaks - held, 0).sum(axis=1)
    return xp.where(over > 0, xp.maximum(times, OVER_LIMIT + over), times)
