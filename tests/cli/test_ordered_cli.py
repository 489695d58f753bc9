"""Ordered plans on the command line: ``evaluate`` gives every golden value, refuses every
golden invalid order in one line, and reads the order everywhere it shows the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import (
    case_named,
    describe,
    golden_cases,
    json_output,
    run_cli,
    write_json,
)
from tests.support.golden_ordered import ordered_document, ordered_params
from tidgap.model.lists import compact_sizes

REL = 1e-9


def _plan_file(tmp_path: Path, entry: dict[str, Any]) -> str:
    return str(write_json(tmp_path / "plan.json", ordered_document(entry)))


@pytest.mark.parametrize(("name", "index"), ordered_params())
def test_evaluate_json_gives_every_golden_ordered_value(
    tmp_path: Path, name: str, index: int
) -> None:
    case = case_named(name)
    entry = case["ordered_plans"][index]
    problem = str(write_json(tmp_path / "problem.json", case["problem"]))
    got = json_output(run_cli("evaluate", problem, _plan_file(tmp_path, entry), "--json"))
    expected = entry["expected"]
    for key in ("iteration_time", "forward_end", "forward_ends", "backward_ends"):
        assert got[key] == pytest.approx(expected[key], rel=REL), key
    assert got["peak_held"] == expected["peak_held"]
    for key in ("peak_memory", "over_memory_limit"):
        assert got.get(key) == pytest.approx(expected.get(key)), key


@pytest.mark.parametrize(("name", "index"), ordered_params(key="invalid_orders"))
def test_evaluate_refuses_every_golden_invalid_order_in_one_line(
    tmp_path: Path, name: str, index: int
) -> None:
    case = case_named(name)
    entry = case["invalid_orders"][index]
    error = entry["error"]
    key = "order" if "order" in entry else "windows"
    problem = str(write_json(tmp_path / "problem.json", case["problem"]))
    plan = _plan_file(tmp_path, entry)
    result = run_cli("evaluate", problem, plan)
    assert result.exit_code == 2, describe(result)
    assert result.stdout == ""
    prefix = f"tidgap: error: {plan}: {key}[{error['stage']}]: "
    assert result.stderr.startswith(prefix) and result.stderr.count("\n") == 1, result.stderr
    if "position" in error:
        assert f"position {error['position']}: " in result.stderr
    rule = "rule count" if error["rule"] == "count" else f"rule {error['rule']} "
    assert rule in result.stderr


def test_evaluate_text_shows_each_stage_order(tmp_path: Path) -> None:
    case = case_named("tiny7_0")
    entry = case["ordered_plans"][0]
    problem = str(write_json(tmp_path / "problem.json", case["problem"]))
    result = run_cli("evaluate", problem, _plan_file(tmp_path, entry))
    assert result.exit_code == 0, describe(result)
    for letters in entry["order"]:
        assert f"order {letters}" in result.stdout
    held = compact_sizes(entry["expected"]["peak_held"])
    assert f"peak held (samples per stage): {held}\n" in result.stdout


@pytest.mark.parametrize("name", [case["problem"]["name"] for case in golden_cases()])
def test_evaluate_one_f_one_b_json_gives_the_best_one_f_one_b_and_what_it_holds(
    tmp_path: Path, name: str
) -> None:
    case = case_named(name)
    best = case["best_baselines"]["1f1b"]
    problem = str(write_json(tmp_path / "problem.json", case["problem"]))
    m = str(best["microbatches"])
    got = json_output(run_cli("evaluate", problem, "--schedule", "1f1b", "-m", m, "--json"))
    assert got["iteration_time"] == pytest.approx(best["iteration_time"], rel=REL)
    assert got["peak_held"] == best["peak_held"]
