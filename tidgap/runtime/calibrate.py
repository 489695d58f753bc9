"""Profiles that match the run: each stage's op times measured through the runtime.

``tidgap profile`` times a stage's forward and backward on their own; a run also pays,
per op, what the runtime does around them (cutting chunks from received pieces, storing
graphs, the send and receive calls, the Python dispatch of each instruction, the other
ranks' processes on the same cores). Calibration runs GPipe(m) with ``tidgap run``'s
workers for counts ``m`` whose microbatch sizes cover the problem's table sizes, and
replaces each stage's tables by the median measured duration of its ops at each size
(sizes no run measured keep the profile's time scaled by the nearest measured size's
ratio), made non-decreasing like a profile.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tidgap.model.errors import InputError
from tidgap.model.problem import Problem
from tidgap.profiling.build import non_decreasing
from tidgap.schedules.timeline import Timeline

#: ``durations[s][kind][size]``: measured op durations of stage ``s``, kind ``F`` / ``B``,
#: at microbatch ``size`` (samples), in the problem's time unit.
Durations = list[dict[str, dict[int, list[float]]]]


def table_sizes(document: dict[str, Any], source: str) -> list[int]:
    """Every size (samples) in the problem's stage tables; an affine stage is refused."""
    sizes: set[int] = set()
    for s, stage in enumerate(document["stages"]):
        for direction in ("forward", "backward"):
            if "table" not in stage[direction]:
                raise InputError(
                    "is not a table: calibrate a profiled problem (tidgap profile)",
                    ("stages", s, direction),
                    source=source,
                )
            sizes.update(stage[direction]["table"]["sizes"])
    return sorted(sizes)


def calibration_counts(problem: Problem, sizes: Sequence[int]) -> list[int]:
    """Microbatch counts ``m`` whose equal partitions (sizes ``ceil`` and ``floor`` of
    ``B/m``) hold each of ``sizes`` that fits the batch, fewest first."""
    counts = {math.ceil(problem.batch_size / size) for size in sizes if size <= problem.batch_size}
    return sorted(counts)


def op_durations(timelines: Sequence[Timeline]) -> Durations:
    """Every compute step of ``timelines`` (measured runs), by stage, kind and size."""
    found: Durations = []
    for timeline in timelines:
        while len(found) < timeline.num_stages:
            found.append({"F": defaultdict(list), "B": defaultdict(list)})
        for s, steps in enumerate(timeline.stages):
            for step in steps:
                if step.kind in found[s]:
                    found[s][step.kind][step.size].append(step.duration)
    return found


def _measured_table(table: dict[str, Any], measured: dict[int, list[float]]) -> dict[str, Any]:
    """``table`` (sizes, times) with each measured size's median; an unmeasured size keeps
    its time scaled by the ratio at the nearest measured size."""
    sizes, times = table["sizes"], table["times"]
    medians = {size: statistics.median(measured[size]) for size in sizes if measured.get(size)}
    if not medians:
        raise InputError("no calibration run measured any of its sizes", source="calibrate")
    out = []
    for size, time in zip(sizes, times, strict=True):
        if size in medians:
            out.append(medians[size])
            continue
        nearest = min(medians, key=lambda known: (abs(known - size), known))
        base = times[sizes.index(nearest)]
        out.append(time * (medians[nearest] / base if base > 0 else 1.0))
    return {"sizes": list(sizes), "times": non_decreasing(out)}


def calibrated(
    document: dict[str, Any], durations: Durations, counts: Sequence[int]
) -> dict[str, Any]:
    """A copy of the problem ``document`` whose stage tables are the measured op times, and
    ``source.calibration`` saying how."""
    out = copy.deepcopy(document)
    for stage, measured in zip(out["stages"], durations, strict=True):
        for direction, kind in (("forward", "F"), ("backward", "B")):
            stage[direction]["table"] = _measured_table(stage[direction]["table"], measured[kind])
    source = out.get("source")
    source = dict(source) if isinstance(source, dict) else {"description": source}
    source["calibration"] = {
        "runs": [f"GPipe({m})" for m in counts],
        "rule": "each stage's forward and backward table: the median measured duration of "
        "its ops at each size in tidgap run's workers; sizes no run measured keep the "
        "profile's time scaled by the nearest measured size's ratio; made non-decreasing",
    }
    out["source"] = source
    return out
