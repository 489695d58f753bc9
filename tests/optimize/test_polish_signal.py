"""A signal during the final polish stops it within a batch: the search returns the best
plan polished so far and names the signal as its stop reason (it no longer waits for the
polish to end, which on a deep pipeline took seconds to minutes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tidgap.model.plan import check_plan
from tidgap.model.problem import load_problem
from tidgap.optimize import flush_driver, windowed_finish
from tidgap.optimize import polish as polish_module
from tidgap.optimize.driver import search
from tidgap.optimize.joint_polish import _Polish
from tidgap.optimize.polish import polish, time_to_stop


def _counting(calls: list[int], score: Callable) -> Callable:
    def counted(candidates: np.ndarray) -> np.ndarray:
        calls.append(len(candidates))
        return score(candidates)

    return counted


def _sum_of_squares(candidates: np.ndarray) -> np.ndarray:
    """Fitness of ``(n, S, K)`` chromosomes: the sum of squared sizes (even sizes win)."""
    return (candidates.astype(np.int64) ** 2).sum(axis=(1, 2))


def test_time_to_stop_is_the_deadline_or_a_signal() -> None:
    assert not time_to_stop(None)
    assert time_to_stop(0.0)
    assert not time_to_stop(None, lambda: None)
    assert time_to_stop(None, lambda: "SIGINT")


def test_a_signal_stops_the_descent_after_its_first_batch() -> None:
    start = np.array([[6, 1, 1, 0], [5, 3, 0, 0]], dtype=np.int32)
    caps = np.array([8, 8])
    fitness = int(_sum_of_squares(start[None])[0])
    calls: list[int] = []
    whole, whole_fitness = polish(start, fitness, caps, _counting(calls, _sum_of_squares))
    assert len(calls) > 2 and whole_fitness < fitness
    calls.clear()
    score = _counting(calls, _sum_of_squares)
    stopped, stopped_fitness = polish(
        start,
        fitness,
        caps,
        score,
        batch_bytes=start.nbytes * 3,
        interrupted=lambda: "SIGINT" if calls else None,
    )
    assert calls == [3]  # one batch of three candidates, then the signal
    assert stopped_fitness == int(_sum_of_squares(stopped[None])[0]) < fitness
    calls.clear()
    before = polish(start, fitness, caps, score, interrupted=lambda: "SIGINT")
    assert calls == [] and before[1] == fitness and (before[0] == start).all()


def _interrupted_in_polish(
    calls: list[int], entries: int = 1, phase: str = "polish"
) -> tuple[Callable, Callable]:
    """``on_phase`` and ``interrupted`` for a search: SIGINT once the ``entries``-th
    ``phase`` phase has scored a batch (``calls``: one entry per batch scored, emptied when
    such a phase begins, so that it counts that phase's batches: the seed polish's come
    before the final polish's)."""
    begun: list[str] = []  # one entry per such phase begun

    def on_phase(name: str) -> None:
        if name == phase:
            calls.clear()
            begun.append(name)

    def interrupted() -> str | None:
        return "SIGINT" if len(begun) >= entries and calls else None

    return on_phase, interrupted


def _counted_joint_polish(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the batches the joint polish scores (one entry each)."""
    calls: list[int] = []
    score = _Polish.score
    monkeypatch.setattr(_Polish, "score", lambda self, c: _counting(calls, score.__get__(self))(c))
    return calls


def test_a_signal_in_the_windowed_polish_stops_it_and_names_the_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = load_problem("example:gpt1-14")
    calls = _counted_joint_polish(monkeypatch)
    whole = search(problem, generations=4, population=32)
    assert whole.stop_reason == "generations" and len(calls) > 4
    calls.clear()
    on_phase, interrupted = _interrupted_in_polish(calls)
    result = search(
        problem, generations=4, population=32, on_phase=on_phase, interrupted=interrupted
    )
    assert result.stop_reason == "SIGINT" and result.interrupted
    assert len(calls) == 1  # the level in force's first batch; the other levels not begun
    check_plan(result.plan, problem)
    assert result.evaluation.iteration_time <= result.baselines["1f1b"].iteration_time


def test_a_signal_in_the_seed_polish_stops_the_search_before_its_annealing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = load_problem("example:gpt1-14")
    calls = _counted_joint_polish(monkeypatch)
    phases: list[str] = []
    on_phase, interrupted = _interrupted_in_polish(calls, phase="seed polish")

    def phase(name: str) -> None:
        phases.append(name)
        on_phase(name)

    result = search(problem, generations=4, population=32, on_phase=phase, interrupted=interrupted)
    assert result.stop_reason == "SIGINT" and len(calls) == 1  # one batch, then the signal
    assert "seed polish" in phases and "polish" not in phases
    check_plan(result.plan, problem)
    assert result.evaluation.iteration_time <= result.baselines["1f1b"].iteration_time


def test_a_signal_in_a_later_rounds_polish_ends_the_time_limited_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = load_problem("example:gpt1-14")
    calls = _counted_joint_polish(monkeypatch)
    on_phase, interrupted = _interrupted_in_polish(calls, entries=2)

    def one_round(end: float, time_limit: float, ending: float, round_: Callable) -> None:
        round_(time.perf_counter())  # a round, whatever the clock says (a loaded machine)

    monkeypatch.setattr(windowed_finish, "more_rounds", one_round)
    phases: list[str] = []

    def phase(name: str) -> None:
        phases.append(name)
        on_phase(name)

    result = search(problem, time_limit=4.0, population=32, on_phase=phase, interrupted=interrupted)
    assert result.stop_reason == "SIGINT"  # was "time limit": the round's polish ran on
    assert phases.count("polish") == 2 and len(calls) == 1  # one batch, then the signal
    check_plan(result.plan, problem)


def test_a_signal_in_the_flush_polish_stops_it_and_names_the_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = load_problem("example:gpt1-14")
    calls: list[int] = []

    def counted_polish(genes, fitness, caps, score, *args, **kwargs):  # noqa: ANN001, ANN202
        return polish_module.polish(genes, fitness, caps, _counting(calls, score), *args, **kwargs)

    monkeypatch.setattr(flush_driver, "polish", counted_polish)
    whole = search(problem, schedule="flush", generations=4, population=32)
    assert whole.stop_reason == "generations" and len(calls) > 2
    calls.clear()
    on_phase, interrupted = _interrupted_in_polish(calls)
    result = search(
        problem,
        schedule="flush",
        generations=4,
        population=32,
        on_phase=on_phase,
        interrupted=interrupted,
    )
    assert result.stop_reason == "SIGINT"
    assert len(calls) == 1  # the forward's first batch; the backward's polish not begun
    check_plan(result.plan, problem)


def test_a_search_stopped_in_its_polish_resumes_to_the_unbroken_plan(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The state a signal in the polish leaves is the annealing's end: resumed with no more
    generations, the search polishes again and returns the unbroken search's plan."""
    problem = load_problem("example:gpt1-14")
    options = dict(population=16, seed=2, backend="numba", memory_limit="1f1b")
    unbroken = search(problem, generations=40, **options)
    calls = _counted_joint_polish(monkeypatch)
    on_phase, interrupted = _interrupted_in_polish(calls)
    path = tmp_path / "s.state"
    stopped = search(
        problem,
        generations=40,
        checkpoint=path,
        on_phase=on_phase,
        interrupted=interrupted,
        **options,
    )
    assert stopped.stop_reason == "SIGINT" and len(calls) == 1
    rest = search(problem, generations=0, resume=path, **options)
    assert rest.stop_reason == "generations"
    plans = [(r.plan.forward, r.plan.backward, r.plan.order) for r in (unbroken, rest)]
    assert plans[0] == plans[1]
