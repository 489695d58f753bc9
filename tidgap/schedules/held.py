"""What a stage holds: activations of the samples it has forwarded and not yet backwarded
(model.md, Memory), in samples and, where the problem gives ``activation_bytes``, bytes."""

from __future__ import annotations

import numpy as np

from tidgap.model.errors import InputError
from tidgap.model.problem import Problem


def flush_peak_held(problem: Problem) -> list[int]:
    """``peak_held`` of any flush plan: every stage holds the whole batch (``B`` samples)."""
    return [problem.batch_size] * problem.num_stages


def one_f_one_b_held(problem: Problem, counts: np.ndarray) -> np.ndarray:
    """``(M, S)``: the samples 1F1B(m) holds on each stage for each of ``counts``, its first
    ``min(S - s, m)`` microbatches of the equal partition (larger first: model.md)."""
    units = problem.num_units
    m = counts[:, None]
    quotient, remainder = units // m, units % m
    k = np.minimum(problem.num_stages - np.arange(problem.num_stages)[None, :], m)
    return problem.unit * (k * quotient + np.minimum(k, remainder))


def peak_memory(problem: Problem, peak_held: list[int]) -> tuple[list[float], list[int]] | None:
    """``(peak_memory, over_memory_limit)``: bytes per stage (``peak_held * activation_bytes``)
    and the stages strictly above their ``memory_limit``; ``None`` without
    ``activation_bytes``."""
    if not problem.has_memory:
        return None
    stages = problem.stages
    memory = [held * stage.activation_bytes for held, stage in zip(peak_held, stages, strict=True)]
    return memory, over_limits(problem, memory)


#: Bytes within this share above a limit are at it (a product's rounding: 17 samples of
#: 3.7 bytes are 62.900000000000006 bytes, at a limit of 62.9).
ROUNDING = 1e-12


def within_limit(used: float, limit: float) -> bool:
    """Whether ``used`` bytes are within ``limit`` (at it is within; model.md, Memory), up
    to :data:`ROUNDING`."""
    return used <= limit + abs(limit) * ROUNDING


def over_limits(problem: Problem, memory: list[float]) -> list[int]:
    """The stages whose ``memory`` (bytes) is above their ``memory_limit``
    (:func:`within_limit`)."""
    return [
        s
        for s, (used, stage) in enumerate(zip(memory, problem.stages, strict=True))
        if stage.memory_limit is not None and not within_limit(used, stage.memory_limit)
    ]


def flush_over_limit(problem: Problem) -> tuple[list[float], list[int]]:
    """A flush plan's ``(peak_memory, over_memory_limit)``; ``([], [])`` without
    ``activation_bytes``."""
    return peak_memory(problem, flush_peak_held(problem)) or ([], [])


def flush_fits(problem: Problem) -> bool:
    """Whether a flush plan (which holds the whole batch) is within every stage's limit."""
    return not flush_over_limit(problem)[1]


def require_flush_fits(problem: Problem) -> None:
    """Raise :class:`InputError` on ``stages[s].memory_limit`` if a flush plan, which holds
    the whole batch on every stage, is over some stage's limit: then no flush plan is
    within it, and a search of flush plans must not return one (model.md, Memory)."""
    memory = flush_over_limit(problem)
    if not memory[1]:
        return
    s = memory[1][0]
    limit = problem.stages[s].memory_limit
    raise InputError(
        f"every flush plan holds the whole batch ({problem.batch_size} samples, "
        f"{memory[0][s]:.4g} bytes) on stage {s}, above its memory_limit {limit:.4g}, so no "
        "flush plan fits (an ordered plan, which starts backwards early, can: evaluate one "
        "with order or windows)",
        ("stages", s, "memory_limit"),
    )
