"""Speedups measured by plans run in turn: the median's ratio and each paired iteration's."""

from __future__ import annotations

import pytest

from tidgap.runtime.report import RunFigures, speedup_line, speedup_record


def figures(label: str, iterations: list[float], predicted: float) -> RunFigures:
    """A run's figures with only what the speedups read."""
    return RunFigures(
        label=label,
        time_unit="ms",
        iterations=iterations,
        predicted=predicted,
        busy=[1.0],
        predicted_busy=[1.0],
        recompute=[False],
        gradient_difference=None,
        timeline=None,  # type: ignore[arg-type]
        predicted_timeline=None,  # type: ignore[arg-type]
    )


def test_every_pair_putting_the_plan_ahead_ranks_it() -> None:
    plan, gpipe = figures("plan", [10, 11, 12], 10), figures("GPipe(4)", [12, 12, 13], 12)
    line = speedup_line(plan, gpipe)
    assert line == (
        "  plan vs GPipe(4): speedup measured 1.091x (1.083x to 1.200x over 3 paired "
        "iterations), predicted 1.200x"
    )
    record = speedup_record(plan, gpipe)
    assert record["measured"] == pytest.approx(12 / 11) and record["predicted"] == 1.2
    assert record["paired"] == pytest.approx(
        {"min": 13 / 12, "median": 12 / 11, "max": 1.2, "ranked": True}
    )


def test_pairs_putting_each_ahead_do_not_rank_them() -> None:
    """The medians say 1.1x; one iteration, run at the same moment, had the baseline ahead."""
    plan, gpipe = figures("plan", [10, 10, 14], 10), figures("GPipe(4)", [11, 11, 13], 11)
    line = speedup_line(plan, gpipe)
    assert line.endswith(": the iterations do not rank the two (some put each ahead)")
    assert "over 3 paired iterations" in line
    assert speedup_record(plan, gpipe)["paired"]["ranked"] is False


def test_one_iteration_gives_no_range() -> None:
    line = speedup_line(figures("plan", [10], 10), figures("1F1B(2)", [9], 9))
    assert line == "  plan vs 1F1B(2): speedup measured 0.900x, predicted 0.900x"


def test_the_same_plan_says_its_difference_is_noise() -> None:
    """Two labels of one schedule (a searched plan that is the best 1F1B): the line says so
    instead of ranking them, and the record carries it."""
    plan, twin = figures("plan", [10, 10, 14], 10), figures("1F1B(4)", [11, 9, 13], 10)
    line = speedup_line(plan, twin, same=True)
    assert line.endswith(": the same plan (what differs is the machine's noise)")
    assert "do not rank" not in line
    assert speedup_record(plan, twin, same=True)["same_plan"] is True
    assert speedup_record(plan, twin)["same_plan"] is False
