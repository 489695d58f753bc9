"""``tidgap export --to pytorch-csv`` run by PyTorch itself: each exported CSV loads into
``torch.distributed.pipelining`` and one ``step()`` on gloo processes gives the gradients of
a whole-batch step (float64), on ``PipelineScheduleMulti`` (which runs the rows' columns in
lockstep) and on ``_PipelineScheduleRuntime``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_helpers import describe, run_cli, write_json
from tests.support.golden_ordered import ordered_document, ordered_entry
from tidgap.schedules.baselines import one_f_one_b_plan

pytest.importorskip("torch.distributed.pipelining")

from tests.outputs.test_exports import _files  # noqa: E402
from tidgap import Problem  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: Gradients of float64 stages summed in another order: this close, not equal.
TOLERANCE = 1e-12


def run_ranks(csv_path: Path, schedule: str, stages: int, tmp_path: Path) -> list[float]:
    """Each rank's largest relative gradient difference (:mod:`tests.support.pipelining_rank`)."""
    store = tmp_path / f"store-{schedule}"
    sidecar = csv_path.with_suffix(".microbatches.json")
    arguments = [str(csv_path), str(sidecar), schedule]
    ranks = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.pipelining_rank", *arguments]
            + [str(rank), str(stages), str(store)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(stages)
    ]
    differences = []
    for process in ranks:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-2000:]
        differences.append(json.loads(out.strip().splitlines()[-1])["difference"])
    return differences


def export(problem: Path, plan: Path, out: Path) -> None:
    result = run_cli("export", str(problem), str(plan), "--to", "pytorch-csv", "--out", str(out))
    assert result.exit_code == 0, describe(result)


@pytest.mark.parametrize("schedule", ["multi", "runtime"])
def test_a_flush_plan_of_several_sizes_runs_in_pytorch(tmp_path: Path, schedule: str) -> None:
    """commbound7's plan cuts the batch into parts of 1 and 2 samples: lowered to equal
    microbatches, PyTorch's stages run it, with a whole-batch step's gradients."""
    problem, plan, case = _files(tmp_path, "commbound7")
    export(problem, plan, tmp_path / "flush.csv")
    stages = len(case["problem"]["stages"])
    assert max(run_ranks(tmp_path / "flush.csv", schedule, stages, tmp_path)) < TOLERANCE


@pytest.mark.parametrize("schedule", ["multi", "runtime"])
def test_an_ordered_plan_runs_in_pytorch(tmp_path: Path, schedule: str) -> None:
    """An ordered golden plan of 3 stages (forwards and backwards interleaved differently on
    each stage) runs in its lowered order with a whole-batch step's gradients."""
    problem, _, case = _files(tmp_path, "bwdcaps_tiny7")
    plan = write_json(
        tmp_path / "ordered.json", ordered_document(ordered_entry("bwdcaps_tiny7", 0))
    )
    export(problem, plan, tmp_path / "ordered.csv")
    stages = len(case["problem"]["stages"])
    assert max(run_ranks(tmp_path / "ordered.csv", schedule, stages, tmp_path)) < TOLERANCE


def test_one_f_one_b_runs_in_lockstep(tmp_path: Path) -> None:
    """1F1B(4) on 3 stages: the backwards of stage 0 wait for stage 1's in the columns."""
    problem, _, case = _files(tmp_path, "bwdcaps_tiny7")
    document = one_f_one_b_plan(Problem.from_dict(case["problem"]), 3).document()
    plan = write_json(tmp_path / "1f1b.json", document)
    export(problem, plan, tmp_path / "1f1b.csv")
    assert max(run_ranks(tmp_path / "1f1b.csv", "multi", 3, tmp_path)) < TOLERANCE
