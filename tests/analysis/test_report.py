"""The report: busy time and bubbles, and a lower bound that no flush plan beats."""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.conftest import golden_cases
from tests.support.cli_helpers import case_named, json_output, run_cli, write_json
from tests.support.strategies import plans, problems
from tidgap import Plan, Problem, best_baselines, evaluate, gpipe_plan, load_problem
from tidgap.analysis.bound import least_total, lower_bound
from tidgap.analysis.exhaustive import compositions
from tidgap.analysis.report import report
from tidgap.model.examples import example_names
from tidgap.schedules.families import plan_timeline
from tidgap.schedules.flush import backward_recurrence, forward_recurrence

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None)
TINY = [case for case in golden_cases() if "optimum" in case]


def at_most(bound: float, value: float) -> bool:
    """``bound <= value`` up to rounding."""
    return bound <= value or math.isclose(bound, value, rel_tol=1e-12, abs_tol=1e-12)


def optimum(problem: Problem) -> float:
    """The least iteration time over every plan, by enumeration: with the flush the two
    directions separate (model.md), so minimise each over the product of stage partitions."""
    unit, U = problem.unit, problem.num_units

    def choices(cap: int) -> list[list[int]]:
        return [[p * unit for p in parts] for parts in compositions(U, cap // unit)]

    stages = range(problem.num_stages)
    forwards = itertools.product(*(choices(problem.forward_cap(s)) for s in stages))
    forward_end = min(forward_recurrence(problem, list(f)).ends[-1][-1] for f in forwards)
    backwards = itertools.product(*(choices(problem.backward_cap(s)) for s in stages))

    def span_of(backward: list[list[int]]) -> float:
        ends = backward_recurrence(problem, backward, 0.0).ends
        return max(g[-1] + stage.tail for g, stage in zip(ends, problem.stages, strict=True))

    span = min(span_of(list(b)) for b in backwards)
    return forward_end + span


# --- the bound -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", golden_cases(), ids=lambda case: case["problem"]["name"])
def test_bound_never_exceeds_a_golden_plan_or_gpipe(case: dict[str, Any]) -> None:
    problem = Problem.from_dict(case["problem"])
    bound = lower_bound(problem)
    assert bound > 0
    for entry in case["plans"]:
        assert at_most(bound, entry["expected"]["iteration_time"])
    assert at_most(bound, case["best_baselines"]["gpipe"]["iteration_time"])


@pytest.mark.parametrize("case", TINY, ids=lambda case: case["problem"]["name"])
def test_bound_never_exceeds_the_proven_optimum(case: dict[str, Any]) -> None:
    problem = Problem.from_dict(case["problem"])
    assert at_most(lower_bound(problem), case["optimum"]["iteration_time"])


def test_bound_is_the_optimum_with_one_stage() -> None:
    """One stage: the least forward total plus the least backward total plus the tail."""
    case = case_named("onestage7")
    problem = Problem.from_dict(case["problem"])
    assert lower_bound(problem) == pytest.approx(case["optimum"]["iteration_time"], rel=1e-12)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_bound_never_exceeds_any_plan(problem: Problem, data: st.DataObject) -> None:
    plan = data.draw(plans(problem))
    assert at_most(lower_bound(problem), evaluate(problem, plan).iteration_time)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(problem=problems(max_stages=3))
def test_bound_never_exceeds_the_enumerated_optimum(problem: Problem) -> None:
    """Against every plan of small problems; with one stage the bound is the optimum."""
    assume(problem.num_units <= 4 or problem.num_stages == 1)
    best = optimum(problem)
    bound = lower_bound(problem)
    assert at_most(bound, best)
    if problem.num_stages == 1:
        assert math.isclose(bound, best, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    times=st.lists(st.floats(0, 10, allow_subnormal=False), min_size=1, max_size=6),
    units=st.integers(1, 8),
)
def test_least_total_is_the_least_over_partitions(times: list[float], units: int) -> None:
    expected = min(sum(times[p - 1] for p in parts) for parts in compositions(units, len(times)))
    assert least_total(np.asarray(times), units) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("name", example_names())
def test_examples_sit_between_bound_and_gpipe(name: str) -> None:
    """On the built-in examples the bound is below the best GPipe, and not far below."""
    problem = load_problem(f"example:{name}")
    gpipe = best_baselines(problem)["gpipe"].iteration_time
    assert 0.5 * gpipe < lower_bound(problem) <= gpipe


# --- busy time and bubbles -----------------------------------------------------------------------


@PROPERTY
@given(problem=problems(), data=st.data())
def test_busy_time_is_the_compute_and_the_tail(problem: Problem, data: st.DataObject) -> None:
    plan = data.draw(plans(problem))
    figures = report(plan_timeline(problem, plan), lower_bound(problem))
    total = evaluate(problem, plan).iteration_time
    for s, stage in enumerate(problem.stages):
        busy = sum(map(stage.forward, plan.forward[s])) + sum(map(stage.backward, plan.backward[s]))
        assert figures.busy[s] == pytest.approx(busy + stage.tail, rel=1e-9, abs=1e-9)
        if total > 0:
            assert figures.bubble[s] == pytest.approx(1 - figures.busy[s] / total, abs=1e-12)
            assert -1e-9 <= figures.bubble[s] <= 1
    if total > 0:
        expected = 1 - sum(figures.busy) / (problem.num_stages * total)
        assert figures.overall_bubble == pytest.approx(expected, abs=1e-12)
        assert figures.gap is None or figures.gap >= -1e-9


def test_gpipe_bubble_on_equal_stages() -> None:
    """``S`` equal stages, free links, ``m`` microbatches: GPipe's bubble is
    ``(S-1) / (m+S-1)`` (the textbook figure)."""
    stage = {
        "forward": {"affine": {"base": 1, "per_sample": 0}},
        "backward": {"affine": {"base": 2, "per_sample": 0}},
    }
    link = {
        "forward": {"affine": {"base": 0, "per_sample": 0}},
        "backward": {"affine": {"base": 0, "per_sample": 0}},
    }
    problem = Problem.from_dict(
        {"format": "tidgap.problem/1", "batch_size": 8, "stages": [stage] * 4, "links": [link] * 3}
    )
    figures = report(plan_timeline(problem, gpipe_plan(problem, 8)), None)
    assert figures.overall_bubble == pytest.approx(3 / 11, rel=1e-12)
    assert figures.bubble == pytest.approx([3 / 11] * 4, rel=1e-12)
    assert figures.gap is None


# --- on the command line -------------------------------------------------------------------------


def _inputs(tmp_path: Any, name: str) -> tuple[str, str]:
    case = case_named(name)
    problem = write_json(tmp_path / "problem.json", case["problem"])
    plan = write_json(
        tmp_path / "plan.json",
        {
            "format": "tidgap.plan/1",
            "forward": case["plans"][0]["forward"],
            "backward": case["plans"][0]["backward"],
        },
    )
    return str(problem), str(plan)


def test_evaluate_json_keeps_its_contract(tmp_path: Any) -> None:
    """``evaluate --json`` prints exactly the object of docs/formats.md; the figures are in
    the text output (``--json`` output must equal a search's ``predicted``)."""
    keys = {"iteration_time", "forward_end", "forward_ends", "backward_ends", "peak_held"}
    problem, plan = _inputs(tmp_path, "med7_1")
    assert set(json_output(run_cli("evaluate", problem, plan, "--json"))) == keys
    problem, plan = _inputs(tmp_path, "med7_1_mem")
    document = json_output(run_cli("evaluate", problem, plan, "--json"))
    assert set(document) == keys | {"peak_memory", "over_memory_limit"}


def _figures(text: str) -> tuple[list[float], float, float | None, float | None]:
    """Busy times, overall bubble (%), bound and gap (%) as printed by ``evaluate``."""
    busy_line = next(line for line in text.splitlines() if line.strip().startswith("busy ("))
    busy = [float(x) for x in re.findall(r" (\d+(?:\.\d+)?(?:e[-+]?\d+)?) \(", busy_line)]
    overall = float(re.search(r"bubble (\d+\.\d)% overall", text).group(1))
    bound = re.search(r"lower bound for any flush plan (\S+) ms, (\S+)% above it", text)
    if bound is None:
        return busy, overall, None, None
    return busy, overall, float(bound.group(1)), float(bound.group(2))


def test_evaluate_text_shows_the_figures(tmp_path: Any) -> None:
    problem_path, plan_path = _inputs(tmp_path, "med7_1")
    result = run_cli("evaluate", problem_path, plan_path)
    assert result.exit_code == 0, result.output
    case = case_named("med7_1")
    problem = Problem.from_dict(case["problem"])
    plan = Plan.of(case["plans"][0]["forward"], case["plans"][0]["backward"])
    expected = report(plan_timeline(problem, plan), lower_bound(problem))
    busy, overall, bound, gap = _figures(result.stdout)
    assert busy == pytest.approx(expected.busy, rel=1e-5)
    assert overall == pytest.approx(100 * expected.overall_bubble, abs=0.051)
    assert bound == pytest.approx(expected.lower_bound, rel=1e-5)
    assert gap == pytest.approx(100 * expected.gap, abs=0.0051)


@pytest.mark.parametrize(("schedule", "bounded"), [("gpipe", True), ("1f1b", False)])
def test_evaluate_schedule_reports(tmp_path: Any, schedule: str, bounded: bool) -> None:
    """GPipe is a flush plan (the bound applies); 1F1B has no flush (it does not)."""
    problem, _ = _inputs(tmp_path, "med7_1")
    result = run_cli("evaluate", problem, "--schedule", schedule, "-m", "4")
    assert result.exit_code == 0, result.output
    busy, _, bound, _ = _figures(result.stdout)
    assert len(busy) == 6
    assert (bound is not None) == bounded


def test_compare_json_has_the_bound(tmp_path: Any) -> None:
    problem, plan = _inputs(tmp_path, "linkheavy7")
    document = json_output(run_cli("compare", problem, plan, "--json"))
    rows = {row["schedule"]: row for row in document["rows"]}
    assert at_most(document["lower_bound"], rows["plan"]["iteration_time"])
    assert at_most(document["lower_bound"], rows["gpipe"]["iteration_time"])
