"""Does the flush search reach the proven optimum of tiny problems in 10 s? (issue 11)

For random tiny problems (``tidgap.profiling.synth.synth_problem``: 2 stages of 8 samples
or 3 stages of 7, unit 1, the three curve shapes in turn) the flush optimum is found by
enumeration (:func:`tidgap.analysis.exhaustive.flush_optimum`, on Numba); then
``search(schedule="flush", seed=0, time_limit=10)`` runs on each problem.

Run: ``python bench/flush_tiny_optimum.py [--problems N] [--time-limit S]``; prints one
line per problem and the number of misses; exits 1 if any was missed.
"""

from __future__ import annotations

import sys

import numpy as np
from script_args import above, script_parser

from tidgap import search
from tidgap.analysis.exhaustive import flush_optimum
from tidgap.model.problem import Problem
from tidgap.profiling.synth import SHAPES, synth_problem


def tiny_problem(seed: int) -> Problem:
    """A random tiny problem: 2 stages of 8 samples or 3 of 7."""
    rng = np.random.default_rng(seed)
    stages = int(rng.integers(2, 4))
    document = synth_problem(
        seed,
        stages=stages,
        batch_size=8 if stages == 2 else 7,
        heterogeneity=float(rng.uniform(0.2, 1.0)),
        shape=SHAPES[seed % len(SHAPES)],
    )
    return Problem.from_dict(document)


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--problems", type=above(int), default=10)
    parser.add_argument("--time-limit", type=above(float), default=10.0)
    args = parser.parse_args()
    misses = 0
    for seed in range(100, 100 + args.problems):
        problem = tiny_problem(seed)
        _, optimum = flush_optimum(problem)
        result = search(problem, schedule="flush", seed=0, time_limit=args.time_limit)
        found = result.evaluation.iteration_time
        missed = found > optimum * (1 + 1e-9)
        misses += missed
        verdict = f"MISSED by {100 * (found / optimum - 1):.2f}%" if missed else "optimum"
        print(
            f"seed {seed}: {problem.num_stages} stages, {problem.batch_size} samples: "
            f"optimum {optimum:.6g}, search {found:.6g} ({verdict})",
            flush=True,
        )
    print(f"{misses} missed of {args.problems}")
    sys.exit(1 if misses else 0)


if __name__ == "__main__":
    main()
