"""A line ``per_chunk + n * per_sample`` at or above bytes measured at several chunk sizes:
what a profile records of a count that is not affine in the samples (oneDNN's LSTM
workspace on the CPU grows in steps with the chunk size; a GRU's transpose of one sample
copies nothing), so that no chunk size measured holds more than predicted."""

from __future__ import annotations

import itertools
import math


def line_above(counts: dict[int, int]) -> tuple[int, int]:
    """``(per_sample, per_chunk)``, whole numbers >= 0, such that ``per_chunk + n *
    per_sample >= counts[n]`` for every size ``n`` (samples, ``counts`` bytes), with the
    least sum over those sizes. That sum is convex in the slope, least at a slope of an
    edge of the points' upper hull, of the line through the origin or 0: the lowest line
    of each of those slopes, rounded down and up, is a candidate."""
    points = sorted(counts.items())
    edges = itertools.pairwise(_upper_hull(points))
    real = [0.0, max(f / n for n, f in points)]
    real += [(f2 - f1) / (n2 - n1) for (n1, f1), (n2, f2) in edges]
    slopes = {max(0, rounded(x)) for x in real for rounded in (math.floor, math.ceil)}
    total = sum(n for n, _ in points)
    lines = [(slope, max(0, max(f - n * slope for n, f in points))) for slope in sorted(slopes)]
    return min(lines, key=lambda line: len(points) * line[1] + total * line[0])


def collinear(points: list[tuple[int, int]]) -> bool:
    """Whether ``points`` lie on one line (two or fewer always do)."""
    ordered = sorted(points)
    return all(_turn(ordered[0], ordered[1], c) == 0 for c in ordered[2:])


def _upper_hull(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The upper convex hull of ``points`` sorted by size (monotone chain)."""
    hull: list[tuple[int, int]] = []
    for point in points:
        while len(hull) >= 2 and _turn(hull[-2], hull[-1], point) >= 0:
            hull.pop()
        hull.append(point)
    return hull


def _turn(a: tuple[int, int], b: tuple[int, int], c: tuple[int, int]) -> int:
    """The cross product of ``a -> b`` and ``a -> c``: >= 0 where ``b`` is not above ``a-c``."""
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
