"""The search's setup: phases timed and reported, seeds capped, the polish batched and
bound by a deadline."""

from __future__ import annotations

import time

import numpy as np

from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.ticks import tick_problem
from tidgap.model.problem import load_problem
from tidgap.optimize.driver import equal_seed_counts, search
from tidgap.optimize.polish import polish


def test_every_setup_phase_is_reported_and_timed() -> None:
    seen: list[str] = []
    result = search(
        load_problem("example:tiny-2"),
        schedule="flush",
        generations=3,
        population=16,
        on_phase=seen.append,
    )
    assert seen == ["compile", "baselines", "heuristics", "seeding", "polish", "decode"]
    assert set(result.setup) == set(seen) and all(t >= 0 for t in result.setup.values())
    assert result.plan_document()["search"]["setup_time"].keys() == result.setup.keys()


def test_heuristics_are_skipped_once_the_time_limit_has_passed() -> None:
    result = search(load_problem("example:tiny-2"), schedule="flush", time_limit=0.0, population=16)
    assert result.heuristics == {} and result.stop_reason == "time limit"
    assert result.evaluation.iteration_time <= result.baselines["gpipe"].iteration_time


def test_all_equal_seeds_while_they_fit() -> None:
    assert equal_seed_counts(12, 4, 8, 100, [5]) == [3, 4, 5, 6, 7, 8]


def test_many_equal_seeds_are_spread_and_keep_the_baselines() -> None:
    counts = equal_seed_counts(4096, 4096, 4096, 64, [977, 1500])
    assert len(counts) <= 64 and {1, 977, 1500, 4096} <= set(counts)
    assert counts == sorted(set(counts))


def _score(problem_name: str):
    ticked = tick_problem(load_problem(problem_name))
    evaluator = create_evaluator(ticked, "flush", "numpy")
    return ticked, evaluator.forward_end


def test_polish_in_small_batches_equals_one_batch() -> None:
    ticked, score = _score("example:gpt1-14")
    genes = np.zeros((ticked.num_stages, 16), dtype=np.int32)
    genes[:, :2] = [ticked.num_units - 1, 1]
    start = int(score(genes[None])[0])
    whole = polish(genes, start, ticked.forward_caps, score, batch_bytes=1 << 30)
    pieces = polish(genes, start, ticked.forward_caps, score, batch_bytes=genes.nbytes * 3)
    assert whole[1] < start
    assert whole[1] == pieces[1] and np.array_equal(whole[0], pieces[0])


def test_polish_stops_at_its_deadline() -> None:
    ticked, score = _score("example:gpt1-14")
    genes = np.zeros((ticked.num_stages, 16), dtype=np.int32)
    genes[:, :2] = [ticked.num_units - 1, 1]
    start = int(score(genes[None])[0])
    calls = []

    def counted(candidates: np.ndarray) -> np.ndarray:
        calls.append(len(candidates))
        return score(candidates)

    polished, fitness = polish(
        genes, start, ticked.forward_caps, counted, time.perf_counter(), genes.nbytes * 3
    )
    assert calls == [3] and fitness <= start


def test_the_progress_line_names_each_phase(capsys) -> None:
    from tidgap.cli.progress import ProgressLine

    line = ProgressLine("ms")
    line.phase("baselines")
    line.phase("polish")
    line.close()
    drawn = [part for part in capsys.readouterr().err.split("\r") if part]
    assert drawn[0].startswith("setup: best GPipe, 1F1B and PipeDream over every microbatch")
    assert drawn[1].startswith("polishing the best plan")
