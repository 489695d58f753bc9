"""The work before a search, per piece: best baselines (GPipe, 1F1B, PipeDream over every
feasible ``m``), both heuristics, the lower bound and the tick tables.

Workloads: ``tidgap synth --seed 0 --shape table`` with 32 stages and 1024 units, and 64
stages and 4096 units (``--unit 1``). Target on the 2-core development machine: all pieces
together within a few seconds at the larger size. The compiled loops are compiled (or
loaded from Numba's cache) before anything is timed.

Run: ``pytest bench/bench_setup.py --benchmark-only``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tidgap.analysis.bound import lower_bound
from tidgap.backends.ticks import tick_problem
from tidgap.fallback_cpu.setup_loops import warm_up
from tidgap.model.problem import Problem
from tidgap.optimize.heuristics import HEURISTICS
from tidgap.profiling.synth import synth_problem
from tidgap.schedules.baselines import best_baselines

SIZES = [(32, 1024), (64, 4096)]

PIECES: dict[str, Callable[[Problem], Any]] = {
    "best_baselines": best_baselines,
    **{f"heuristic {name}": build for name, build in HEURISTICS.items()},
    "lower_bound": lower_bound,
    "tick_problem": tick_problem,
}


@pytest.fixture(scope="module", params=SIZES, ids=lambda size: f"S={size[0]} U={size[1]}")
def problem(request: pytest.FixtureRequest) -> Problem:
    stages, units = request.param
    warm_up()
    return Problem.from_dict(synth_problem(0, stages, units, shape="table"))


@pytest.mark.parametrize("piece", list(PIECES))
def test_setup_piece(benchmark: Any, problem: Problem, piece: str) -> None:
    benchmark.group = f"setup S={problem.num_stages} U={problem.num_units}"
    result = benchmark.pedantic(PIECES[piece], args=(problem,), rounds=3, iterations=1)
    if piece == "lower_bound":
        assert 0 < result <= best_baselines(problem)["gpipe"].iteration_time
