"""Per-stage lists written in few characters, for summaries of deep pipelines."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby


def compact_sizes(sizes: Sequence[int]) -> str:
    """``[8, 8, 8, 16]`` -> ``8x3 16``: runs of equal sizes collapsed."""
    runs = [(size, len(list(run))) for size, run in groupby(sizes)]
    return " ".join(f"{size}x{count}" if count > 1 else str(size) for size, count in runs)


def stage_list(stages: Sequence[int]) -> str:
    """``[3]`` -> ``stage 3``; ``[0, 1, 2, 3, 5, 7, 8]`` -> ``stages 0-3, 5, 7, 8``: runs
    of three or more consecutive stages (sorted) as ranges."""
    parts: list[str] = []
    for _, run in groupby(enumerate(stages), key=lambda pair: pair[1] - pair[0]):
        consecutive = [stage for _, stage in run]
        if len(consecutive) >= 3:
            parts.append(f"{consecutive[0]}-{consecutive[-1]}")
        else:
            parts += map(str, consecutive)
    return ("stage " if len(stages) == 1 else "stages ") + ", ".join(parts)


def stages_doing(stages: Sequence[int], verb: str) -> str:
    """``stage 3 recomputes`` / ``stages 0-3 recompute``: :func:`stage_list` and ``verb``
    (plural) agreeing with it."""
    return f"{stage_list(stages)} {verb}{'s' if len(stages) == 1 else ''}"
