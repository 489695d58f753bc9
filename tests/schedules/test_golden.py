"""The oracle and the baselines against every golden case (relative tolerance 1e-9)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import case_id, golden_cases
from tidgap import Plan, Problem, best_baselines, check_plan, evaluate, feasible_microbatch_counts
from tidgap.schedules.families import SCHEDULES, baseline_evaluation

REL = 1e-9


def test_every_plan_matches_expected(golden_case: dict[str, Any]) -> None:
    problem = Problem.from_dict(golden_case["problem"])
    assert golden_case["plans"], "a golden case without plans tests nothing"
    for entry in golden_case["plans"]:
        plan = Plan.of(entry["forward"], entry["backward"])
        check_plan(plan, problem)
        got = evaluate(problem, plan).as_dict()
        expected = entry["expected"]
        assert got["iteration_time"] == pytest.approx(expected["iteration_time"], rel=REL)
        assert got["forward_end"] == pytest.approx(expected["forward_end"], rel=REL)
        assert got["forward_ends"] == pytest.approx(expected["forward_ends"], rel=REL)
        assert got["backward_ends"] == pytest.approx(expected["backward_ends"], rel=REL)
        assert got["peak_held"] == expected["peak_held"]
        for key in ("peak_memory", "over_memory_limit"):
            assert got.get(key) == expected.get(key), key


def test_every_baseline_per_microbatch_count(golden_case: dict[str, Any]) -> None:
    problem = Problem.from_dict(golden_case["problem"])
    expected = golden_case["baselines"]
    assert sorted(map(int, expected)) == feasible_microbatch_counts(problem)
    for m, values in expected.items():
        for schedule, value in values.items():
            got = SCHEDULES[schedule].time(problem, int(m))
            assert got == pytest.approx(value, rel=REL), (schedule, m)


def test_best_baselines(golden_case: dict[str, Any]) -> None:
    problem = Problem.from_dict(golden_case["problem"])
    best = best_baselines(problem)
    for schedule, expected in golden_case["best_baselines"].items():
        assert best[schedule].microbatches == expected["microbatches"], schedule
        assert best[schedule].iteration_time == pytest.approx(expected["iteration_time"], rel=REL)
    one_f_one_b = golden_case["best_baselines"]["1f1b"]
    evaluation = baseline_evaluation(problem, "1f1b", one_f_one_b["microbatches"])
    assert evaluation.peak_held == one_f_one_b["peak_held"]


TINY_CASES = [case for case in golden_cases() if "optimum" in case]


@pytest.mark.parametrize("golden_case", TINY_CASES, ids=case_id)
def test_optimum_evaluates_to_its_time(golden_case: dict[str, Any]) -> None:
    problem = Problem.from_dict(golden_case["problem"])
    optimum = golden_case["optimum"]
    plan = Plan.of(optimum["forward"], optimum["backward"])
    check_plan(plan, problem)
    assert evaluate(problem, plan).iteration_time == pytest.approx(
        optimum["iteration_time"], rel=REL
    )
    assert optimum["iteration_time"] <= best_baselines(problem)["gpipe"].iteration_time * (1 + REL)
