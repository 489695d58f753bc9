"""Per-stage lists in few characters."""

from __future__ import annotations

from tidgap.model.lists import compact_sizes, stage_list, stages_doing


def test_equal_runs_collapse() -> None:
    assert compact_sizes([256] * 49 + [240, 224, 224]) == "256x49 240 224x2"
    assert compact_sizes([]) == ""


def test_three_or_more_consecutive_stages_are_a_range() -> None:
    assert stage_list([3]) == "stage 3"
    assert stage_list([0, 1]) == "stages 0, 1"
    assert stage_list([0, 1, 2, 3, 5, 7, 8, 10, 11, 12]) == "stages 0-3, 5, 7, 8, 10-12"
    assert stage_list(list(range(64))) == "stages 0-63"


def test_the_verb_agrees_with_the_stages() -> None:
    assert stages_doing([2], "recompute") == "stage 2 recomputes"
    assert stages_doing([0, 1, 2], "run") == "stages 0-2 run"
