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
