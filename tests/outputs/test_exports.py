"""Exports: PyTorch's compute-only CSV (checked by the rules its ``_load_csv`` enforces),
the microbatch sidecar, the same-partition plan and the JSON schedule."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.cli_helpers import (
    case_named,
    describe,
    golden_cases,
    plan_document,
    run_cli,
    write_json,
)
from tests.support.strategies import plans, problems
from tidgap import Plan, Problem, check_plan, evaluate, load_plan
from tidgap.optimize.driver import search
from tidgap.outputs.exports import common_refinement, lowered_plan, pytorch_csv, schedule_document
from tidgap.schedules.families import plan_timeline
from tidgap.schedules.ir import prefix_sums

PROPERTY = settings(max_examples=120, deadline=None, derandomize=True, database=None)
#: ``torch.distributed.pipelining.schedules._action_regex``: ``[stage][type][microbatch]``.
ACTION = re.compile(r"(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)")


def load_compute_only_csv(text: str, num_stages: int, num_microbatches: int) -> dict[int, list]:
    """Parse a compute-only schedule CSV and check what PyTorch's ``_load_csv`` checks
    (``_validate_schedule``), plus that its lowering to sends and receives cannot deadlock
    (``_add_send_recv``). Returns ``{rank: [(stage, type, microbatch), ...]}``."""
    actions = {}
    for rank, row in enumerate(csv.reader(text.splitlines())):
        parsed = []
        for cell in row:
            match = ACTION.fullmatch(cell.strip())
            assert match, f"not an action: {cell!r}"
            stage, kind, microbatch = match.groups()
            assert kind in ("F", "B"), f"not a compute-only action: {cell}"
            parsed.append((int(stage), kind, int(microbatch)))
        actions[rank] = parsed
    assert len(actions) == num_stages, "one row per rank"
    owner: dict[int, int] = {}
    seen: dict[int, dict[str, set[int]]] = {s: {"F": set(), "B": set()} for s in range(num_stages)}
    for rank, row in actions.items():
        for stage, kind, microbatch in row:
            assert owner.setdefault(stage, rank) == rank, f"stage {stage} on two ranks"
            if kind == "B":
                assert microbatch in seen[stage]["F"], f"{stage}B{microbatch} before its forward"
            seen[stage][kind].add(microbatch)
    for stage, done in seen.items():
        assert done["F"] == set(range(num_microbatches)), f"forwards of stage {stage}"
        assert done["B"] == set(range(num_microbatches)), f"backwards of stage {stage}"
    _check_lowering(actions, owner, num_stages)
    return actions


def _check_lowering(actions: dict[int, list], owner: dict[int, int], num_stages: int) -> None:
    """``_add_send_recv``: ranks take turns; a rank runs its next action once its input was
    sent (a forward needs the previous stage's forward, a backward the next stage's)."""
    done: set[tuple[int, str, int]] = set()
    queues = {rank: list(row) for rank, row in actions.items()}
    while any(queues.values()):
        progressed = False
        for rank in sorted(queues):
            if not queues[rank]:
                continue
            stage, kind, microbatch = queues[rank][0]
            source = stage - 1 if kind == "F" else stage + 1
            if 0 <= source < num_stages and (source, kind, microbatch) not in done:
                continue
            done.add(queues[rank].pop(0))
            progressed = True
        assert progressed, "the schedule deadlocks"


# --- the common refinement -----------------------------------------------------------------------


@PROPERTY
@given(problem=problems(), data=st.data())
def test_common_refinement_refines_every_stage(problem: Problem, data: st.DataObject) -> None:
    plan = data.draw(plans(problem))
    sizes = common_refinement(plan)
    cuts = set(prefix_sums(sizes))
    for partition in plan.forward + plan.backward:
        assert set(prefix_sums(partition)) <= cuts
    assert cuts == {p for partition in plan.forward + plan.backward for p in prefix_sums(partition)}
    check_plan(lowered_plan(plan), problem)  # multiples of unit, within every cap


def test_common_refinement_example() -> None:
    plan = Plan.of([[4, 4], [2, 6]], [[8], [3, 5]])
    assert common_refinement(plan) == [2, 1, 1, 4]


# --- pytorch-csv ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("stages", "count"), [(1, 1), (2, 3), (4, 8), (8, 5)])
def test_csv_passes_pytorchs_rules(stages: int, count: int) -> None:
    actions = load_compute_only_csv(pytorch_csv(stages, count), stages, count)
    assert actions[0][:2] == [(0, "F", 0), (0, "F", 1)] or count == 1
    assert [cell for row in actions.values() for cell in row if cell[0] != row[0][0]] == []


def test_the_checker_can_fail() -> None:
    with pytest.raises(AssertionError, match="before its forward"):
        load_compute_only_csv("0B0,0F0\n", 1, 1)
    with pytest.raises(AssertionError, match="forwards of stage"):
        load_compute_only_csv("0F0,0B0\n1F0,1B0\n", 2, 2)
    with pytest.raises(AssertionError, match="deadlocks"):
        load_compute_only_csv("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n", 2, 2)
    with pytest.raises(AssertionError, match="not a compute-only"):
        load_compute_only_csv("0F0,0SEND_F0,0B0\n", 1, 1)


def _files(tmp_path: Path, name: str, index: int = 0) -> tuple[Path, Path, dict[str, Any]]:
    case = case_named(name)
    problem = write_json(tmp_path / "problem.json", case["problem"])
    plan = write_json(tmp_path / "plan.json", plan_document(case, index))
    return problem, plan, case


@pytest.mark.parametrize("name", [case["problem"]["name"] for case in golden_cases()])
def test_export_pytorch_csv(tmp_path: Path, name: str) -> None:
    """The CSV round-trips through the checker; the sidecar's microbatches cover the batch
    and its predicted times are the model's, for the plan and for its lowering; stderr holds
    one warning line, with both times and the ratio, iff the lowering is slower than the best
    GPipe (files written and exit 0 either way)."""
    problem_path, plan_path, case = _files(tmp_path, name)
    out = tmp_path / "schedule.csv"
    result = run_cli(
        "export", str(problem_path), str(plan_path), "--to", "pytorch-csv", "--out", str(out)
    )
    assert result.exit_code == 0, describe(result)
    sidecar = json.loads((tmp_path / "schedule.microbatches.json").read_text(encoding="utf-8"))
    problem = Problem.from_dict(case["problem"])
    plan = load_plan(plan_path, problem)
    count = sidecar["n_microbatches"]
    load_compute_only_csv(out.read_text(encoding="utf-8"), problem.num_stages, count)
    sizes = [entry["size"] for entry in sidecar["microbatches"]]
    assert sizes == common_refinement(plan) and sum(sizes) == problem.batch_size
    assert [entry["slice"] for entry in sidecar["microbatches"]] == [
        [low, high] for low, high in zip(prefix_sums(sizes), prefix_sums(sizes)[1:], strict=False)
    ]
    assert [entry["samples"][0] - 1 for entry in sidecar["microbatches"]] == prefix_sums(sizes)[:-1]
    lowered = evaluate(problem, lowered_plan(plan))
    assert sidecar["predicted"]["lowered"] == lowered.as_dict()
    assert sidecar["predicted"]["plan"] == evaluate(problem, plan).as_dict()
    assert sidecar["schedule_csv"] == "schedule.csv"
    assert f"{lowered.iteration_time:.6g}" in result.stdout
    gpipe = case["best_baselines"]["gpipe"]
    if lowered.iteration_time > gpipe["iteration_time"]:
        (line,) = result.stderr.splitlines()
        assert line.startswith("tidgap: warning: ") and "--to same-partition" in line
        ratio = lowered.iteration_time / gpipe["iteration_time"]
        for shown in (
            f"{lowered.iteration_time:.6g} {problem.time_unit}",
            f"{gpipe['iteration_time']:.6g} {problem.time_unit}",
            f"{ratio:.2f}x",
            f"({gpipe['microbatches']} microbatches)",
        ):
            assert shown in line, (shown, line)
    else:
        assert result.stderr == ""


def test_some_golden_lowerings_warn_and_some_do_not() -> None:
    """Both branches of :func:`test_export_pytorch_csv` are taken."""
    slower = set()
    for case in golden_cases():
        problem = Problem.from_dict(case["problem"])
        plan = Plan.of(case["plans"][0]["forward"], case["plans"][0]["backward"])
        lowered = evaluate(problem, lowered_plan(plan)).iteration_time
        slower.add(lowered > case["best_baselines"]["gpipe"]["iteration_time"])
    assert slower == {True, False}


# --- same-partition ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", golden_cases(), ids=lambda case: case["problem"]["name"])
def test_same_partition_search(case: dict[str, Any]) -> None:
    """Every stage gets the one partition per direction; never worse than the best GPipe
    (an equal partition is a common one) nor than the seeded lowering."""
    problem = Problem.from_dict(case["problem"])
    lowered = lowered_plan(Plan.of(case["plans"][0]["forward"], case["plans"][0]["backward"]))
    result = search(
        problem, generations=5, population=32, same_partition=True, initial_plans=[lowered]
    )
    check_plan(result.plan, problem)
    assert all(p == result.plan.forward[0] for p in result.plan.forward)
    assert all(p == result.plan.backward[0] for p in result.plan.backward)
    gpipe = case["best_baselines"]["gpipe"]["iteration_time"]
    assert result.evaluation.iteration_time <= gpipe * (1 + 1e-9)
    assert result.evaluation.iteration_time <= evaluate(problem, lowered).iteration_time * (
        1 + 1e-9
    )
    assert result.plan_document()["search"]["same_partition"] is True


def test_same_partition_finds_the_best_common_plan_on_a_tiny_case() -> None:
    """On a tiny case, equal to the best common partition found by enumeration."""
    case = case_named("tiny7_2")
    problem = Problem.from_dict(case["problem"])
    U, unit = problem.num_units, problem.unit
    fcap = min(problem.forward_cap(s) for s in range(problem.num_stages)) // unit
    bcap = min(problem.backward_cap(s) for s in range(problem.num_stages)) // unit

    def compositions(units: int, largest: int) -> list[list[int]]:
        if units == 0:
            return [[]]
        return [
            [p, *rest]
            for p in range(1, min(units, largest) + 1)
            for rest in compositions(units - p, largest)
        ]

    S = problem.num_stages
    best_forward = min(
        (
            evaluate(
                problem, Plan.of([[p * unit for p in f]] * S, [[problem.batch_size]] * S)
            ).forward_end,
            f,
        )
        for f in compositions(U, fcap)
    )[1]
    best = min(
        evaluate(
            problem, Plan.of([[p * unit for p in best_forward]] * S, [[p * unit for p in b]] * S)
        ).iteration_time
        for b in compositions(U, bcap)
    )
    result = search(problem, generations=40, population=64, same_partition=True, backend="numpy")
    assert result.evaluation.iteration_time == pytest.approx(best, rel=1e-9)


def test_export_same_partition(tmp_path: Path) -> None:
    problem_path, plan_path, case = _files(tmp_path, "med7_1")
    out = tmp_path / "same.json"
    result = run_cli(
        "export",
        str(problem_path),
        str(plan_path),
        "--to",
        "same-partition",
        "--out",
        str(out),
        "--generations",
        "3",
    )
    assert result.exit_code == 0, describe(result)
    problem = Problem.from_dict(case["problem"])
    plan = load_plan(out, problem)
    assert all(p == plan.forward[0] for p in plan.forward)
    assert all(p == plan.backward[0] for p in plan.backward)
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["predicted"] == evaluate(problem, plan).as_dict()
    assert document["search"]["generations"] == 3


def test_search_same_partition_option(tmp_path: Path) -> None:
    problem_path, _, case = _files(tmp_path, "bwdcaps7")
    out = tmp_path / "plan.json"
    result = run_cli(
        "search",
        str(problem_path),
        "--same-partition",
        "--generations",
        "3",
        "--out",
        str(out),
        "-q",
    )
    assert result.exit_code == 0, describe(result)
    plan = load_plan(out, Problem.from_dict(case["problem"]))
    assert (
        len({tuple(p) for p in plan.forward}) == 1 and len({tuple(p) for p in plan.backward}) == 1
    )


# --- json-schedule -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny7_0", "med7_1", "onestage7"])
def test_export_json_schedule(tmp_path: Path, name: str) -> None:
    problem_path, plan_path, case = _files(tmp_path, name)
    out = tmp_path / "schedule.json"
    result = run_cli(
        "export", str(problem_path), str(plan_path), "--to", "json-schedule", "--out", str(out)
    )
    assert result.exit_code == 0, describe(result)
    document = json.loads(out.read_text(encoding="utf-8"))
    problem = Problem.from_dict(case["problem"])
    plan = load_plan(plan_path, problem)
    assert document["format"] == "tidgap.schedule/1"
    assert document["iteration_time"] == evaluate(problem, plan).iteration_time
    assert document == json.loads(
        json.dumps(schedule_document(problem, plan_timeline(problem, plan)))
    )
    for s, stage in enumerate(document["stages"]):
        ops = stage["operations"]
        assert [op["size"] for op in ops if op["op"] == "forward"] == plan.forward[s]
        assert [op["size"] for op in ops if op["op"] == "backward"] == plan.backward[s]
        for before, after in zip(ops, ops[1:], strict=False):
            assert before["end"] <= after["start"]
        sends = stage["sends"]
        assert [x["size"] for x in sends if x["op"] == "activations"] == (
            plan.forward[s] if s < problem.num_stages - 1 else []
        )
        assert [x["size"] for x in sends if x["op"] == "gradients"] == (
            plan.backward[s] if s > 0 else []
        )
        assert all(x["to"] == s + (1 if x["op"] == "activations" else -1) for x in sends)


# --- usage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        ["--to", "pytorch-csv", "--out", "x.csv", "--seed", "3"],
        ["--to", "zip", "--out", "x.csv"],
        ["--to", "pytorch-csv"],
        ["--out", "x.csv"],
        ["--to", "json-schedule", "--out", "no/such/folder/x.json"],
    ],
)
def test_export_bad_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    problem_path, plan_path, _ = _files(tmp_path, "med7_1")
    result = run_cli("export", str(problem_path), str(plan_path), *extra)
    assert result.exit_code == 2, describe(result)
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "x.csv").exists()
