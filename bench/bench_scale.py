"""A whole ``tidgap search --time-limit 20`` on large problems: the time limit must cover
the setup (baselines, heuristics, bound, compile) as well as the GA.

Workloads (``tidgap synth``, seed 0, affine and table shapes): 32 stages with 1024 units,
64 stages with 4096 units; the CPU backend (Numba). Targets on the 2-core development
machine: a plan within 25 s and 60 s. One round each (a search is seconds, not
microseconds); the wall time and the setup phases land in ``extra_info``.

Run: ``pytest bench/bench_scale.py --benchmark-only`` (about 90 s per workload).
"""

from __future__ import annotations

from typing import Any

import pytest

from tidgap.model.problem import Problem
from tidgap.optimize.driver import search
from tidgap.profiling.synth import synth_problem

#: (stages, units, shape, target seconds for a 20 s time limit).
WORKLOADS = [(32, 1024, "affine", 25.0), (64, 4096, "table", 60.0)]
TIME_LIMIT = 20.0


@pytest.mark.parametrize(("stages", "units", "shape", "target"), WORKLOADS)
def test_search_returns_within_the_target(
    benchmark: Any, stages: int, units: int, shape: str, target: float
) -> None:
    problem = Problem.from_dict(synth_problem(0, stages, units, shape=shape))
    result = benchmark.pedantic(
        lambda: search(problem, time_limit=TIME_LIMIT, backend="numba"), rounds=1, iterations=1
    )
    benchmark.extra_info.update(
        wall_time=result.wall_time,
        setup=result.setup,
        generations=result.generations,
        speedup_over_gpipe=result.speedup_over_gpipe,
        target=target,
    )
    print(
        f"\n{stages} stages, {units} units ({shape}): {result.wall_time:.1f} s "
        f"(target {target:.0f} s: {'met' if result.wall_time <= target else 'MISSED'}), "
        f"{result.generations} generations, setup "
        + ", ".join(f"{k} {v:.1f} s" for k, v in result.setup.items())
    )
