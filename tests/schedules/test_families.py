"""The registry of schedule families: what each record says holds, and no module outside
the registry knows a schedule by its name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.golden_ordered import ordered_plan
from tidgap import Plan, Problem
from tidgap.analysis.bound import lower_bound
from tidgap.schedules.baselines import feasible_microbatch_counts
from tidgap.schedules.families import (
    BASELINE_NAMES,
    SCHEDULES,
    TIMED_BASELINES,
    baseline_evaluation,
    baseline_timeline,
    evaluate,
    family_of,
)
from tidgap.schedules.ir import flush_order

ROOT = Path(__file__).parents[2]
#: A comparison with a schedule family's name, either way round (``name == "1f1b"``), or a
#: membership test in a literal tuple of them (``in ("1f1b", "pipedream")``).
NAME_TEST = re.compile(
    r"""[!=]=\s*["'](?:{names})["']|["'](?:{names})["']\s*[!=]=|in \(["'](?:{names})["']""".format(
        names="|".join(map(re.escape, SCHEDULES))
    )
)


def test_no_module_outside_the_registry_tests_a_schedule_by_name() -> None:
    sources = [*ROOT.glob("tidgap/**/*.py"), *ROOT.glob("kernels/*.py")]
    sources += ROOT.glob("fallback_cpu/*.py")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sources
        if path.relative_to(ROOT).as_posix() != "tidgap/schedules/families.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if NAME_TEST.search(line)
    ]
    assert found == []
    assert NAME_TEST.search('if schedule == "gpipe":') and NAME_TEST.search('in ("1f1b", "x")')


def test_the_baselines_and_their_timelines() -> None:
    assert BASELINE_NAMES == ("gpipe", "1f1b", "pipedream")
    assert TIMED_BASELINES == ("gpipe", "1f1b")
    for name in BASELINE_NAMES:
        family = SCHEDULES[name]
        assert family.is_baseline and family.genes == ("microbatches",)
    assert not SCHEDULES["pipedream"].has_timeline
    with pytest.raises(ValueError, match="timed baselines: gpipe, 1f1b"):
        baseline_timeline(Problem.from_dict(_problem()), "pipedream", 1)


def _problem() -> dict[str, Any]:
    stage = {
        "forward": {"affine": {"base": 1, "per_sample": 1}},
        "backward": {"affine": {"base": 2, "per_sample": 2}},
    }
    link = {
        "forward": {"affine": {"base": 0.5, "per_sample": 0}},
        "backward": {"affine": {"base": 0.5, "per_sample": 0}},
    }
    return {
        "format": "tidgap.problem/1",
        "batch_size": 6,
        "stages": [stage] * 3,
        "links": [link] * 2,
    }


def test_each_timed_baseline_runs_its_family_order_and_holds_its_evaluation() -> None:
    problem = Problem.from_dict(_problem())
    for name in TIMED_BASELINES:
        family = SCHEDULES[name]
        for m in feasible_microbatch_counts(problem):
            plan = family.baseline(problem, m)
            order = family.order(plan)
            timeline = baseline_timeline(problem, name, m)
            for s, steps in enumerate(timeline.stages):
                assert "".join(step.kind for step in steps if step.kind != "T") == order.stages[s]
            evaluation = baseline_evaluation(problem, name, m)
            assert evaluation.iteration_time == family.time(problem, m)
            assert evaluation.iteration_time == timeline.iteration_time
            assert max(max(held for _, held in timeline.held(s)) for s in range(3)) == max(
                evaluation.peak_held
            )
    assert baseline_evaluation(problem, "pipedream", 2) is None


def test_the_flush_order_written_out_is_a_flush_plan(golden_case: dict[str, Any]) -> None:
    """``family_of``: an order equal to the flush order is the flush family (its bound
    applies); windows of the whole batch too; any other order is ``windowed``."""
    problem = Problem.from_dict(golden_case["problem"])
    entry = golden_case["plans"][0]
    forward, backward = entry["forward"], entry["backward"]
    written = Plan.of(forward, backward, order=list(flush_order(forward, backward).stages))
    wide = Plan.of(forward, backward, windows=[problem.batch_size] * problem.num_stages)
    for plan in (Plan.of(forward, backward), written, wide):
        assert family_of(plan) is SCHEDULES["flush"]
        assert evaluate(problem, plan).iteration_time >= lower_bound(problem) * (1 - 1e-12)
    for ordered in golden_case["ordered_plans"]:
        plan = ordered_plan(ordered)
        is_flush = plan.stage_order() == flush_order(plan.forward, plan.backward)
        assert family_of(plan).name == ("flush" if is_flush else "windowed")
        assert family_of(plan).separable == is_flush
