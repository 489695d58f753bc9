"""Exports: PyTorch's compute-only CSV (checked by the rules its ``_load_csv`` enforces),
the microbatch sidecar, the same-partition plan and the JSON schedule."""

from __future__ import annotations

import csv
import json
import os
import re
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import case_id, flush_searchable_cases
from tests.support.cli_helpers import (
    case_named,
    describe,
    golden_cases,
    plan_document,
    run_cli,
    write_json,
)
from tests.support.golden_ordered import (
    ordered_document,
    ordered_entry,
    ordered_params,
    ordered_plan,
)
from tests.support.strategies import ordered_plans, plans, problems
from tidgap import Plan, Problem, check_plan, evaluate, load_plan
from tidgap.analysis.exhaustive import compositions
from tidgap.analysis.search_summary import best_rival
from tidgap.model.fileio import read_json
from tidgap.optimize.driver import search
from tidgap.outputs.exports import (
    common_refinement,
    equal_refinement,
    lowered_order,
    lowered_plan,
    pytorch_csv,
    pytorch_rivals,
    pytorch_rows,
    schedule_document,
)
from tidgap.runtime.pricing import run_evaluation
from tidgap.schedules.baselines import (
    BaselineResult,
    best_baselines,
    feasible_microbatch_counts,
    gpipe,
    one_f_one_b,
)
from tidgap.schedules.families import SCHEDULES, family_of, plan_timeline
from tidgap.schedules.ir import flush_order, holder, one_f_one_b_order, prefix_sums

PROPERTY = settings(max_examples=120, deadline=None, derandomize=True, database=None)
#: ``torch.distributed.pipelining.schedules._action_regex``: ``[stage][type][microbatch]``.
ACTION = re.compile(r"(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)")


def load_compute_only_csv(text: str, num_stages: int, num_microbatches: int) -> dict[int, list]:
    """Parse a compute-only schedule CSV and check what PyTorch's ``_load_csv`` checks
    (``_validate_schedule``; an empty cell is an idle step), that its lowering to sends and
    receives cannot deadlock (``_add_send_recv``), and that ``PipelineScheduleMulti``'s
    lockstep columns hold (:func:`_check_lockstep`). Returns ``{rank: [(stage, type,
    microbatch), ...]}``, the actions in order without the idle steps."""
    columns: dict[int, dict[tuple[int, str, int], int]] = {}
    for rank, row in enumerate(csv.reader(text.splitlines())):
        columns[rank] = {}
        for column, cell in enumerate(row):
            if not cell.strip():
                continue
            match = ACTION.fullmatch(cell.strip())
            assert match, f"not an action: {cell!r}"
            stage, kind, microbatch = match.groups()
            assert kind in ("F", "B"), f"not a compute-only action: {cell}"
            columns[rank][(int(stage), kind, int(microbatch))] = column
    actions = {rank: list(row) for rank, row in columns.items()}
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
    _check_lockstep(columns, num_stages)
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


def _check_lockstep(columns: dict[int, dict[tuple[int, str, int], int]], num_stages: int) -> None:
    """``PipelineScheduleMulti._step_microbatches``: in column ``t`` a rank runs its action,
    then exchanges what its neighbours' actions of column ``t`` send it, so an action's
    input must come from an earlier column (a forward's from the previous stage's forward
    of its microbatch, a backward's from the next stage's backward)."""
    column_of = {action: column for row in columns.values() for action, column in row.items()}
    for (stage, kind, microbatch), column in column_of.items():
        source = stage - 1 if kind == "F" else stage + 1
        if 0 <= source < num_stages:
            assert column_of[(source, kind, microbatch)] < column, (
                f"{stage}{kind}{microbatch} in column {column}, not after its input"
            )


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
    sizes = [[1] * count] * stages
    for order in (flush_order(sizes, sizes), one_f_one_b_order(stages, count)):
        actions = load_compute_only_csv(pytorch_csv(order), stages, count)
        assert actions[0][:2] == [(0, "F", 0), (0, "F", 1)] or count == 1
        assert [cell for row in actions.values() for cell in row if cell[0] != row[0][0]] == []


def test_flush_csv_is_every_forward_then_every_backward() -> None:
    """A flush plan's CSV: row ``s`` holds ``sF0 .. sF{n-1}`` then ``sB0 .. sB{n-1}``."""
    sizes = [[2, 1, 3]] * 2
    assert pytorch_csv(flush_order(sizes, sizes)) == (
        "0F0,0F1,0F2,,,0B0,0B1,0B2\n,1F0,1F1,1F2,1B0,1B1,1B2\n"
    )


def test_lockstep_columns_of_1f1b() -> None:
    """1F1B(3) on 2 stages: stage 0's backwards come a column after stage 1's; each action in
    the earliest column its input and its stage's previous action allow."""
    assert pytorch_rows(one_f_one_b_order(2, 3)) == [
        ["0F0", "0F1", "", "0B0", "0F2", "0B1", "", "0B2"],
        ["", "1F0", "1B0", "1F1", "1B1", "1F2", "1B2"],
    ]


def _coarse_letters(plan: Plan, lowered: Plan, s: int) -> str:
    """Stage ``s``'s lowered order read back on ``plan``'s own microbatches: each run of
    parts of one microbatch of ``plan`` counted once (the part's last sample says which)."""
    letters, last = [], None
    for action in lowered.stage_order().actions(s):
        sizes, own = (
            (lowered.forward[s], plan.forward[s])
            if action.op == "F"
            else (lowered.backward[s], plan.backward[s])
        )
        sample = prefix_sums(sizes)[action.microbatch + 1]
        coarse = (action.op, holder(prefix_sums(own), sample))
        if coarse != last:
            letters.append(action.op)
        last = coarse
    return "".join(letters)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_lowering_keeps_the_order_and_stays_valid(problem: Problem, data: st.DataObject) -> None:
    """Each microbatch of an ordered plan becomes consecutive parts in its place: read back,
    the order is the plan's; the lowered plan passes every rule (never needs a repair) and
    its CSV passes PyTorch's checks."""
    plan = data.draw(ordered_plans(problem))
    lowered = lowered_plan(plan)
    check_plan(lowered, problem)
    sizes = common_refinement(plan)
    assert lowered.forward == lowered.backward == [sizes] * problem.num_stages
    assert lowered.stage_order() == lowered_order(plan, sizes)
    for s in range(problem.num_stages):
        assert _coarse_letters(plan, lowered, s) == plan.order[s]
    load_compute_only_csv(pytorch_csv(lowered.stage_order()), problem.num_stages, len(sizes))


@PROPERTY
@given(problem=problems(), data=st.data())
def test_a_flush_plan_lowers_to_a_flush_plan(problem: Problem, data: st.DataObject) -> None:
    plan = data.draw(plans(problem))
    lowered = lowered_plan(plan)
    assert lowered.order is None and lowered.windows is None
    assert lowered.stage_order() == lowered_order(plan, common_refinement(plan))


def test_lowered_order_example() -> None:
    """Stage 0 runs ``F1 B1 F2 B2`` on ``[4, 4]``; the refinement ``[2, 2, 2, 2]`` (stage 1's
    cuts) makes each of its microbatches two parts."""
    plan = Plan.of([[4, 4], [2, 2, 2, 2]], [[4, 4], [2, 2, 2, 2]], order=["FBFB", "FBFBFBFB"])
    assert lowered_order(plan, [2, 2, 2, 2]).stages == ("FFBBFFBB", "FBFBFBFB")


def test_the_checker_can_fail() -> None:
    with pytest.raises(AssertionError, match="before its forward"):
        load_compute_only_csv("0B0,0F0\n", 1, 1)
    with pytest.raises(AssertionError, match="forwards of stage"):
        load_compute_only_csv("0F0,0B0\n1F0,1B0\n", 2, 2)
    with pytest.raises(AssertionError, match="deadlocks"):
        load_compute_only_csv("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n", 2, 2)
    with pytest.raises(AssertionError, match="not a compute-only"):
        load_compute_only_csv("0F0,0SEND_F0,0B0\n", 1, 1)
    with pytest.raises(AssertionError, match="1F0 in column 0, not after its input"):
        load_compute_only_csv("0F0,,0B0\n1F0,1B0\n", 2, 1)
    with pytest.raises(AssertionError, match="0B0 in column 2, not after its input"):
        load_compute_only_csv("0F0,,0B0\n,1F0,1B0\n", 2, 1)


def _files(tmp_path: Path, name: str, index: int = 0) -> tuple[Path, Path, dict[str, Any]]:
    case = case_named(name)
    problem = write_json(tmp_path / "problem.json", case["problem"])
    plan = write_json(tmp_path / "plan.json", plan_document(case, index))
    return problem, plan, case


def _check_warning(result: Any, lowered: float, rival: BaselineResult, unit: str) -> None:
    """stderr holds one warning line, with both times, the ratio and the PyTorch schedule
    that runs ``rival``, iff ``lowered`` is slower than ``rival``."""
    if lowered <= rival.iteration_time:
        assert result.stderr == ""
        return
    (line,) = result.stderr.splitlines()
    label = SCHEDULES[rival.schedule].label
    assert line.startswith("tidgap: warning: ")
    for shown in (
        f"{lowered:.6g} {unit}",
        f"{lowered / rival.iteration_time:.2f}x",
        f"the {label}'s {rival.iteration_time:.6g} {unit} ({rival.microbatches} microbatches)",
        f"(Schedule{label}, n_microbatches={rival.microbatches})",
    ):
        assert shown in line, (shown, line)


@pytest.mark.parametrize("sizes", ["equal", "common", None])
@pytest.mark.parametrize("name", [case["problem"]["name"] for case in golden_cases()])
def test_export_pytorch_csv(tmp_path: Path, name: str, sizes: str | None) -> None:
    """The CSV round-trips through the checker; the sidecar's microbatches are the chosen
    refinement (equal by default) and cover the batch, and its predicted times are the
    model's, for the plan and for its lowering; stderr holds one warning line iff the
    lowering is slower than the best GPipe PyTorch runs as is (files written and exit 0
    either way)."""
    problem_path, plan_path, case = _files(tmp_path, name)
    out = tmp_path / "schedule.csv"
    chosen = [] if sizes is None else ["--microbatch-sizes", sizes]
    result = run_cli(
        "export",
        str(problem_path),
        str(plan_path),
        "--to",
        "pytorch-csv",
        "--out",
        str(out),
        *chosen,
    )
    assert result.exit_code == 0, describe(result)
    sidecar = json.loads((tmp_path / "schedule.microbatches.json").read_text(encoding="utf-8"))
    problem = Problem.from_dict(case["problem"])
    plan = load_plan(plan_path, problem)
    count = sidecar["n_microbatches"]
    load_compute_only_csv(out.read_text(encoding="utf-8"), problem.num_stages, count)
    refinement = common_refinement(plan) if sizes == "common" else equal_refinement(plan)
    sizes_written = [entry["size"] for entry in sidecar["microbatches"]]
    assert sizes_written == refinement and sum(sizes_written) == problem.batch_size
    assert [entry["slice"] for entry in sidecar["microbatches"]] == [
        [low, high] for low, high in pairwise(prefix_sums(refinement))
    ]
    first_samples = [entry["samples"][0] - 1 for entry in sidecar["microbatches"]]
    assert first_samples == prefix_sums(refinement)[:-1]
    lowered = evaluate(problem, lowered_plan(plan, refinement))
    assert sidecar["predicted"]["lowered"] == lowered.as_dict()
    assert sidecar["predicted"]["plan"] == evaluate(problem, plan).as_dict()
    assert sidecar["schedule_csv"] == "schedule.csv"
    assert f"{lowered.iteration_time:.6g}" in result.stdout
    rival = pytorch_rivals(problem)["gpipe"]
    assert rival is not None
    _check_warning(result, lowered.iteration_time, rival, problem.time_unit)
    assert ("--to same-partition" in result.stderr) == (result.stderr != "")


def test_a_sidecar_names_a_csv_whose_name_is_not_utf8_so_that_it_reads_back(
    tmp_path: Path,
) -> None:
    """``schedule_csv`` held a lone surrogate (Python's reading of the byte 0xff), which
    tidgap's own reader refuses; now U+FFFD, as ``sweep`` writes such names."""
    problem_path, plan_path, _ = _files(tmp_path, golden_cases()[0]["problem"]["name"])
    out = tmp_path / os.fsdecode(b"c\xff.csv")
    args = [str(problem_path), str(plan_path), "--to", "pytorch-csv", "--out", str(out)]
    result = run_cli("export", *args)
    assert result.exit_code == 0, describe(result)
    sidecar = read_json(str(out.with_suffix(".microbatches.json")))
    assert sidecar["schedule_csv"] == "c\ufffd.csv"


def test_a_csv_to_a_stream_is_refused_for_want_of_a_place_for_the_sidecar(
    tmp_path: Path,
) -> None:
    """``--out /dev/stdout`` put ``/dev/stdout.microbatches.json`` into ``/dev``."""
    problem_path, plan_path, _ = _files(tmp_path, golden_cases()[0]["problem"]["name"])
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    args = [str(problem_path), str(plan_path), "--to", "pytorch-csv", "--out", str(fifo)]
    result = run_cli("export", *args)
    assert result.exit_code == 2, describe(result)
    assert result.stderr.startswith("tidgap: error: --out: is a stream, not a file: the ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "plan.json", "problem.json"]


def test_export_of_one_microbatch_says_so_in_the_singular(tmp_path: Path) -> None:
    """A plan of one microbatch a stage lowered to "1 microbatches of 8 samples"."""
    case = golden_cases()[0]
    problem = Problem.from_dict(case["problem"])
    whole = [[problem.batch_size]] * problem.num_stages
    document = {"format": "tidgap.plan/1", "forward": whole, "backward": whole}
    plan = write_json(tmp_path / "plan.json", document)
    problem_path = write_json(tmp_path / "problem.json", case["problem"])
    out = str(tmp_path / "one.csv")
    result = run_cli("export", str(problem_path), str(plan), "--to", "pytorch-csv", "--out", out)
    assert result.exit_code == 0, describe(result)
    shown = f"one partition of 1 microbatch of {problem.batch_size} samples"
    assert shown in result.stdout, result.stdout


def test_equal_refinement() -> None:
    """The common refinement ``[2, 1, 1, 4]`` cut into parts of its greatest common divisor."""
    plan = Plan.of([[4, 4], [2, 6]], [[8], [3, 5]])
    assert equal_refinement(plan) == [1] * 8
    plan = Plan.of([[4, 4], [2, 6]], [[8], [4, 4]])
    assert equal_refinement(plan) == [2] * 4 and common_refinement(plan) == [2, 2, 4]


@PROPERTY
@given(problem=problems(), data=st.data())
def test_equal_refinement_refines_and_fits(problem: Problem, data: st.DataObject) -> None:
    plan = data.draw(ordered_plans(problem))
    sizes = equal_refinement(plan)
    assert len(set(sizes)) == 1 and set(prefix_sums(common_refinement(plan))) <= set(
        prefix_sums(sizes)
    )
    lowered = lowered_plan(plan, sizes)
    check_plan(lowered, problem)
    load_compute_only_csv(pytorch_csv(lowered.stage_order()), problem.num_stages, len(sizes))


def test_pytorch_rivals_are_the_baselines_pytorch_runs() -> None:
    """Of the baselines, those whose count divides the batch's units (equal microbatches),
    1F1B with at least as many microbatches as stages; each the fastest such, timed as
    tidgap times that baseline."""
    for case in golden_cases():
        problem = Problem.from_dict(case["problem"])
        rivals = pytorch_rivals(problem)
        units, stages = problem.num_units, problem.num_stages
        counts = [m for m in feasible_microbatch_counts(problem) if units % m == 0]
        for name, time, fewest in (("gpipe", gpipe, 1), ("1f1b", one_f_one_b, stages)):
            allowed = [m for m in counts if m >= fewest]
            rival = rivals[name]
            if not allowed:
                assert rival is None
                continue
            assert rival is not None and rival.microbatches in allowed
            assert rival.iteration_time == min(time(problem, m) for m in allowed)
            assert rival.iteration_time >= case["best_baselines"][name]["iteration_time"] - 1e-9
    tiny = Problem.from_dict(case_named("tiny7_3")["problem"])  # 5 samples on 4 stages
    assert pytorch_rivals(tiny)["1f1b"].microbatches == 5  # type: ignore[union-attr]


def test_some_golden_lowerings_warn_and_some_do_not() -> None:
    """Both branches of :func:`test_export_pytorch_csv` are taken."""
    slower = set()
    for case in golden_cases():
        problem = Problem.from_dict(case["problem"])
        plan = Plan.of(case["plans"][0]["forward"], case["plans"][0]["backward"])
        lowered = evaluate(problem, lowered_plan(plan, equal_refinement(plan))).iteration_time
        rival = pytorch_rivals(problem)["gpipe"]
        assert rival is not None
        slower.add(lowered > rival.iteration_time)
    assert slower == {True, False}


def _ordered_files(tmp_path: Path, name: str, index: int) -> tuple[Path, Path, Plan, Problem]:
    case = case_named(name)
    entry = ordered_entry(name, index)
    problem = write_json(tmp_path / "problem.json", case["problem"])
    plan = write_json(tmp_path / "plan.json", ordered_document(entry))
    return problem, plan, ordered_plan(entry), Problem.from_dict(case["problem"])


#: A few ordered plans of each shape (order, windows at index 5, the best 1F1B at 6), with
#: and without memory, with 1F1B and with GPipe (tiny7_1) the faster baseline.
#: Golden ordered plans whose order is not the flush order (the flush order written out is a
#: flush plan, exported as one).
ORDERED_EXPORTS = [
    p
    for p in ordered_params(("tiny7_0", "tiny7_1", "med7_1_mem", "onestage7", "bwdcaps7"))
    if p.values[1] in (0, 3, 5, 6)
    and not family_of(ordered_plan(ordered_entry(*p.values))).has_flush
]


def test_ordered_lowerings_warn_against_either_baseline_or_not_at_all() -> None:
    """The branches of :func:`test_export_pytorch_csv_of_an_ordered_plan` are all taken:
    a warning against 1F1B, one against GPipe, and none."""
    seen = set()
    for param in ORDERED_EXPORTS:
        name, index = param.values
        plan = ordered_plan(ordered_entry(name, index))
        problem = Problem.from_dict(case_named(name)["problem"])
        rival = best_rival(pytorch_rivals(problem))
        lowered = lowered_plan(plan, equal_refinement(plan))
        slower = evaluate(problem, lowered).iteration_time > rival.iteration_time
        seen.add(rival.schedule if slower else None)
    assert seen == {"gpipe", "1f1b", None}


@pytest.mark.parametrize(("name", "index"), ORDERED_EXPORTS)
def test_export_pytorch_csv_of_an_ordered_plan(tmp_path: Path, name: str, index: int) -> None:
    """The CSV is the lowered order's actions (passing PyTorch's checks); the sidecar's
    times are the model's, for the plan and for the lowered plan, both shown on stdout;
    stderr warns iff the lowered plan is slower than the best of GPipe and 1F1B that
    PyTorch runs as they are."""
    problem_path, plan_path, plan, problem = _ordered_files(tmp_path, name, index)
    out = tmp_path / "schedule.csv"
    result = run_cli(
        "export", str(problem_path), str(plan_path), "--to", "pytorch-csv", "--out", str(out)
    )
    assert result.exit_code == 0, describe(result)
    lowered = lowered_plan(plan, equal_refinement(plan))
    count = len(lowered.forward[0])
    actions = load_compute_only_csv(out.read_text(encoding="utf-8"), problem.num_stages, count)
    for s in range(problem.num_stages):
        assert [f"{a}{k}{m}" for a, k, m in actions[s]] == [
            str(action) for action in lowered.stage_order().actions(s)
        ]
        assert _coarse_letters(plan, lowered, s) == plan.stage_order().stages[s]
    sidecar = json.loads((tmp_path / "schedule.microbatches.json").read_text(encoding="utf-8"))
    lowered_time = evaluate(problem, lowered)
    assert sidecar["predicted"]["lowered"] == lowered_time.as_dict()
    assert sidecar["predicted"]["plan"] == evaluate(problem, plan).as_dict()
    assert [entry["size"] for entry in sidecar["microbatches"]] == lowered.forward[0]
    assert "in the plan's order" in result.stdout
    for time in (lowered_time.iteration_time, evaluate(problem, plan).iteration_time):
        assert f"{time:.6g} {problem.time_unit}" in result.stdout
    rival = best_rival(pytorch_rivals(problem))
    _check_warning(result, lowered_time.iteration_time, rival, problem.time_unit)
    assert "same-partition" not in result.stderr


# --- same-partition ------------------------------------------------------------------------------


@pytest.mark.parametrize(("index", "key"), [(0, "order"), (5, "windows")])
def test_export_same_partition_refuses_an_ordered_plan(
    tmp_path: Path, index: int, key: str
) -> None:
    """The same-partition search is of flush plans: an ordered plan is refused in one line
    naming its order (or windows), before any search, and nothing is written."""
    problem_path, plan_path, _, _ = _ordered_files(tmp_path, "med7_1", index)
    out = tmp_path / "same.json"
    result = run_cli(
        "export", str(problem_path), str(plan_path), "--to", "same-partition", "--out", str(out)
    )
    assert result.exit_code == 2, describe(result)
    assert result.stdout == ""
    assert result.stderr == (
        f"tidgap: error: {plan_path}: {key}: --to same-partition searches flush plans, and "
        "this plan has an order; --to pytorch-csv keeps the order on one partition\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("case", flush_searchable_cases(), ids=case_id)
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

    S = problem.num_stages
    best_forward = min(
        (
            evaluate(problem, Plan.of([[p * unit for p in f]] * S, [[unit] * U] * S)).forward_end,
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
    # one partition for every stage and both directions: what Megatron and DynaPipe run,
    # and tidgap run at the model's costs (the backward had its own partition before)
    assert all(p == plan.forward[0] for p in plan.forward + plan.backward)
    assert run_evaluation(problem, plan) == evaluate(problem, plan)
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["predicted"] == evaluate(problem, plan).as_dict()
    assert document["search"]["generations"] == 3
    assert document["search"]["backward"] == "mirrored"
    assert plan_of_gpipe_or_faster(problem, evaluate(problem, plan).iteration_time)


def plan_of_gpipe_or_faster(problem: Problem, time: float) -> bool:
    """Whether ``time`` is within the best GPipe's (a same-partition plan of its own)."""
    return time <= best_baselines(problem)["gpipe"].iteration_time


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
    _check_schedule_stages(document, plan, problem)


@pytest.mark.parametrize(("name", "index"), ORDERED_EXPORTS)
def test_export_json_schedule_of_an_ordered_plan(tmp_path: Path, name: str, index: int) -> None:
    """An ordered plan's schedule: each stage's order is the plan's, its operations run in
    that order, at the simulator's times."""
    problem_path, plan_path, plan, problem = _ordered_files(tmp_path, name, index)
    out = tmp_path / "schedule.json"
    result = run_cli(
        "export", str(problem_path), str(plan_path), "--to", "json-schedule", "--out", str(out)
    )
    assert result.exit_code == 0, describe(result)
    document = json.loads(out.read_text(encoding="utf-8"))
    expected = ordered_entry(name, index)["expected"]["iteration_time"]
    assert document["iteration_time"] == pytest.approx(expected, rel=1e-9)
    _check_schedule_stages(document, plan, problem)


def _check_schedule_stages(document: dict[str, Any], plan: Plan, problem: Problem) -> None:
    """Per stage: the order's letters, operations in that order without overlap, their
    sizes the plan's, and the sends of each direction."""
    for s, stage in enumerate(document["stages"]):
        ops = stage["operations"]
        assert stage["order"] == plan.stage_order().stages[s]
        assert "".join(op["op"][0].upper() for op in ops if op["op"] != "tail") == stage["order"]
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
        ["--to", "json-schedule", "--out", "x.csv", "--microbatch-sizes", "equal"],
        ["--to", "pytorch-csv", "--out", "x.csv", "--microbatch-sizes", "half"],
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


def test_a_batch_of_a_billion_exports_in_little_memory(tmp_path: Path) -> None:
    """The PyTorch rivals listed every feasible count (10^9 of them: out of memory under a
    6 GB address space, and the OOM killer without one); now the divisors, and a problem
    with too many units to time its baselines is exported with a warning saying so."""
    import resource
    import subprocess
    import sys

    problem = tmp_path / "big.json"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidgap",
            "synth",
            "-s",
            "2",
            "-b",
            "1000000000",
            "--out-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    (tmp_path / "synth-0.json").rename(problem)
    sizes = [250_000_000] * 4
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"format": "tidgap.plan/1", "forward": [sizes] * 2, "backward": [sizes] * 2})
    )

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    out = tmp_path / "p.csv"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidgap",
            "export",
            str(problem),
            str(plan),
            "--to",
            "pytorch-csv",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limited,
    )
    assert done.returncode == 0, done.stderr
    assert "too many units (1000000000) to time them" in done.stderr
    assert out.read_text(encoding="utf-8").startswith("0F0,0F1,0F2,0F3")
