"""The problem's memory fields (formats.md): accepted, reported by evaluate, bad input named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import case_named, json_output, plan_document, run_cli
from tidgap.model.lists import stage_list
from tidgap.optimize.memory import format_bytes

MEM_CASES = ["tiny7_1_mem", "med7_1_mem"]


def _write(tmp_path: Path, document: dict[str, Any], name: str = "problem.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


@pytest.mark.parametrize("name", MEM_CASES)
def test_evaluate_reports_peak_memory_and_the_stages_over_it(tmp_path: Path, name: str) -> None:
    case = case_named(name)
    problem = _write(tmp_path, case["problem"])
    plan = _write(tmp_path, plan_document(case), "plan.json")
    expected = case["plans"][0]["expected"]
    document = json_output(run_cli("evaluate", problem, plan, "--json"))
    assert document["peak_held"] == expected["peak_held"]
    assert document["peak_memory"] == pytest.approx(expected["peak_memory"])
    assert document["over_memory_limit"] == expected["over_memory_limit"]
    text = run_cli("evaluate", problem, plan).stdout
    over = expected["over_memory_limit"]
    assert (f"over the memory limit on {stage_list(over)}" if over else "within every") in text
    peaks = ", ".join(format_bytes(b) for b in expected["peak_memory"])
    assert f"peak memory per stage: {peaks}; " in text


@pytest.mark.parametrize("name", [*MEM_CASES, "med7_1"])
def test_evaluate_1f1b_reports_what_it_holds(tmp_path: Path, name: str) -> None:
    case = case_named(name)
    best = case["best_baselines"]["1f1b"]
    args = ["--schedule", "1f1b", "--microbatches", str(best["microbatches"]), "--json"]
    document = json_output(run_cli("evaluate", _write(tmp_path, case["problem"]), *args))
    assert document["peak_held"] == best["peak_held"]
    assert ("peak_memory" in document) == name.endswith("_mem")


def _broken(edit: str) -> dict[str, Any]:
    problem = case_named("tiny7_1_mem")["problem"]
    stages = problem["stages"]
    if edit == "some stages only":
        del stages[1]["activation_bytes"]
    elif edit == "limit without bytes":
        for stage in stages:
            stage.pop("activation_bytes")
    elif edit == "negative bytes":
        stages[1]["activation_bytes"] = -1
    elif edit == "zero limit":
        stages[0]["memory_limit"] = 0
    elif edit == "string bytes":
        stages[0]["activation_bytes"] = "4096"
    elif edit == "overflowing bytes":
        stages[1]["activation_bytes"] = 1e308
    elif edit == "infinite limit":
        stages[0]["memory_limit"] = float("inf")
    elif edit == "nan bytes":
        stages[0]["activation_bytes"] = float("nan")
    return problem


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        ("some stages only", "stages[1].activation_bytes", "every stage or on none"),
        ("limit without bytes", "stages[0].memory_limit", "needs activation_bytes"),
        ("negative bytes", "stages[1].activation_bytes", "must be >= 0"),
        ("zero limit", "stages[0].memory_limit", "must be > 0"),
        ("string bytes", "stages[0].activation_bytes", "must be a number"),
        ("overflowing bytes", "stages[1].activation_bytes", "exceeds 1e+300 bytes"),
        ("infinite limit", "stages[0].memory_limit", "Infinity"),
        ("nan bytes", "stages[0].activation_bytes", "NaN"),
    ],
)
def test_bad_memory_fields_are_named(tmp_path: Path, edit: str, field: str, words: str) -> None:
    path = _write(tmp_path, _broken(edit))
    result = run_cli("compare", path)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"tidgap: error: {path}: {field}: ")
    assert words in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("name", MEM_CASES)
def test_search_refuses_a_problem_no_flush_plan_fits_and_writes_nothing(
    tmp_path: Path, name: str
) -> None:
    """The ``_mem`` cases' stage 0 cannot hold the whole batch: a flush search must not
    return a plan over the limit (model.md, Memory)."""
    problem = _write(tmp_path, case_named(name)["problem"])
    out = tmp_path / "plan.json"
    args = ("--generations", "3", "--schedule", "flush", "--out", str(out))
    result = run_cli("search", problem, *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"tidgap: error: {problem}: stages[0].memory_limit: ")
    assert "no flush plan fits" in result.stderr and result.stderr.count("\n") == 1
    assert not out.exists()


def test_search_within_a_generous_memory_limit_returns_a_plan_within_it(tmp_path: Path) -> None:
    document = case_named("tiny7_1_mem")["problem"]
    stages = document["stages"]
    stages[0]["memory_limit"] = stages[0]["activation_bytes"] * document["batch_size"]
    problem = _write(tmp_path, document)
    out = tmp_path / "plan.json"
    assert run_cli("search", problem, "--generations", "3", "--out", str(out)).exit_code == 0
    evaluated = json_output(run_cli("evaluate", problem, str(out), "--json"))
    assert evaluated["over_memory_limit"] == []


@pytest.mark.parametrize("name", MEM_CASES)
def test_a_windowed_search_plans_within_a_limit_no_flush_plan_meets(
    tmp_path: Path, name: str
) -> None:
    """Where no flush plan fits stage 0, the windowed search (the default) starts backwards
    early and returns a plan within every stage's limit, checked by ``evaluate``."""
    problem = _write(tmp_path, case_named(name)["problem"])
    out = tmp_path / "plan.json"
    result = run_cli("search", problem, "--generations", "5", "--out", str(out))
    assert result.exit_code == 0, result.stderr
    evaluated = json_output(run_cli("evaluate", problem, str(out), "--json"))
    assert evaluated["over_memory_limit"] == []
    assert "order" in json.loads(out.read_text())


def test_a_limit_met_exactly_is_within_it_despite_rounding(tmp_path: Path) -> None:
    """17 samples of 3.7 bytes are 62.9 bytes, at the limit (model.md: at the limit is
    within it), though the floating-point product is 62.900000000000006: evaluate said the
    stage was over, and a flush search refused the problem, 'above its memory_limit 62.9'."""
    from tidgap.optimize.limits import held_within

    assert 17 * 3.7 > 62.9  # the rounding this is about
    assert held_within(62.9, 3.7, 17) == 17
    assert held_within(62.9, 3.7 + 1e-9, 17) == 16
    affine = {"affine": {"base": 5, "per_sample": 0.1}}
    stage = {"forward": affine, "backward": affine, "activation_bytes": 3.7, "memory_limit": 62.9}
    problem = _write(tmp_path, {"format": "tidgap.problem/1", "batch_size": 17, "stages": [stage]})
    plan = {"format": "tidgap.plan/1", "forward": [[17]], "backward": [[17]]}
    plan = _write(tmp_path, plan, "plan.json")
    document = json_output(run_cli("evaluate", problem, plan, "--json"))
    assert document["over_memory_limit"] == []
    searched = run_cli("search", problem, "--schedule", "flush", "--generations", "1", "--quiet")
    assert searched.exit_code == 0, searched.stderr
