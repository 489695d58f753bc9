"""What a search settles before its generations at scale: which plans widen the chromosome
(tidgap.optimize.preparation.needed_counts) and which heuristics a time limit leaves out
(add_heuristics, by tidgap.optimize.heuristics.HEURISTIC_SECONDS)."""

from __future__ import annotations

import pytest
from pytest import MonkeyPatch

from tidgap import Plan, Problem, best_baselines, evaluate, load_problem
from tidgap.optimize import preparation
from tidgap.optimize.driver import search
from tidgap.optimize.ga import StopRule
from tidgap.optimize.heuristics import DP_STEPS_PER_SECOND, HEURISTICS, global_dp_seconds
from tidgap.optimize.preparation import add_heuristics, needed_counts
from tidgap.optimize.windowed_seeds import seed_plans
from tidgap.profiling.synth import synth_problem
from tidgap.schedules.baselines import equal_partition, gpipe_plan
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import TIMED_BASELINES


def test_a_heuristic_slower_than_the_best_gpipe_does_not_widen() -> None:
    problem = load_problem("example:gpt1-14")
    baselines = best_baselines(problem)
    U, S = problem.num_units, problem.num_stages
    slow = Plan.of([equal_partition(problem, U)] * S, [equal_partition(problem, U)] * S)
    gpipe = baselines["gpipe"]
    assert evaluate(problem, slow).iteration_time > gpipe.iteration_time
    own = [b.microbatches for b in baselines.values()]
    assert needed_counts(problem, baselines, {"slow": slow}) == own
    assert U in needed_counts(problem, baselines, {}, [slow])  # a kept plan always widens
    fastest = gpipe_plan(problem, gpipe.microbatches)  # as fast as the best GPipe: widens
    wider = own + [gpipe.microbatches] * 2 * S
    assert needed_counts(problem, baselines, {"fastest": fastest}) == wider


@pytest.mark.parametrize("pricing", ["model", "run"])
def test_a_windowed_search_evaluates_each_heuristic_once(
    monkeypatch: MonkeyPatch, pricing: str
) -> None:
    """The windowed search sizes its chromosomes by the heuristics' times that its first
    search measured (each a reference evaluation: 0.3 s at 256 stages), a flush one or,
    priced as the run, a mirrored windowed one, and returns them."""
    evaluated: list[Plan] = []

    def counted(problem: Problem, plan: Plan) -> Evaluation:
        evaluated.append(plan)
        return evaluate(problem, plan)

    monkeypatch.setattr(preparation, "evaluate", counted)
    result = search(load_problem("example:gpt1-14"), generations=2, population=16, pricing=pricing)
    assert len(evaluated) == len(result.heuristics) == len(HEURISTICS)
    assert result.pricing == pricing and set(result.heuristic_times) == set(HEURISTICS)


def test_global_dp_seconds_count_every_candidate() -> None:
    document = synth_problem(4, 3, 40)
    document["stages"][1]["max_microbatch"] = 6
    problem = Problem.from_dict(document)
    steps = problem.num_stages * sum(min(u, 6) for u in range(1, 41))
    assert global_dp_seconds(problem) == pytest.approx(steps / DP_STEPS_PER_SECOND)


def test_a_time_limit_leaves_out_a_heuristic_that_would_overrun_it() -> None:
    """8 stages of 60,000 units: the global DP took 55 s on the loaded development
    machine (13 s quiet); with 20 s left only the local greedy runs, without a limit both
    do (on a small problem)."""
    large = Problem.from_dict(synth_problem(0, 8, 60_000))
    assert global_dp_seconds(large) > 20
    found: dict[str, Plan] = {}
    add_heuristics(large, StopRule(time_limit=20.0, stagnation=None), found)
    assert list(found) == ["local greedy"]
    small = load_problem("example:gpt1-14")
    found = {}
    add_heuristics(small, StopRule(stagnation=None), found)
    assert list(found) == list(HEURISTICS)
    kept = {"global DP": found["global DP"]}
    add_heuristics(small, StopRule(time_limit=0.0, stagnation=None), kept)
    assert list(kept) == ["global DP"]  # out of time: nothing added, nothing lost


def test_a_spent_time_limit_leaves_the_best_equal_seeds_and_the_extremes() -> None:
    """The equal seeds cost 30 ms a count at 512 stages: with no time left, the windowed
    search seeds the best GPipe's and 1F1B's counts and the fewest and most that fit."""
    problem = load_problem("example:gpt1-14")
    baselines = best_baselines(problem)
    width = problem.num_units
    every = seed_plans(problem, width, 512, baselines)
    assert seed_plans(problem, width, 512, baselines, seconds=60.0) == every
    counts = sorted({len(plan.forward[0]) for plan in every})
    few = sorted({len(plan.forward[0]) for plan in seed_plans(problem, width, 512, baselines, 0.0)})
    best = {baselines[name].microbatches for name in TIMED_BASELINES}
    assert len(counts) > 4 and few == sorted(best | {counts[0], counts[-1]})
