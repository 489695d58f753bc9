"""What a stage holds: activations of the samples it has forwarded and not yet backwarded
(model.md, Memory), in samples and, where the problem gives ``activation_bytes``, bytes."""

from __future__ import annotations

from collections.abc import Callable

from tidgap.model.problem import Problem


def flush_peak_held(problem: Problem) -> list[int]:
    """``peak_held`` of any flush plan: every stage holds the whole batch (``B`` samples)."""
    return [problem.batch_size] * problem.num_stages


def one_f_one_b_peak_held(problem: Problem, sizes: list[int]) -> list[int]:
    """``peak_held`` of 1F1B on the equal partition ``sizes`` (samples): stage ``s`` holds
    its first ``min(S-s, m)`` microbatches."""
    S = problem.num_stages
    return [sum(sizes[: min(S - s, len(sizes))]) for s in range(S)]


def peak_memory(problem: Problem, peak_held: list[int]) -> tuple[list[float], list[int]] | None:
    """``(peak_memory, over_memory_limit)``: bytes per stage (``peak_held * activation_bytes``)
    and the stages strictly above their ``memory_limit``; ``None`` without
    ``activation_bytes``."""
    if not problem.has_memory:
        return None
    stages = problem.stages
    memory = [held * stage.activation_bytes for held, stage in zip(peak_held, stages, strict=True)]
    over = [
        s
        for s, (used, stage) in enumerate(zip(memory, stages, strict=True))
        if stage.memory_limit is not None and used > stage.memory_limit
    ]
    return memory, over


#: ``peak_held`` of each synchronous baseline on its equal partition ``sizes`` (samples);
#: asynchronous PipeDream (a steady-state bound) has none.
BASELINE_PEAK_HELD: dict[str, Callable[[Problem, list[int]], list[int]]] = {
    "gpipe": lambda problem, sizes: flush_peak_held(problem),
    "1f1b": one_f_one_b_peak_held,
}
