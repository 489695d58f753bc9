"""Cases the review of the windowed search found."""

from __future__ import annotations

import time

from tidgap import Problem, search
from tidgap.optimize import windowed_driver


def _cheap_backwards() -> Problem:
    """Forwards cost 50 ms each whatever their size, backwards 1 ms per sample: the best
    flush plan runs one forward and 128 backward microbatches, more than the default
    width of 64."""
    link = {"affine": {"base": 0, "per_sample": 0}}
    stage = {
        "forward": {"affine": {"base": 50, "per_sample": 0.1}},
        "backward": {"affine": {"base": 0, "per_sample": 1.0}},
    }
    return Problem.from_dict(
        {
            "format": "tidgap.problem/1",
            "name": "cheap-backwards",
            "batch_size": 128,
            "unit": 1,
            "stages": [stage, stage],
            "links": [{"forward": link, "backward": link}],
        }
    )


def test_a_flush_plan_with_long_backward_partitions_still_seeds_the_windowed_search() -> None:
    problem = _cheap_backwards()
    flush = search(problem, schedule="flush", seed=0, generations=2, population=32)
    assert max(map(len, flush.plan.backward)) > 64
    windowed = search(problem, schedule="windowed", seed=0, generations=2, population=32)
    assert windowed.evaluation.iteration_time <= flush.evaluation.iteration_time * (1 + 1e-12)


def test_compiling_is_outside_the_time_limit(monkeypatch) -> None:
    real = windowed_driver.compiled_loops

    def slow(*args: object) -> object:
        time.sleep(1.5)
        return real(*args)

    monkeypatch.setattr(windowed_driver, "compiled_loops", slow)
    problem = _cheap_backwards()
    result = search(problem, time_limit=1.0, stagnation=None, population=16)
    assert result.stop_reason == "time limit" and result.generations > 1
    assert result.wall_time >= 1.5 + 0.9
