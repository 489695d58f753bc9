"""``source.calibration``'s per-stage entries (tidgap/model/calibration_tables.py): used
where well formed; ``source`` is free-form (formats.md), so a malformed entry is kept as it
is and left out, with a line naming the field, never refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import describe, run_cli, write_json
from tidgap.model.problem import Problem, load_problem
from tidgap.profiling.synth import synth_problem


def affine(base: float) -> dict[str, Any]:
    """An affine time function of ``base`` ms and 0.1 ms per sample."""
    return {"affine": {"base": base, "per_sample": 0.1}}


AFFINE = affine(1.0)
RECOMPUTING = {"forward": AFFINE, "backward": AFFINE}
ORDERED = {"forward_after_backward": AFFINE, "backward_after_forward": AFFINE}
SHORT = {"table": {"sizes": [1, 2], "times": [1.0, 2.0]}}  # batch 8 asks for sizes up to 8


def document(calibration: dict[str, Any]) -> dict[str, Any]:
    """A 3-stage, batch-8 problem whose ``source.calibration`` is ``calibration``."""
    found = synth_problem(0, 3, 8, 1, 0.5, "table", "tables")
    found["source"] = {"calibration": calibration, "note": "kept"}
    return found


#: Malformed entries and the field each one's line names.
MALFORMED = {
    "not-a-list": ({"recompute": RECOMPUTING}, "source.calibration.recompute"),
    "per-stage": ({"recompute": [RECOMPUTING] * 2}, "source.calibration.recompute"),
    "not-an-object": (
        {"recompute": [RECOMPUTING, 3, RECOMPUTING]},
        "source.calibration.recompute[1]",
    ),
    "field-missing": (
        {"order": [ORDERED, {"forward_after_backward": AFFINE}, ORDERED]},
        "source.calibration.order[1].backward_after_forward",
    ),
    "negative": (
        {"order": [ORDERED, ORDERED, {**ORDERED, "forward_after_backward": affine(-1.0)}]},
        "source.calibration.order[2].forward_after_backward.affine.base",
    ),
    "short-of-cap": (
        {"recompute": [RECOMPUTING, RECOMPUTING, {"forward": SHORT, "backward": AFFINE}]},
        "source.calibration.recompute[2].forward.table.sizes",
    ),
    # 8 microbatches of 2e299 ms: an iteration could pass MAX_TIME (1e300)
    "too-large": (
        {"recompute": [RECOMPUTING, RECOMPUTING, {"forward": affine(2e299), "backward": AFFINE}]},
        "source.calibration.recompute[2].forward",
    ),
}


def test_well_formed_entries_are_used() -> None:
    problem = Problem.from_dict(document({"recompute": [RECOMPUTING] * 3, "order": [ORDERED] * 3}))
    assert problem.recompute_times is not None and problem.order_times is not None
    assert problem.recompute_times[1].backward(4) == pytest.approx(1.4)
    assert problem.order_times[2].forward_after_backward(8) == pytest.approx(1.8)
    assert problem.unused_calibration == []


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_entry_is_left_out_not_refused(case: str) -> None:
    """The problem loads; the malformed kind is not used, the other is; a line names the
    field."""
    calibration, field = MALFORMED[case]
    other = "order" if "recompute" in calibration else "recompute"
    calibration = {**calibration, other: [ORDERED if other == "order" else RECOMPUTING] * 3}
    problem = Problem.from_dict(document(calibration))
    kept = problem.order_times if other == "order" else problem.recompute_times
    dropped = problem.recompute_times if other == "order" else problem.order_times
    assert kept is not None and dropped is None
    (line,) = problem.unused_calibration
    assert line.startswith(f"{field}") and line.endswith(": not used"), line
    assert problem.source["calibration"] == calibration  # kept as it is


def test_tidgap_run_warns_of_an_entry_left_out(tmp_path: Path) -> None:
    """The caveat names the file and the field; the run's job is written (exit 0)."""
    calibration, field = MALFORMED["field-missing"]
    broken = document(calibration)
    broken["stages"], broken["links"] = broken["stages"][:2], broken["links"][:1]
    broken["source"]["calibration"]["order"] = broken["source"]["calibration"]["order"][:2]
    broken["source"]["split"] = {"boundaries": [2]}
    problem = write_json(tmp_path / "p.json", broken)
    plan = write_json(
        tmp_path / "plan.json",
        {"format": "tidgap.plan/1", "forward": [[4, 4]] * 2, "backward": [[4, 4]] * 2},
    )
    model = ["--model", "tests.runtime.pipeline_models:MLP", "--input-shape", "6"]
    job = tmp_path / "job.json"
    result = run_cli("run", str(problem), str(plan), *model, "--write-job", str(job))
    assert result.exit_code == 0, describe(result)
    assert f"{problem}: {field}" in result.stderr and ": not used" in result.stderr
    assert json.loads(problem.read_text())["source"] == broken["source"]
    assert load_problem(problem).order_times is None
