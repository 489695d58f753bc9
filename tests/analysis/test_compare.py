"""The comparison rows and table carry each schedule's memory (model.md, Memory): held
samples per stage and, where the problem gives ``activation_bytes``, bytes and the stages
over their limit; ordered plans get their own row; the bound line names flush plans only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import (
    case_named,
    case_names,
    describe,
    json_output,
    plan_document,
    run_cli,
    write_json,
)
from tests.support.golden_ordered import (
    MEMORY_CASES,
    ordered_document,
    ordered_entry,
    ordered_params,
    ordered_plan,
)
from tidgap import Plan, Problem
from tidgap.analysis.compare import ComparisonRow, compare, format_table
from tidgap.model.lists import stage_list
from tidgap.optimize.memory import format_bytes
from tidgap.schedules.baselines import equal_partition
from tidgap.schedules.ir import flush_order

REL = 1e-9


def _memory(problem: dict[str, Any], held: list[int]) -> tuple[list[float], list[int]] | None:
    """Bytes per stage and the stages over their limit, from the problem document."""
    stages = problem["stages"]
    if "activation_bytes" not in stages[0]:
        return None
    used = [h * stage["activation_bytes"] for h, stage in zip(held, stages, strict=True)]
    over = [
        s
        for s, (u, stage) in enumerate(zip(used, stages, strict=True))
        if stage.get("memory_limit") is not None and u > stage["memory_limit"]
    ]
    return used, over


def _assert_memory(row: ComparisonRow, problem: dict[str, Any], held: list[int]) -> None:
    assert row.peak_held == held, row.schedule
    expected = _memory(problem, held)
    if expected is None:
        assert row.peak_memory is None and row.over_memory_limit is None
    else:
        assert row.peak_memory == pytest.approx(expected[0], rel=REL), row.schedule
        assert row.over_memory_limit == expected[1], row.schedule


@pytest.mark.parametrize("name", case_names())
def test_baseline_and_heuristic_rows_carry_their_memory(name: str) -> None:
    """GPipe and the flush heuristics hold the batch on every stage; 1F1B(m) the sum of its
    first ``min(S-s, m)`` microbatches (the golden ``peak_held``); PipeDream nothing."""
    case = case_named(name)
    problem = Problem.from_dict(case["problem"])
    S, B = problem.num_stages, problem.batch_size
    rows = {row.schedule: row for row in compare(problem)}
    m = case["best_baselines"]["1f1b"]["microbatches"]
    sizes = equal_partition(problem, m)
    one_f_one_b = [sum(sizes[: min(S - s, m)]) for s in range(S)]
    assert one_f_one_b == case["best_baselines"]["1f1b"]["peak_held"]
    _assert_memory(rows["1f1b"], case["problem"], one_f_one_b)
    for name_ in ("gpipe", "local greedy", "global DP"):
        _assert_memory(rows[name_], case["problem"], [B] * S)
    pipedream = rows["pipedream"]
    assert (pipedream.peak_held, pipedream.peak_memory, pipedream.over_memory_limit) == (
        None,
        None,
        None,
    )
    assert {row.schedule: row.family for row in rows.values()} == {
        "gpipe": "gpipe",
        "1f1b": "1f1b",
        "pipedream": "pipedream",
        "local greedy": "flush",
        "global DP": "flush",
    }


@pytest.mark.parametrize(("name", "index"), ordered_params())
def test_the_row_of_an_ordered_plan(name: str, index: int) -> None:
    """The plan's row: family ``windowed`` (``flush`` for the flush order written out),
    the golden time, peak_held and memory."""
    entry = ordered_entry(name, index)
    problem = Problem.from_dict(case_named(name)["problem"])
    plan = ordered_plan(entry)
    row = compare(problem, plan)[0]
    expected = entry["expected"]
    flush = plan.stage_order() == flush_order(plan.forward, plan.backward)
    assert (row.schedule, row.family) == ("plan", "flush" if flush else "windowed")
    assert row.iteration_time == pytest.approx(expected["iteration_time"], rel=REL)
    assert row.peak_held == expected["peak_held"]
    if "peak_memory" in expected:
        assert row.peak_memory == pytest.approx(expected["peak_memory"], rel=REL)
    else:
        assert row.peak_memory is None
    assert row.over_memory_limit == expected.get("over_memory_limit")


def _table(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """Header cells and the cells of each row by schedule (cells two or more spaces apart)."""
    header, *rows = [re.split(r" {2,}", line.strip()) for line in text.splitlines()]
    return header, {row[0]: row for row in rows}


@pytest.mark.parametrize(("name", "index"), [*ordered_params(MEMORY_CASES), ("med7_1", 0)])
def test_table_shows_the_most_held_and_the_most_bytes(name: str, index: int) -> None:
    """``peak held`` is the most samples of any stage; ``peak memory`` (only with
    ``activation_bytes``) the most bytes, marked ``over`` when a stage is over its limit;
    PipeDream shows ``-``."""
    case = case_named(name)
    problem = Problem.from_dict(case["problem"])
    rows = compare(problem, ordered_plan(ordered_entry(name, index)))
    header, cells = _table(format_table(rows, problem.time_unit))
    with_bytes = problem.has_memory
    assert header[5:] == (["peak held", "peak memory"] if with_bytes else ["peak held"])
    for row in rows:
        shown = cells[row.schedule][5:]
        if row.peak_held is None:
            assert shown == ["-", "-"] if with_bytes else ["-"]
            continue
        assert shown[0] == str(max(row.peak_held))
        if with_bytes:
            used, over = _memory(case["problem"], row.peak_held)
            named = f" over ({stage_list(over)})" if over else ""
            assert shown[1] == format_bytes(max(used)) + named


def test_the_table_marks_over_the_limit_and_within_it() -> None:
    """tiny7_1_mem's ordered plan 3 holds 5 samples, within stage 0's limit; GPipe holds 10,
    over it."""
    problem = Problem.from_dict(case_named("tiny7_1_mem")["problem"])
    rows = compare(problem, ordered_plan(ordered_entry("tiny7_1_mem", 3)))
    _, cells = _table(format_table(rows, problem.time_unit))
    assert " over" not in cells["plan"][-1]
    assert cells["gpipe"][-1].endswith(" over (stage 0)")  # stage 1 holds the most bytes


def _files(tmp_path: Path, name: str, document: dict[str, Any]) -> tuple[str, str]:
    problem = write_json(tmp_path / "problem.json", case_named(name)["problem"])
    plan = write_json(tmp_path / "plan.json", document)
    return str(problem), str(plan)


@pytest.mark.parametrize("name", MEMORY_CASES)
def test_compare_json_rows_hold_memory_lists(tmp_path: Path, name: str) -> None:
    """``compare --json``: per-stage lists in every row, ``null`` for PipeDream."""
    entry = ordered_entry(name, 5)
    problem, plan = _files(tmp_path, name, ordered_document(entry))
    document = json_output(run_cli("compare", problem, plan, "--json"))
    rows = {row["schedule"]: row for row in document["rows"]}
    assert rows["plan"]["family"] == "windowed"
    assert rows["plan"]["peak_held"] == entry["expected"]["peak_held"]
    assert rows["plan"]["peak_memory"] == pytest.approx(entry["expected"]["peak_memory"])
    assert rows["plan"]["over_memory_limit"] == entry["expected"]["over_memory_limit"]
    S = len(entry["forward"])
    for schedule in ("gpipe", "1f1b", "local greedy", "global DP"):
        assert len(rows[schedule]["peak_held"]) == len(rows[schedule]["peak_memory"]) == S
    assert rows["pipedream"]["peak_held"] is None and rows["pipedream"]["peak_memory"] is None


def _bound_line(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith("lower bound")]
    return line


def test_the_bound_line_names_flush_plans_only(tmp_path: Path) -> None:
    """The lower bound holds for flush plans: a flush PLAN is measured against it, an
    ordered one is not (nor 1F1B, nor PipeDream)."""
    case = case_named("med7_1")
    flush_problem, flush_plan = _files(tmp_path / "flush", "med7_1", plan_document(case))
    ordered_problem, ordered = _files(
        tmp_path / "ordered", "med7_1", ordered_document(ordered_entry("med7_1", 0))
    )
    flush = run_cli("compare", flush_problem, flush_plan)
    other = run_cli("compare", ordered_problem, ordered)
    for result in (flush, other):
        assert result.exit_code == 0, describe(result)
        line = _bound_line(result.stdout)
        assert "gpipe +" in line and "local greedy +" in line and "global DP +" in line
        assert "1f1b" not in line and "pipedream" not in line
    assert "plan +" in _bound_line(flush.stdout)
    assert "plan +" not in _bound_line(other.stdout)
    assert re.search(r"^plan +F ", other.stdout, re.MULTILINE), other.stdout


def test_compare_accepts_a_plan_object_of_either_family() -> None:
    """``compare`` takes flush and ordered plans alike and keeps the first row for them."""
    problem = Problem.from_dict(case_named("tiny7_2")["problem"])
    ones = [[1] * 7] * problem.num_stages  # within every cap (stage 2 takes 1 sample)
    flush = Plan.of(ones, ones)
    ordered = ordered_plan(ordered_entry("tiny7_2", 1))
    assert compare(problem, flush, label="mine")[0].family == "flush"
    assert compare(problem, ordered, label="mine")[0].family == "windowed"


@pytest.mark.parametrize(
    ("values", "significant", "spec"),
    [
        ([7662.55, 7617.0], 6, ".2f"),
        ([4.1762, 4.2011], 5, ".4f"),
        ([123456789.0], 6, ".0f"),
        ([0.0], 6, ".5f"),
        ([9.9e14], 6, ".0f"),
        ([1e15, 3.0], 6, ".6g"),
        ([4.1e299, 1.0], 6, ".6g"),
        ([4.878e-300, 1e-301], 5, ".5g"),
        ([1.5e-8], 5, ".12f"),
        ([1.5e-9], 5, ".5g"),
    ],
)
def test_a_column_shares_one_precision_in_a_readable_form(
    values: list[float], significant: int, spec: str
) -> None:
    from tidgap.analysis.compare import column_format

    assert column_format(values, significant) == spec


def test_huge_times_print_in_exponent_form(tmp_path: Path) -> None:
    """Times near the 1e300 bound print 6 significant digits, not 300 (an audit saw
    600-character rows); the cells are still the --json values rounded."""
    times = {"table": {"sizes": [1, 2], "times": [1e299, 2.4e299]}}
    problem = write_json(
        tmp_path / "huge.json",
        {"format": "tidgap.problem/1", "name": "huge", "batch_size": 2,
         "stages": [{"forward": times, "backward": times, "tail": 1e298}]},
    )  # fmt: skip
    result = run_cli("compare", str(problem))
    assert result.exit_code == 0, describe(result)
    assert max(len(line) for line in result.stdout.splitlines()) < 120, result.stdout
    rows = json_output(run_cli("compare", str(problem), "--json"))["rows"]
    for row in rows:
        line = next(x for x in result.stdout.splitlines() if x.startswith(row["schedule"] + " "))
        time = f"{row['iteration_time']:.6g}"
        assert f" {time} " in line and "e+299" in time, line
