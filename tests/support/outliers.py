"""A problem with one absurd table entry (a size marked unusable by a huge time)."""

from __future__ import annotations

import numpy as np

from tidgap import Link, Problem, Stage, affine, table


def with_outlier(entry: float, at: int = 5) -> Problem:
    """4 stages of 48 samples, affine times of 0.01-0.6 ms; stage 1's forward tabulated,
    ``entry`` ms at ``at`` samples."""
    rng = np.random.default_rng(0)
    sizes = list(range(1, 49))
    stages = []
    for s in range(4):
        base, per_sample = rng.uniform(0.05, 0.5), rng.uniform(0.01, 0.1)
        forward = affine(base, per_sample)
        if s == 1:
            times = [base + per_sample * b for b in sizes]
            times[at - 1] = entry
            forward = table(sizes, times)
        stages.append(Stage(forward=forward, backward=affine(2 * base, 2 * per_sample)))
    link = Link(forward=affine(0.02, 0.005), backward=affine(0.02, 0.005))
    return Problem(name="outlier", batch_size=48, stages=stages, links=[link] * 3)
