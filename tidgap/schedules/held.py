"""What a stage holds: activations of the samples it has forwarded and not yet backwarded
(model.md, Memory), in samples and, where the problem gives ``activation_bytes``, bytes."""

from __future__ import annotations

from tidgap.model.problem import Problem


def flush_peak_held(problem: Problem) -> list[int]:
    """``peak_held`` of any flush plan: every stage holds the whole batch (``B`` samples)."""
    return [problem.batch_size] * problem.num_stages


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
