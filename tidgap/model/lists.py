"""Per-stage lists written in few characters, for summaries of deep pipelines."""

from __future__ import annotations

from collections.abc import Sequence


def compact_sizes(sizes: Sequence[int]) -> str:
    """``[8, 8, 8, 16]`` -> ``8x3 16``: runs of equal sizes collapsed."""
    runs: list[list[int]] = []
    for size in sizes:
        if runs and runs[-1][0] == size:
            runs[-1][1] += 1
        else:
            runs.append([size, 1])
    return " ".join(f"{size}x{count}" if count > 1 else str(size) for size, count in runs)


def stage_list(stages: Sequence[int]) -> str:
    """``[3]`` -> ``stage 3``; ``[0, 1, 2, 3, 5, 7, 8]`` -> ``stages 0-3, 5, 7, 8``: runs
    of three or more consecutive stages as ranges."""
    runs: list[list[int]] = []
    for stage in stages:
        if runs and runs[-1][1] == stage - 1:
            runs[-1][1] = stage
        else:
            runs.append([stage, stage])
    parts = []
    for first, last in runs:
        parts += [f"{first}-{last}"] if last - first >= 2 else map(str, range(first, last + 1))
    return ("stage " if len(stages) == 1 else "stages ") + ", ".join(parts)


def stages_doing(stages: Sequence[int], verb: str) -> str:
    """``stage 3 recomputes`` / ``stages 0-3 recompute``: :func:`stage_list` and ``verb``
    (plural) agreeing with it."""
    return f"{stage_list(stages)} {verb}{'s' if len(stages) == 1 else ''}"
