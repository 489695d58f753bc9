"""Turning measurements into a ``tidgap.problem/1`` document (no PyTorch needed here)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any

Json = dict[str, Any]

#: Significant digits kept for measured times in the files written.
DIGITS = 5


def measurement_sizes(unit: int, cap: int) -> list[int]:
    """Microbatch sizes to measure, in samples: ``unit * 2^k`` up to ``cap``, and ``cap``.

    ``measurement_sizes(4, 48) == [4, 8, 16, 32, 48]``; ``cap`` is a multiple of ``unit``.
    """
    sizes, size = [], unit
    while size < cap:
        sizes.append(size)
        size *= 2
    return [*sizes, cap]


def rounded(x: float, digits: int = DIGITS) -> float:
    """``x`` to ``digits`` significant digits (monotone, so it keeps an order)."""
    return float(f"{x:.{digits}g}")


def non_decreasing(times: Sequence[float]) -> list[float]:
    """The cumulative maximum of ``times``, rounded: noisy medians may dip as sizes grow."""
    return [rounded(t) for t in accumulate(times, max)]


def table(sizes: Sequence[int], times: Sequence[float]) -> Json:
    """A ``table`` time function from measured times, made non-decreasing."""
    return {"table": {"sizes": list(sizes), "times": non_decreasing(times)}}


def link(bytes_per_sample: int, bandwidth_gbps: float, latency_ms: float) -> Json:
    """A link whose activations (forward) and gradients (backward) have the same size.

    Affine: ``latency_ms + b * bytes_per_sample / bandwidth``, ``bandwidth`` in GB/s
    (1e9 bytes per second).
    """
    cost = {
        "affine": {
            "base": latency_ms,
            "per_sample": rounded(bytes_per_sample / (bandwidth_gbps * 1e9) * 1e3),
        }
    }
    return {"forward": cost, "backward": dict(cost)}


def problem_document(
    name: str,
    batch_size: int,
    unit: int,
    cap: int,
    stage_names: Sequence[str],
    sizes: Sequence[int],
    forward_ms: Sequence[Sequence[float]],
    backward_ms: Sequence[Sequence[float]],
    links: Sequence[Json],
    source: Json,
    activation_bytes: Sequence[int] | None = None,
    tails_ms: Sequence[float] | None = None,
) -> Json:
    """A ``tidgap.problem/1`` document: ``forward_ms[s][i]`` is stage ``s`` at ``sizes[i]``;
    ``activation_bytes[s]``, when given, the bytes stage ``s`` holds per sample;
    ``tails_ms[s]``, when given, stage ``s``'s tail (its optimizer step)."""
    stages = []
    for s, stage_name in enumerate(stage_names):
        stage: Json = {
            "name": stage_name,
            "forward": table(sizes, forward_ms[s]),
            "backward": table(sizes, backward_ms[s]),
        }
        if activation_bytes is not None:
            stage["activation_bytes"] = activation_bytes[s]
        if tails_ms is not None:
            stage["tail"] = rounded(tails_ms[s])
        if cap < batch_size:
            stage["max_microbatch"] = cap
        stages.append(stage)
    return {
        "format": "tidgap.problem/1",
        "name": name,
        "batch_size": batch_size,
        "unit": unit,
        "time_unit": "ms",
        "stages": stages,
        "links": list(links),
        "source": source,
    }
