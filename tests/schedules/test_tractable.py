"""Problems with too many units to try every microbatch count are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tidgap.cli import cli
from tidgap.model.problem import Problem
from tidgap.profiling.synth import synth_problem
from tidgap.schedules.baselines import (
    MAX_BASELINE_STEPS,
    baseline_steps,
    feasible_microbatch_counts,
)


def test_baseline_steps_count_every_feasible_count() -> None:
    document = synth_problem(seed=2, stages=3, batch_size=48, unit=2)
    document["stages"][1]["max_microbatch"] = 8
    problem = Problem.from_dict(document)
    counts = feasible_microbatch_counts(problem)
    assert baseline_steps(problem) == problem.num_stages * sum(counts)


def test_compare_refuses_a_batch_too_large_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(synth_problem(seed=1, stages=4, batch_size=2**20)))
    assert baseline_steps(Problem.from_dict(json.loads(path.read_text()))) > MAX_BASELINE_STEPS
    for command in (["compare", str(path)], ["search", str(path), "--quiet"]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"tidgap: error: {path}: batch_size: 1048576 units")
        assert result.stderr.count("\n") == 1 and "coarser unit" in result.stderr


def test_evaluating_one_count_of_a_huge_batch_still_works(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(synth_problem(seed=1, stages=4, batch_size=10**9)))
    args = ["evaluate", str(path), "--schedule", "gpipe", "--microbatches", "4", "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["iteration_time"] > 0
