"""The search summary names the best baseline overall and says plainly when it is faster."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tidgap.analysis.search_summary import best_rival, verdict
from tidgap.cli import cli
from tidgap.schedules.baselines import BaselineResult


def _baselines(gpipe: float, one_f_one_b: float) -> dict[str, BaselineResult]:
    return {
        "gpipe": BaselineResult("gpipe", 4, gpipe),
        "1f1b": BaselineResult("1f1b", 6, one_f_one_b),
        "pipedream": BaselineResult("pipedream", 1, 1.0),
    }


def test_the_rival_is_the_faster_synchronous_baseline() -> None:
    assert best_rival(_baselines(10.0, 9.0)).schedule == "1f1b"
    assert best_rival(_baselines(9.0, 10.0)).schedule == "gpipe"
    assert best_rival(_baselines(9.0, 9.0)).schedule == "gpipe"


def test_times_apart_in_their_last_bits_are_a_tie() -> None:
    """GPipe(2) and 1F1B(2) on one stage: the same ops summed in another order (14.53428
    against 14.534279999999999) were '0.00% FASTER' and a -1e-14 % gain in a sweep."""
    from tidgap.analysis.sweep_summary import gain_pct

    plan, other = 14.53428, 14.534279999999999
    assert best_rival(_baselines(plan, other)).schedule == "gpipe"
    line = verdict(plan, BaselineResult("1f1b", 2, other), "ms")
    assert line == "best baseline: 1F1B(2) 14.5343 ms, as fast as this plan"
    assert gain_pct(other, plan) == 0.0 and gain_pct(9.0, 10.0) == pytest.approx(-10.0)


def test_a_faster_baseline_is_said_plainly() -> None:
    line = verdict(10.0, BaselineResult("1f1b", 6, 8.0), "ms")
    assert line.startswith("best baseline: 1F1B(6) 8 ms, 25.00% FASTER than this plan")


def test_a_slower_baseline_gives_the_plan_s_gain() -> None:
    line = verdict(8.0, BaselineResult("gpipe", 4, 10.0), "ms")
    assert line == "best baseline: GPipe(4) 10 ms, this plan is 1.250x faster (25.00%)"


def test_a_flush_search_on_tiny_2_says_1f1b_is_faster() -> None:
    args = ["search", "example:tiny-2", "--generations", "50", "--schedule", "flush"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "best baseline: 1F1B(" in result.stdout and "FASTER than this plan" in result.stdout


def test_search_on_vgg16_says_the_plan_wins() -> None:
    args = ["search", "example:vgg16", "--generations", "30", "--quiet"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "best baseline: GPipe(" in result.stdout and "this plan is" in result.stdout


def test_a_baseline_over_the_limit_in_force_is_said_so() -> None:
    """The best baseline's line says when that baseline holds more than the search's limit
    allows (the search may not return it); not when it fits (no test held the note)."""
    import tidgap
    from tests.support.cli_helpers import case_named
    from tidgap.analysis.search_summary import summary_lines

    document = case_named("med7_1_mem")["problem"]
    for stage in document["stages"]:
        stage.pop("memory_limit", None)
    problem = tidgap.Problem.from_dict(document)
    rival = tidgap.best_baselines(problem)["1f1b"]
    held = tidgap.evaluate(problem, tidgap.one_f_one_b_plan(problem, rival.microbatches))
    options = dict(generations=3, population=16, seed=0)
    for limit, note in ((int(0.6 * max(held.peak_memory)), True), (None, False)):
        result = tidgap.search(problem, memory_limit=limit, **options)
        (line,) = [line for line in summary_lines(result) if "best baseline:" in line]
        assert line.endswith(" (over the memory limit)") == note, line
