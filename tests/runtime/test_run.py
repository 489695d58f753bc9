"""``tidgap run`` end to end: real gloo worker processes (2 stages, 1 thread each) on a tiny
MLP, every kind of plan with its gradients checked, the JSON and trace outputs, bad input
(exit 2, one line, no process started) and failing or hanging workers (exit 1 within the
timeout, every worker gone)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from tests.support.cli_helpers import describe, run_cli, write_json  # noqa: E402
from tests.support.torchrun_env import as_torchrun, tidgap_under_torchrun  # noqa: E402
from tidgap.cli.profile import INSTALL_HINT  # noqa: E402
from tidgap.cli.run import to_run  # noqa: E402
from tidgap.model.errors import InputError  # noqa: E402
from tidgap.model.plan import load_plan  # noqa: E402
from tidgap.model.problem import Problem  # noqa: E402
from tidgap.profiling.synth import synth_problem  # noqa: E402
from tidgap.runtime.job import Job  # noqa: E402
from tidgap.runtime.pricing import run_prediction  # noqa: E402
from tidgap.runtime.report import measured_timeline  # noqa: E402
from tidgap.schedules.baselines import one_f_one_b_plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def model_args(name: str) -> list[str]:
    """``tidgap run``'s model options for :mod:`tests.runtime.pipeline_models`'s ``name``."""
    return ["--model", f"tests.runtime.pipeline_models:{name}", "--input-shape", "6"]


MODEL = model_args("MLP")
QUICK = ["--iterations", "2", "--warmup", "0", "--timeout", "60"]

#: Per kind of plan: forward, backward and order (batch 8, 2 stages).
PLANS: dict[str, dict[str, Any]] = {
    # stage 1's first forward takes stage 0's first chunk and part of its second
    "flush-unequal": {"forward": [[2, 6], [4, 4]], "backward": [[2, 6], [4, 4]]},
    # a backward over several forward chunks; boundaries are forward boundaries
    "ordered-aligned": {
        "forward": [[4, 4], [2, 2, 4]],
        "backward": [[8], [2, 6]],
        "order": ["FFB", "FBFFB"],
    },
    # backward boundaries 2, 3 are not forward boundaries: both stages recompute
    "recompute": {"forward": [[4, 4], [4, 4]], "backward": [[2, 6], [3, 5]]},
}


def problem_document(**source: Any) -> dict[str, Any]:
    """A synthetic 2-stage problem of batch 8 that records the MLP's split at layer 2."""
    document = synth_problem(0, 2, 8, 1, 0.5, "affine", "tiny")
    document["source"] = {"split": {"boundaries": [2]}, **source}
    return document


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    return write_json(tmp_path / "problem.json", problem_document())


def plan_file(folder: Path, name: str, **fields: Any) -> Path:
    return write_json(folder / f"{name}.json", {"format": "tidgap.plan/1", **fields})


@pytest.fixture(autouse=True)
def own_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs make their results folders under ``tmp_path``, so a left-over worker (whose
    command line names its job file there) can be found."""
    folder = tmp_path / "runs"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture(autouse=True)
def cores_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine of a core per stage: on one usable core (``taskset -c 0``) every run
    warns, before its error, that its stages share it, and the tests of one-line errors
    failed there. :func:`test_stages_sharing_a_core_are_warned_of` sets its own count."""
    from tidgap.cli import run_caveats

    monkeypatch.setattr(run_caveats, "usable_cores", lambda: 64)


def workers_under(folder: Path, program: str = "tidgap.runtime.worker") -> list[str]:
    """Command lines of live processes of ``program`` that name ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        line = " ".join(w.decode(errors="replace") for w in words)
        if str(folder) in line and program in line:
            found.append(f"{entry.name}: {line}")
    return found


def run_json(*args: str) -> dict[str, Any]:
    result = run_cli("run", *args, *MODEL, *QUICK, "--check-gradients", "--json")
    assert result.exit_code == 0, describe(result)
    return json.loads(result.stdout)


@pytest.mark.parametrize("kind", sorted(PLANS))
def test_plans_match_one_process(kind: str, problem_file: Path, tmp_path: Path) -> None:
    plan = plan_file(tmp_path, kind, **PLANS[kind])
    document = run_json(str(problem_file), str(plan))
    run = document["run"]
    assert run["max_gradient_relative_difference"] < 1e-4
    assert run["recompute"] == [kind == "recompute"] * 2
    assert len(run["measured"]["iterations"]) == 2
    problem = Problem.from_dict(problem_document())
    priced = run_prediction(problem, load_plan(plan, problem), "run")[0].iteration_time
    assert run["predicted"] == pytest.approx(priced)  # op times as the runtime runs them
    # recomputed forwards and the backward over stage 0's forward chunks of 4 and 4 cost more
    assert (priced > problem_evaluation(problem, plan)) == (kind != "flush-unequal")


@pytest.mark.parametrize("kind", sorted(PLANS))
@pytest.mark.parametrize("model", [("IN_PLACE", "2"), ("LEAKY_IN_PLACE", "3")])
def test_a_stage_that_begins_in_place(
    kind: str, model: tuple[str, str], problem_file: Path, tmp_path: Path
) -> None:
    """Stage 1 begins with ``ReLU(inplace=True)`` on a view (``Unflatten``) of the leaf it
    receives (autograd refused to write it, exit 1): it writes a copy, and the gradients
    are the whole batch's. With ``LeakyReLU`` (twice is not once) at both stages' start,
    a recomputing stage wrote the input it keeps in its forward without grad, and its
    re-run applied the layer again: wrong gradients (0.15 apart)."""
    plan = plan_file(tmp_path, kind, **PLANS[kind])
    in_place = [*model_args(model[0]), "--split", model[1]]
    result = run_cli("run", str(problem_file), str(plan), *in_place, *QUICK, "--check-gradients")
    assert result.exit_code == 0, describe(result)
    assert "): max relative difference" in result.stdout


@pytest.mark.parametrize("kind", sorted(PLANS))
def test_a_first_stage_with_nothing_to_train(kind: str, problem_file: Path, tmp_path: Path) -> None:
    """Stage 0's layers are frozen, so its outputs need no gradient: its backwards are
    empty (autograd refused them: 'element 0 of tensors does not require grad'), and
    stage 1's gradients are the whole batch's."""
    plan = plan_file(tmp_path, kind, **PLANS[kind])
    frozen = model_args("FROZEN_FIRST")
    result = run_cli("run", str(problem_file), str(plan), *frozen, *QUICK, "--check-gradients")
    assert result.exit_code == 0, describe(result)
    assert "): max relative difference" in result.stdout


def test_three_stages_one_f_one_b(tmp_path: Path) -> None:
    """The middle rank receives and sends both ways, with 1F1B's traffic in flight."""
    document = synth_problem(0, 3, 8, 1, 0.5, "affine", "three")
    document["source"] = {"split": {"boundaries": [2, 4]}}
    problem = write_json(tmp_path / "three.json", document)
    plan = one_f_one_b_plan(Problem.from_dict(document), 4).model_dump(exclude_none=True)
    run = run_json(str(problem), str(plan_file(tmp_path, "1f1b", **plan)))["run"]
    assert run["max_gradient_relative_difference"] < 1e-4
    assert len(run["busy"]["measured"]) == 3


def test_gradients_that_differ_exit_1(problem_file: Path, tmp_path: Path) -> None:
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    coupled = model_args("COUPLED")
    result = run_cli("run", str(problem_file), str(plan), *coupled, *QUICK, "--check-gradients")
    assert result.exit_code == 1, describe(result)
    replayed = "train mode, the pipeline's random draws replayed"
    assert f"gradients ({replayed}): max relative difference" in result.stdout
    assert result.stderr.startswith("tidgap: error: run: gradients of plan differ from one")


def test_a_recompute_plan_replays_dropout_and_says_where_it_cannot(
    problem_file: Path, tmp_path: Path
) -> None:
    """Both stages recompute in train mode: stage 0's dropout is replayed per sample,
    stage 1's noise per feature cannot be, and the report says so (its gradients, checked
    again in eval mode for it, still match)."""
    plan = plan_file(tmp_path, "recompute", **PLANS["recompute"])
    model = model_args("DRAWING")
    args = [str(problem_file), str(plan), *model, "--split", "3", *QUICK, "--check-gradients"]
    result = run_cli("run", *args)
    assert result.exit_code == 0, describe(result)
    assert "stage 1 drew its recomputed forwards' random values anew: " in result.stdout
    assert "its first dimension is not the samples" in result.stdout
    assert "stage 0 drew" not in result.stdout
    assert "gradients (eval mode: dropout off; stage 1 (layers 3-5): " in result.stdout
    assert "(the prediction counts the recomputed forwards); random draws, if any, replayed " in (
        result.stdout
    )
    assert "replayed per sample on stage 0\n" in result.stdout  # not on stage 1


def test_the_memory_line_says_where_the_prediction_is_an_upper_bound(tmp_path: Path) -> None:
    """With ``activation_bytes`` the report puts each stage's predicted peak beside the
    measured one; where a stage recomputes it says the prediction (every held sample's
    activations) is an upper bound, and only there."""
    document = problem_document()
    for stage in document["stages"]:
        stage["activation_bytes"] = 4096.0
    problem = write_json(tmp_path / "problem.json", document)
    recompute = plan_file(tmp_path, "recompute", **PLANS["recompute"])
    aligned = plan_file(tmp_path, "aligned", **PLANS["flush-unequal"])
    result = run_cli("run", str(problem), str(recompute), *MODEL, *QUICK, "--compare", str(aligned))
    assert result.exit_code == 0, describe(result)
    memory = [line for line in result.stdout.splitlines() if "held for backward" in line]
    assert len(memory) == 2 and all(" / - " not in line for line in memory)
    assert "stages 0, 1 recompute: they hold their inputs" in memory[0]
    assert "recompute" not in memory[1]


@pytest.mark.parametrize("kind", ["ordered-aligned", "recompute"])
def test_gradients_are_checked_in_train_mode_with_the_pipelines_dropout(
    kind: str, problem_file: Path, tmp_path: Path
) -> None:
    """Dropout on both stages: the reference replays the masks the pipeline's forward
    chunks drew (a recomputing stage replays them too), so train-mode gradients agree to
    float64 rounding; the reference drawing its own masks would be far off."""
    plan = plan_file(tmp_path, kind, **PLANS[kind])
    dropout = model_args("DROPOUT")
    args = [str(problem_file), str(plan), *dropout, "--split", "3", *QUICK, "--float64"]
    result = run_cli("run", *args, "--check-gradients", "--json")
    assert result.exit_code == 0, describe(result)
    run = json.loads(result.stdout)["run"]
    assert run["gradients_checked_in"] == "train"
    assert run["gradient_eval_reason"] is None
    assert run["max_gradient_relative_difference"] < 1e-10


def test_draws_not_per_sample_are_checked_in_eval_mode_and_say_why(
    problem_file: Path, tmp_path: Path
) -> None:
    """No stage recomputes; stage 1's noise per feature cannot be cut into samples for the
    reference, so after the train-mode iteration the ranks agree on eval mode."""
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    model = model_args("DRAWING")
    args = [str(problem_file), str(plan), *model, "--split", "3", *QUICK, "--check-gradients"]
    result = run_cli("run", *args, "--json")
    assert result.exit_code == 0, describe(result)
    run = json.loads(result.stdout)["run"]
    assert run["gradients_checked_in"] == "eval"
    assert run["gradient_eval_reason"].startswith("stage 1 (layers 3-5): ")
    assert "its first dimension is not the samples" in run["gradient_eval_reason"]
    # no stage recomputes: the reference is what cannot replay it (it blamed recomputation)
    assert "or by the gradient check's one-process reference" in run["gradient_eval_reason"]
    assert run["max_gradient_relative_difference"] < 1e-4 and run["redrawn"] == [None, None]


def test_batch_norm_is_checked_in_eval_mode_and_says_why(
    problem_file: Path, tmp_path: Path
) -> None:
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    norm = model_args("BATCH_NORM")
    result = run_cli("run", str(problem_file), str(plan), *norm, *QUICK, "--check-gradients")
    assert result.exit_code == 0, describe(result)
    assert (
        "gradients (eval mode: dropout off; layer 1 (BatchNorm1d) normalises each microbatch "
        "by its own statistics in train mode): max relative difference" in result.stdout
    )


@pytest.mark.parametrize("compared", [False, True])
def test_a_recompute_plan_on_a_batch_norm_stage_is_refused(
    problem_file: Path, tmp_path: Path, compared: bool
) -> None:
    """Recomputed on the backward's chunks, a BatchNorm normalises by other statistics than
    the forward did (the check, in eval mode, could not see it): refused before any
    process starts, naming the plan file and the stage's backward; as a --compare plan
    too. Stage 1 recomputes too but holds no BatchNorm: stage 0 is named."""
    recompute = plan_file(tmp_path, "recompute", **PLANS["recompute"])
    flush = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    plans = [str(flush), "--compare", str(recompute)] if compared else [str(recompute)]
    norm = model_args("BATCH_NORM")
    result = run_cli("run", str(problem_file), *plans, *norm, *QUICK)
    assert result.exit_code == 2, describe(result)
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"tidgap: error: {recompute}: backward[0]: stage 0 recomputes its ")
    assert "layer 1 (BatchNorm1d) normalises by its chunk's statistics in train mode" in line
    assert "--no-recompute" in line and result.stdout == ""
    aligned = plan_file(tmp_path, "aligned", **PLANS["ordered-aligned"])  # no recompute
    result = run_cli("run", str(problem_file), str(aligned), *norm, *QUICK, "--check-gradients")
    assert result.exit_code == 0, describe(result)


def test_float64_is_exact_on_a_recompute_plan_and_warns_of_the_float32_profile(
    problem_file: Path, tmp_path: Path
) -> None:
    plan = plan_file(tmp_path, "recompute", **PLANS["recompute"])
    options = [str(problem_file), str(plan), *MODEL, *QUICK, "--check-gradients", "--float64"]
    result = run_cli("run", *options, "--json")
    assert result.exit_code == 0, describe(result)
    assert "--float64: tidgap profile and calibrate measure float32" in result.stderr
    document = json.loads(result.stdout)
    assert document["float64"] is True
    assert document["gradient_tolerance"] == 1e-10
    assert document["run"]["max_gradient_relative_difference"] < 1e-10


def test_one_f_one_b_json_and_trace(problem_file: Path, tmp_path: Path) -> None:
    problem = Problem.from_dict(problem_document())
    plan = plan_file(tmp_path, "1f1b", **one_f_one_b_plan(problem, 4).model_dump(exclude_none=True))
    trace = tmp_path / "trace.json"
    document = run_json(str(problem_file), str(plan), "--trace", str(trace), "--nproc", "2")
    assert document["problem"] == "tiny" and document["stages"] == 2
    assert document["boundaries"] == [2] and document["baselines"] == []
    assert (document["device"], document["transport"]) == ("cpu", "gloo")  # auto on the CPU
    run = document["run"]
    assert set(run) == {
        "label",
        "time_unit",
        "measured",
        "predicted",
        "error_percent",
        "busy",
        "recompute",
        "redrawn",
        "max_gradient_relative_difference",
        "gradients_checked_in",
        "gradient_eval_reason",
        "replay",
        "memory",
    }
    assert run["replay"] is None and run["redrawn"] == [None, None]
    held = run["memory"]["measured"]
    assert len(held) == 2 and min(held) > 0 and run["memory"]["predicted"] is None
    measured = run["measured"]
    assert 0 < measured["min"] <= measured["median"] <= measured["max"]
    assert run["predicted"] == pytest.approx(problem_evaluation(problem, plan))
    assert run["error_percent"] == pytest.approx(100 * (measured["median"] / run["predicted"] - 1))
    assert [len(run["busy"][key]) for key in ("measured", "predicted")] == [2, 2]
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {"plan predicted", "plan measured"}
    steps = [e for e in events if e["ph"] == "X" and e["pid"] == 2 and e["cat"] != "transfer"]
    assert len(steps) == 2 * (4 + 4)  # every forward and backward of both stages, measured


def problem_evaluation(problem: Problem, plan: Path) -> float:
    from tidgap.schedules.families import evaluate

    return evaluate(problem, load_plan(plan, problem)).iteration_time


def test_replay_evaluates_the_plan_with_the_runs_own_op_times(
    problem_file: Path, tmp_path: Path
) -> None:
    """The replay is the model's time with this run's median op and transfer times, with
    each iteration's own, and with each op's drawn from them: figures of their own, beside
    the prediction, and printed in the text."""
    problem = Problem.from_dict(problem_document())
    plan = plan_file(tmp_path, "1f1b", **one_f_one_b_plan(problem, 4).model_dump(exclude_none=True))
    run = run_json(str(problem_file), str(plan), "--replay")["run"]
    replay = run["replay"]
    assert replay["predicted"] > 0 and replay["predicted"] != run["predicted"]
    assert replay["error_percent"] == pytest.approx(
        100 * (run["measured"]["median"] / replay["predicted"] - 1)
    )
    each = replay["per_iteration"]
    measured = run["measured"]["iterations"]
    assert len(each["predicted"]) == len(measured) == 2 and min(each["predicted"]) > 0
    assert each["error_percent"] == pytest.approx(
        [100 * (got / want - 1) for got, want in zip(measured, each["predicted"], strict=True)]
    )
    assert each["median_error_percent"] == pytest.approx(sum(each["error_percent"]) / 2)
    drawn = replay["drawn"]
    assert drawn["predicted"] > 0  # its bounds: test_calibrate.py
    assert drawn["error_percent"] == pytest.approx(
        100 * (run["measured"]["median"] / drawn["predicted"] - 1)
    )
    text = run_cli("run", str(problem_file), str(plan), *MODEL, *QUICK, "--replay")
    assert text.exit_code == 0, describe(text)
    assert "replayed with this run's median op and transfer times" in text.output
    assert "replayed iteration by iteration, each with its own op and transfer times" in (
        text.output
    )
    assert "replayed with each op and transfer timed by a random iteration of this run" in (
        text.output
    )


def test_baselines_run_and_report_speedups(problem_file: Path, tmp_path: Path) -> None:
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    result = run_cli(
        "run", str(problem_file), str(plan), *MODEL, "--iterations", "1", "--warmup", "0",
        "--baselines",
    )  # fmt: skip
    assert result.exit_code == 0, describe(result)
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith(("GPipe", "1F1B"))] == [
        line.split(" vs ")[1].split(":")[0] for line in lines if " vs " in line
    ]
    assert sum(" vs " in line for line in lines) == 2


def test_compared_plans_and_baselines_run_in_turn_each_checked(
    problem_file: Path, tmp_path: Path
) -> None:
    """``--compare`` plans and ``--baselines`` run in the plan's processes, each with its
    own gradients checked, recomputation and speedup; the plan compared with itself is
    said to be the same plan."""
    plan = plan_file(tmp_path, "aligned", **PLANS["ordered-aligned"])
    other = plan_file(tmp_path, "recompute", **PLANS["recompute"])
    compared_plans = ("--compare", str(other), "--compare", str(plan))
    document = run_json(str(problem_file), str(plan), *compared_plans, "--baselines")
    compared, itself, *baselines = document["baselines"]
    assert compared["label"] == str(other) and itself["label"] == str(plan)
    assert [run["speedup"]["same_plan"] for run in document["baselines"]] == [
        False, True, False, False
    ]  # fmt: skip
    assert [b["label"].split("(")[0] for b in baselines] == ["GPipe", "1F1B"]
    assert [run["recompute"] for run in (document["run"], compared)] == [[False] * 2, [True] * 2]
    for run in (document["run"], *document["baselines"]):
        assert run["max_gradient_relative_difference"] < 1e-4
        assert len(run["measured"]["iterations"]) == 2
    for run in document["baselines"]:
        measured = document["run"]["measured"]["median"] / run["measured"]["median"]
        assert run["speedup"]["measured"] == pytest.approx(1 / measured)
        ours, theirs = document["run"]["measured"]["iterations"], run["measured"]["iterations"]
        paired = sorted(b / a for a, b in zip(ours, theirs, strict=True))
        found = run["speedup"]["paired"]
        assert [found["min"], found["median"], found["max"]] == pytest.approx(
            [paired[0], sum(paired) / 2, paired[1]]
        )
        assert found["ranked"] == (paired[0] > 1 or paired[1] < 1)


def test_a_jobs_plans_alternate_iteration_by_iteration(problem_file: Path, tmp_path: Path) -> None:
    from tidgap.cli.launching import launched

    problem = Problem.from_dict(problem_document())
    plans = [load_plan(plan_file(tmp_path, kind, **PLANS[kind]), problem) for kind in PLANS]
    job = Job(str(problem_file), "", MODEL[1], [2], "", {"input_shape": "6"}, iterations=3)
    found = launched(problem, job, plans, "three plans")
    assert [[r["recompute"] for r in results] for results in found] == [
        [kind == "recompute"] * 2 for kind in PLANS
    ]
    for rank in range(2):
        starts = [results[rank]["starts"] for results in found]
        in_turn = [start for iteration in zip(*starts, strict=True) for start in iteration]
        assert len(in_turn) == 9 and in_turn == sorted(in_turn)


def test_compared_plans_for_another_problem_exit_2(problem_file: Path, tmp_path: Path) -> None:
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    other = plan_file(tmp_path, "other", problem="not-tiny", **PLANS["flush-unequal"])
    result = run_cli("run", str(problem_file), str(plan), *MODEL, "--compare", str(other))
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, describe(result)
    assert f"{other}: problem: is a plan for 'not-tiny'" in result.stderr


def misbehaving_rank1(
    monkeypatch: pytest.MonkeyPatch, behaviour: str, model: str, folder: Path
) -> tuple[Path, list[str]]:
    """A plan in ``folder`` and the model arguments of a run whose rank 1 does ``behaviour``
    (``TIDGAP_TEST_RANK1``, read by :mod:`tests.runtime.pipeline_models`)."""
    monkeypatch.setenv("TIDGAP_TEST_RANK1", behaviour)
    plan = plan_file(folder, "flush", **PLANS["flush-unequal"])
    return plan, model_args(model)


@pytest.mark.parametrize(
    ("behaviour", "model", "message"),
    [
        ("raise", "MLP", ": RuntimeError: pipeline_models refuses to load on rank 1"),
        # rank 0 fails after it; stage 1's first forward is of samples 0..3 (PLANS)
        (
            "blow",
            "FUSED",
            ": stage 1 forward of samples 0..3 in layer '2' (Fuse): "
            "RuntimeError: Fuse blew on rank 1",
        ),
        (
            "probe",
            "FUSED",
            ": stage 1 forward of one sample (probing its output's shape) in layer '2' (Fuse): "
            "RuntimeError: Fuse blew on rank 1",
        ),
    ],
)
def test_a_failing_worker_stops_every_worker(
    behaviour: str,
    model: str,
    message: str,
    problem_file: Path,
    tmp_path: Path,
    own_temporary_folder: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan, model_args = misbehaving_rank1(monkeypatch, behaviour, model, tmp_path)
    started = time.monotonic()
    result = run_cli("run", str(problem_file), str(plan), *model_args, *QUICK)
    assert result.exit_code == 1, describe(result)
    assert time.monotonic() - started < 30
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, describe(result)
    assert lines[0].startswith("tidgap: error: run: plan: rank 1 exited with status 1")
    error, _, logs = lines[0].partition(" (the workers' logs: ")
    assert error.endswith(message)
    assert message in (Path(logs.removesuffix(")")) / "rank1.log").read_text()
    assert workers_under(own_temporary_folder) == []


@pytest.mark.parametrize("command", ["run", "calibrate"])
def test_an_input_shape_the_model_does_not_take_is_bad_input(
    command: str, tmp_path: Path, own_temporary_folder: Path
) -> None:
    """``--input-shape 7`` for a model that takes 6: the workers started and failed probing
    the stages (exit 1); the launcher probes one sample first: one line naming --model,
    exit 2, no worker started."""
    document = synth_problem(0, 2, 8, 1, 0.5, "table", "tiny")  # calibrate takes tables
    document["source"] = {"split": {"boundaries": [2]}}
    problem = write_json(tmp_path / "problem.json", document)
    if command == "run":
        given = [str(plan_file(tmp_path, "flush", **PLANS["flush-unequal"]))]
    else:
        given = ["--out", str(tmp_path / "calibrated.json")]
    wrong = [*MODEL[:-1], "7"]
    result = run_cli(command, str(problem), *given, *wrong, *QUICK)
    assert result.exit_code == 2, describe(result)
    assert result.stderr.splitlines()[-1] == (
        "tidgap: error: --model: tests.runtime.pipeline_models:MLP: stage 0 forward of one "
        "sample (probing its output's shape) in layer '0' (Linear): RuntimeError: mat1 and "
        "mat2 shapes cannot be multiplied (1x7 and 6x12)"
    )
    assert list(own_temporary_folder.iterdir()) == []


def test_the_stages_are_probed_on_the_problems_unit(tmp_path: Path) -> None:
    """A stage that cannot take one sample (batch statistics in eval mode too) but runs on
    the unit of 2, the smallest chunk a plan has: the probe of one sample refused the model
    (exit 2), though profile had timed it; it now probes the unit and the plan runs."""
    document = synth_problem(0, 2, 8, 2, 0.5, "affine", "tiny")
    document["source"] = {"split": {"boundaries": [2]}}
    problem = write_json(tmp_path / "problem.json", document)
    plan = plan_file(tmp_path, "flush", forward=[[2, 6], [4, 4]], backward=[[2, 6], [4, 4]])
    result = run_cli("run", str(problem), str(plan), *model_args("UNTRACKED_NORM"), *QUICK)
    assert result.exit_code == 0, describe(result)
    document["unit"] = 1  # a plan may cut one sample: the probe says so, as before
    problem = write_json(tmp_path / "problem.json", document)
    refused = run_cli("run", str(problem), str(plan), *model_args("UNTRACKED_NORM"), *QUICK)
    assert refused.exit_code == 2, describe(refused)
    assert "stage 1 forward of one sample (probing its output's shape) in layer '2'" in (
        refused.stderr
    )


@pytest.mark.parametrize("float64", [False, True])
def test_a_model_in_another_dtype_is_probed_as_the_workers_cast_it(
    float64: bool, problem_file: Path, tmp_path: Path
) -> None:
    """The launcher's probe ran a float64 model on a float32 sample (refused, exit 2, with
    --float64 too) though the workers cast it to the run's dtype and run it."""
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    job = tmp_path / "job.json"
    dtype = ["--float64"] if float64 else []
    args = [*model_args("DOUBLE"), *dtype, "--write-job", str(job)]
    result = run_cli("run", str(problem_file), str(plan), *args)
    assert result.exit_code == 0, describe(result)
    assert Job.load(job).float64 is float64


def test_a_hanging_worker_times_out(
    problem_file: Path, tmp_path: Path, own_temporary_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDGAP_TEST_RANK1", "hang")
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    started = time.monotonic()
    # long enough for rank 1 to say where it hangs on a loaded machine (pytest -n)
    result = run_cli("run", str(problem_file), str(plan), *MODEL, "--timeout", "10")
    elapsed = time.monotonic() - started
    assert result.exit_code == 1, describe(result)
    assert 10 <= elapsed < 40
    assert "did not finish within 10 s" in result.stderr
    assert "rank 1: building the model" in result.stderr  # where it hangs
    assert workers_under(own_temporary_folder) == []


def test_a_rank_stuck_in_an_iteration_is_named_so_at_the_timeout(
    problem_file: Path, tmp_path: Path, own_temporary_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeout quotes each rank's last line: a rank stuck in a forward said only
    ``joined``."""
    plan, model_args = misbehaving_rank1(monkeypatch, "stall", "FUSED", tmp_path)
    result = run_cli("run", str(problem_file), str(plan), *model_args, "--timeout", "15")
    assert result.exit_code == 1, describe(result)
    assert "did not finish within 15 s" in result.stderr
    assert "rank 1: running an iteration (" in result.stderr, describe(result)
    assert workers_under(own_temporary_folder) == []


@pytest.mark.parametrize("command", ["run", "calibrate"])
def test_a_model_whose_import_hangs_ends_at_the_timeout(command: str, tmp_path: Path) -> None:
    """The launcher builds the model before any worker starts: --timeout covers that too
    (status 124, as tidgap profile), where it hung before."""
    (tmp_path / "hangs_on_import.py").write_text("import time\ntime.sleep(600)\n")
    document = synth_problem(0, 2, 8, 1, 0.5, "table", "tiny")  # calibrate takes tables
    document["source"] = {"split": {"boundaries": [2]}}
    problem_file = write_json(tmp_path / "problem.json", document)
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    arguments = [str(plan)] if command == "run" else ["--out", str(tmp_path / "c.json")]
    model = ["--model", "hangs_on_import:model", "--input-shape", "6", "--timeout", "2"]
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    cli = [sys.executable, "-c", "from tidgap.cli import main; main()", command]
    started = time.monotonic()
    done = subprocess.run(
        [*cli, str(problem_file), *arguments, *model],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 124, done.stderr
    assert f"tidgap {command} timed out" in done.stderr
    assert time.monotonic() - started < 30


#: A model whose third layer hangs in the launching process (not in the workers, which
#: torch.distributed's launch gives a RANK) on the stages' probe (the problem's unit, one
#: sample) or on --check-gradients' whole-batch reference (8 samples), and one that prints.
LAUNCHER_MODELS = """
import os, time
from torch import nn

class Hangs(nn.Module):
    def __init__(self, samples):
        super().__init__()
        self.samples = samples

    def forward(self, x):
        if "RANK" not in os.environ and x.shape[0] == self.samples:
            time.sleep(600)
        return x

class Prints(nn.Module):
    def forward(self, x):
        print("a forward of", x.shape[0])
        return x

def mlp(middle):
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), middle, nn.Linear(12, 3))

probe = mlp(Hangs(1))
reference = mlp(Hangs(8))
prints = mlp(Prints())
"""


def launcher_run(tmp_path: Path, model: str, *options: str) -> subprocess.CompletedProcess:
    """``tidgap run`` of a flush plan of ``problem_document()`` with :data:`LAUNCHER_MODELS`'
    ``model``, in a process of its own."""
    (tmp_path / "launcher_models.py").write_text(LAUNCHER_MODELS)
    problem = write_json(tmp_path / "problem.json", problem_document())
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "tidgap", "run", str(problem), str(plan)]
        + ["--model", f"launcher_models:{model}", "--input-shape", "6", *options],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(("where", "timeout"), [("probe", 8), ("reference", 40)])
def test_a_layer_that_hangs_in_the_launcher_ends_at_the_timeout(
    where: str, timeout: int, tmp_path: Path, own_temporary_folder: Path
) -> None:
    """--timeout covers the launcher's own runs of the model: the stages' probe and the
    gradient check's reference ran unbounded before (a layer that never returns hung the
    command for good). The reference runs after the workers, which the timeout bounds too
    (on a loaded machine they take seconds to start)."""
    started = time.monotonic()
    options = ["--iterations", "1", "--timeout", str(timeout), "--check-gradients"]
    done = launcher_run(tmp_path, where, *options)
    assert done.returncode == 124, done.stderr
    assert "tidgap run timed out" in done.stderr
    assert time.monotonic() - started < timeout + 50
    assert workers_under(own_temporary_folder) == []


def test_what_the_model_prints_leaves_json_as_json(tmp_path: Path) -> None:
    """The launcher's probe and reference printed on stdout ahead of the document."""
    done = launcher_run(tmp_path, "prints", *QUICK, "--check-gradients", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run"]["max_gradient_relative_difference"] < 1e-4
    assert "a forward of 1" in done.stderr and "a forward of 8" in done.stderr


def test_plans_run_in_turn_have_labels_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --compare file named ``plan``, or given twice, took the plan's label: the report
    printed two ``plan:`` blocks and the trace kept one run's times under both."""
    monkeypatch.chdir(tmp_path)
    problem = Problem.from_dict(problem_document())
    plan = load_plan(plan_file(tmp_path, "flush", **PLANS["flush-unequal"]), problem)
    for name in ("plan", "a\x1bb.json"):
        write_json(tmp_path / name, {"format": "tidgap.plan/1", **PLANS["flush-unequal"]})
    labels = [label for label, _ in to_run(problem, plan, True, ["plan", "plan", "a\x1bb.json"])]
    assert labels[:4] == ["plan", "plan (2)", "plan (3)", "a\\x1bb.json"]
    assert len(labels) == 6 and len(set(labels)) == 6  # and the two baselines


def test_a_trace_over_a_compared_plan_names_it_once(problem_file: Path, tmp_path: Path) -> None:
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    other = plan_file(tmp_path, "other", **PLANS["flush-unequal"])
    result = run_cli(
        "run", str(problem_file), str(plan), *MODEL, "--compare", str(other), "--trace", str(other)
    )
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"tidgap: error: --trace: is the same file as --compare {other}; "
        "refusing to overwrite an input"
    )


def test_stages_of_another_split_are_named_after_their_layers(
    problem_file: Path, tmp_path: Path
) -> None:
    """Under --split the report and the trace kept the profile's names (s0, s1), which
    describe the profiled split's stages."""
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    trace = tmp_path / "t.json"
    args = [str(problem_file), str(plan), *MODEL, "--split", "3", *QUICK, "--trace", str(trace)]
    result = run_cli("run", *args)
    assert result.exit_code == 0, describe(result)
    assert "busy per iteration, measured / predicted: 0-2 " in result.stdout
    assert ", 3-4 " in result.stdout and "s0" not in result.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"stage 0: 0-2", "stage 1: 3-4"} <= names


def bad_inputs(tmp_path: Path) -> dict[str, list[str]]:
    """Per case of bad input, the ``tidgap run`` arguments."""
    problem = str(write_json(tmp_path / "problem.json", problem_document()))
    unsplit, wide = problem_document(), problem_document()
    unsplit["source"] = None
    wide["source"]["split"]["boundaries"] = [7]
    plan = str(plan_file(tmp_path, "plan", **PLANS["flush-unequal"]))
    other = str(plan_file(tmp_path, "other", problem="another", **PLANS["flush-unequal"]))
    short = str(plan_file(tmp_path, "short", forward=[[4, 4]], backward=[[4, 4]]))
    wide_file = str(write_json(tmp_path / "wide.json", wide))
    bare_file = str(write_json(tmp_path / "bare.json", unsplit))
    huge = synth_problem(0, 2, 2**31 - 1, 1, 0.5, "affine", "huge")
    huge["source"] = {"split": {"boundaries": [2]}}
    huge_file = str(write_json(tmp_path / "huge.json", huge))
    whole = str(plan_file(tmp_path, "whole", forward=[[2**31 - 1]] * 2, backward=[[2**31 - 1]] * 2))
    huge_input = [*MODEL[:-1], "6,100000"]  # 2.4 MB a sample: far beyond any memory
    profiled_file = str(write_json(tmp_path / "profiled.json", problem_document(device="cpu")))
    recompute = str(plan_file(tmp_path, "recompute", **PLANS["recompute"]))
    return {
        "plan for another problem": [problem, other, *MODEL],
        "plan of another shape": [problem, short, *MODEL],
        "split out of range": [problem, plan, *MODEL, "--split", "9"],
        "split of another stage count": [problem, plan, *MODEL, "--split", "1,3"],
        "recorded split out of range": [wide_file, plan, *MODEL],
        "no recorded split": [bare_file, plan, *MODEL],
        "model cannot be imported": [problem, plan, "--model", "no_such_module:X"],
        "gpt option on a module": [problem, plan, *MODEL, "--hidden", "8"],
        "a batch far beyond memory": [huge_file, whole, *huge_input],
        # profiled on the CPU: the device warning must not come before the one line
        **no_cuda_case([profiled_file, plan, *MODEL, "--device", "cuda"]),
        "a recompute plan warns, a bad --compare": [problem, recompute, *MODEL, "--compare", short],
        "--nproc other than the stage count": [problem, plan, *MODEL, "--nproc", "3"],
        "--transport nccl on the CPU": [problem, plan, *MODEL, "--transport", "nccl"],
        "--transport of another name": [problem, plan, *MODEL, "--transport", "tcp"],
        # tied weights on stages 0 and 1: each process would update its own copy
        "a split between tied layers": [problem, plan, *model_args("TIED")],
        "a --split between tied layers": [problem, plan, *model_args("TIED"), "--split", "1"],
    }


def no_cuda_case(args: list[str]) -> dict[str, list[str]]:
    """``--device cuda`` as bad input, where no CUDA is usable (on a GPU machine it runs)."""
    import torch

    return {} if torch.cuda.is_available() else {"--device cuda without CUDA": args}


def test_bad_input_exits_2_in_one_line(tmp_path: Path, own_temporary_folder: Path) -> None:
    for case, args in bad_inputs(tmp_path).items():
        result = run_cli("run", *args)
        assert result.exit_code == 2, f"{case}: {describe(result)}"
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tidgap: error: "), describe(result)
    assert list(own_temporary_folder.iterdir()) == []  # no run was started


def test_tied_layers_on_two_stages_are_named(tmp_path: Path) -> None:
    """A run of stages that share a parameter computed wrong gradients (each process
    updated its own copy); it is refused, naming both layers and stages and the split."""
    problem = str(write_json(tmp_path / "problem.json", problem_document()))
    plan = str(plan_file(tmp_path, "plan", **PLANS["flush-unequal"]))
    result = run_cli("run", problem, plan, *model_args("TIED"))
    assert result.stderr.startswith(
        f"tidgap: error: {problem}: source.split.boundaries: layers '0' (stage 0) and '2' "
        "(stage 1) share a parameter (weight, weight): "
    ), describe(result)
    assert "tied weights across stages are not supported" in result.stderr
    result = run_cli("run", problem, plan, *model_args("TIED"), "--split", "3", *QUICK)
    assert result.exit_code == 0, describe(result)  # both on stage 0


def _rank(args: list[str], rank: str, world_size: str = "2") -> subprocess.Popen[str]:
    """``tidgap ARGS`` as torchrun's rank ``rank`` of ``world_size`` (no other rank runs)."""
    from tidgap.runtime.launch import free_port
    from tidgap.runtime.worker import TORCHRUN_VARIABLES

    values = (rank, world_size, rank, "127.0.0.1", str(free_port()))
    env = {**os.environ, **dict(zip(TORCHRUN_VARIABLES, values, strict=True))}
    return subprocess.Popen(
        [sys.executable, "-m", "tidgap", *args], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # as from a terminal: tests run in the background of a shell inherit SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_rank_waiting_in_torch_distributed_ends_at_once_on_a_signal(
    problem_file: Path, tmp_path: Path, signum: int
) -> None:
    """Rank 0 waiting for its peer in torch.distributed's C++ code, where Python's handlers
    never run, ignored SIGTERM and SIGINT: torchrun's agent killed it 30 s later. It ends
    at once now, saying so, with the signal's status."""
    plan = plan_file(tmp_path, "plan", **PLANS["flush-unequal"])
    rank = _rank(["run", str(problem_file), str(plan), *MODEL, "--timeout", "30"], "0")
    try:
        deadline = time.monotonic() + 60
        while not any(  # its store's thread: it waits for rank 1 in C++ code
            (task / "comm").read_text().startswith("pt_tcpstore")
            for task in Path(f"/proc/{rank.pid}/task").iterdir()
        ):
            assert rank.poll() is None and time.monotonic() < deadline, rank.communicate()
            time.sleep(0.1)
        time.sleep(0.5)
        signalled = time.monotonic()
        rank.send_signal(signum)
        _, errors = rank.communicate(timeout=60)
    finally:
        rank.kill()
    assert rank.returncode == 128 + signum, errors
    said = "interrupted" if signum == signal.SIGINT else "terminated"
    assert errors.endswith(f"tidgap: {said}\n") and time.monotonic() - signalled < 10


@pytest.mark.parametrize(
    ("command", "output"), [("run", "--trace"), ("calibrate", "--out"), ("profile", "--out")]
)
def test_a_rank_other_than_0_does_not_check_rank_0s_outputs(
    problem_file: Path, tmp_path: Path, command: str, output: str
) -> None:
    """Only rank 0 writes ``--trace`` / ``--out``; another machine's rank refused a folder
    it lacked (exit 2), and the healthy machine's rank hung until its timeout. Here rank 1
    goes on to wait for rank 0, until its timeout (124)."""
    plan = str(plan_file(tmp_path, "plan", **PLANS["flush-unequal"]))
    missing = str(tmp_path / "nowhere" / "out.json")
    tables = synth_problem(0, 2, 8, 1, 0.5, "table", "tiny")  # calibrate re-times tables
    tables["source"] = {"split": {"boundaries": [2]}}
    timed = str(write_json(tmp_path / "timed.json", tables))
    arguments = {
        "run": [str(problem_file), plan, *MODEL],
        "calibrate": [timed, *MODEL, "--no-recompute", "--no-order"],  # fewer plans to time out
        "profile": [*MODEL[1:], "--stages", "2", "--batch-size", "8"],
    }[command]
    rank = _rank([command, *arguments, output, missing, "--timeout", "3"], "1")
    _, errors = rank.communicate(timeout=120)
    assert rank.returncode == 124, errors
    assert output not in errors, errors


def test_missing_torch_exits_2(
    problem_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    monkeypatch.setitem(sys.modules, "torch", None)
    plan = plan_file(tmp_path, "plan", **PLANS["flush-unequal"])
    result = run_cli("run", str(problem_file), str(plan), *MODEL)
    assert result.exit_code == 2, describe(result)
    assert result.stderr.strip() == f"tidgap: error: run: {INSTALL_HINT}"


def test_recompute_against_a_stored_activation_profile_warns(
    problem_file: Path, tmp_path: Path
) -> None:
    plan = plan_file(tmp_path, "recompute", **PLANS["recompute"])
    job = tmp_path / "job.json"
    result = run_cli("run", str(problem_file), str(plan), *MODEL, "--write-job", str(job))
    assert result.exit_code == 0, describe(result)
    assert "stages 0, 1 recompute forwards" in result.stderr
    assert "prices each of their backwards as the profiled forward plus" in result.stderr
    assert f"--master-port PORT -m tidgap.runtime.worker {job}\n" in result.stdout
    assert "N*K = 2 processes (one per stage)" in result.stdout
    saved = Job.load(job)
    assert saved.boundaries == [2] and Path(saved.plan) == plan.resolve()
    assert Path(saved.results) == (tmp_path / "results").resolve()


def test_recompute_against_a_calibration_with_recomputing_times_does_not_warn(
    tmp_path: Path,
) -> None:
    """``source.calibration.recompute`` prices recomputing stages as measured: no caveat."""
    per_stage = {"forward": {"affine": {"base": 1.0, "per_sample": 0.1}}}
    per_stage["backward"] = per_stage["forward"]
    document = problem_document(calibration={"recompute": [per_stage, per_stage]})
    problem = write_json(tmp_path / "p.json", document)
    plan = plan_file(tmp_path, "recompute", **PLANS["recompute"])
    job = tmp_path / "job.json"
    result = run_cli("run", str(problem), str(plan), *MODEL, "--write-job", str(job))
    assert result.exit_code == 0, describe(result)
    assert "recompute forwards" not in result.stderr


def test_another_model_than_the_profiled_one_warns(tmp_path: Path) -> None:
    problem = write_json(tmp_path / "p.json", problem_document(model={"name": "gpt"}))
    plan = plan_file(tmp_path, "plan", **PLANS["flush-unequal"])
    result = run_cli(
        "run", str(problem), str(plan), *MODEL, "--write-job", str(tmp_path / "job.json")
    )
    assert result.exit_code == 0, describe(result)
    assert (
        "source.model: profiled with input_shape unset, name gpt, running input_shape [6], "
        "name tests.runtime"
    ) in result.stderr


def test_another_device_than_the_profiled_one_warns(tmp_path: Path) -> None:
    problem = write_json(tmp_path / "p.json", problem_document(device="cuda"))
    plan = plan_file(tmp_path, "plan", **PLANS["flush-unequal"])
    job = tmp_path / "job.json"
    result = run_cli("run", str(problem), str(plan), *MODEL, "--write-job", str(job))
    assert result.exit_code == 0, describe(result)
    assert "source.device: profiled on cuda, this run computes on cpu" in result.stderr
    assert Job.load(job).device == "cpu"


def test_another_split_than_the_timed_one_warns(problem_file: Path, tmp_path: Path) -> None:
    plan = plan_file(tmp_path, "plan", **PLANS["flush-unequal"])
    job = str(tmp_path / "job.json")
    for split, warned in (("3", True), ("2", False)):
        result = run_cli(
            "run", str(problem_file), str(plan), *MODEL, "--split", split, "--write-job", job
        )
        assert result.exit_code == 0, describe(result)
        message = (
            "source.split: its times were measured with boundaries [2], this run splits at [3]"
        )
        assert (message in result.stderr) == warned


def test_warnings_escape_what_the_problem_file_says(tmp_path: Path) -> None:
    """Text quoted from the file reaches the terminal escaped: one line per warning."""
    problem = write_json(tmp_path / "p.json", problem_document(device="\x1b[2Jgpu\nx"))
    plan = plan_file(tmp_path, "plan", **PLANS["flush-unequal"])
    result = run_cli("run", str(problem), str(plan), *MODEL, "--write-job", str(tmp_path / "j"))
    assert result.exit_code == 0, describe(result)
    assert "profiled on \\x1b[2Jgpu\\nx, this run" in result.stderr
    assert "\x1b" not in result.stderr
    assert all(line.startswith("tidgap: warning: ") for line in result.stderr.splitlines())
    long = write_json(tmp_path / "long.json", problem_document(model={"name": [1] * 100_000}))
    result = run_cli("run", str(long), str(plan), *MODEL, "--write-job", str(tmp_path / "j"))
    assert result.exit_code == 0, describe(result)
    assert max(map(len, result.stderr.splitlines())) < 500  # the list cut to 60 characters


def test_huge_timeouts_are_capped_where_torch_distributed_takes_them() -> None:
    from tidgap.runtime.dist_transport import LONGEST_WAIT, dist_timeout

    assert dist_timeout(1e308).total_seconds() == LONGEST_WAIT
    assert dist_timeout(60.0).total_seconds() == 60.0


def test_a_worker_without_cuda_refuses_a_cuda_job(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from tidgap.runtime.worker import rank_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rank_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="sees no usable GPU"):
        rank_device("cuda")


def test_nccl_needs_a_gpu_per_process_here(
    problem_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked before any process starts: a machine with one GPU for the two stage processes
    this command would start (CUDA and NCCL faked usable) refuses ``--transport nccl``,
    names the option and the way out; ``auto`` lets the workers fall back to gloo; under
    torchrun (no count of processes here) the workers check each rank's GPU."""
    import torch
    from torch import distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(distributed, "is_nccl_available", lambda: True)
    from tidgap.cli.workers import require_device

    with pytest.raises(InputError, match=r"^--transport: nccl needs a GPU per process: 2 proc"):
        require_device("cuda", "nccl", 2)
    require_device("cuda", "nccl", 1)
    require_device("cuda", "auto", 2)
    require_device("cuda", "nccl", None)  # under torchrun: the workers check their GPUs
    monkeypatch.setattr(distributed, "is_nccl_available", lambda: False)
    with pytest.raises(InputError, match=r"^--transport: this PyTorch has no NCCL"):
        require_device("cuda", "nccl", 1)


def test_results_of_a_job_older_than_a_field_read_it_as_its_default() -> None:
    """A job recorded before ``transport`` existed ran what ``auto`` does on its machine."""
    from tidgap.cli.run_results import same_job

    job = Job("p.json", "plan.json", "gpt", [2], "r", {})
    older = {key: value for key, value in dataclasses.asdict(job).items() if key != "transport"}
    same_job(job, [{"job": older}])
    with pytest.raises(InputError, match="rank 0 ran transport 'gloo', this command gives 'auto'"):
        same_job(job, [{"job": {**older, "transport": "gloo"}}])


def test_a_checkpoint_around_random_layers_on_a_recomputing_stage_says_why(
    problem_file: Path, tmp_path: Path
) -> None:
    """torch's ``CheckpointError`` (its re-run saw other draws' metadata) said nothing of
    why: the line now says what to do."""
    plan = plan_file(tmp_path, "recompute", **PLANS["recompute"])
    model = model_args("CHECKPOINTED")
    result = run_cli("run", str(problem_file), str(plan), *model, *QUICK)
    assert result.exit_code == 1, describe(result)
    line = result.stderr.strip().splitlines()[-1]
    assert "CheckpointError" in line and "take the checkpoint out" in line, line


# torch warns of the reentrant checkpoint's input (no gradient) in the reference's forward
@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad=True:UserWarning")
def test_a_reference_the_model_cannot_give_is_one_line(problem_file: Path, tmp_path: Path) -> None:
    """A reentrant checkpoint runs in the pipeline, but ``torch.autograd.grad`` refuses it in
    the gradient check's one-process reference: a traceback, exit 1."""
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    model = model_args("REENTRANT")
    result = run_cli("run", str(problem_file), str(plan), *model, *QUICK, "--check-gradients")
    assert result.exit_code == 2, describe(result)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "--check-gradients: the one-process reference on the whole batch failed: " in (
        result.stderr
    )


@pytest.mark.parametrize("cores", [1, 2])
def test_stages_sharing_a_core_are_warned_of(
    cores: int, problem_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stage processes on one usable core (``taskset -c 0``) took turns and measured
    +86% to +90% against the prediction, without a word why."""
    from tidgap.cli import run_caveats

    monkeypatch.setattr(run_caveats, "usable_cores", lambda: cores)
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    result = run_cli("run", str(problem_file), str(plan), *MODEL, *QUICK)
    assert result.exit_code == 0, describe(result)
    warned = "2 stage processes of 1 thread share 1 usable core" in result.stderr
    assert warned == (cores == 1), describe(result)


def test_profiled_with_recompute_does_not_warn(tmp_path: Path) -> None:
    problem = write_json(tmp_path / "p.json", problem_document(timing={"recompute": True}))
    plan = plan_file(tmp_path, "recompute", **PLANS["recompute"])
    result = run_cli(
        "run", str(problem), str(plan), *MODEL, "--write-job", str(tmp_path / "job.json")
    )
    assert result.exit_code == 0, describe(result)
    assert result.stderr == ""


def test_stored_graph_stages_on_a_recompute_profile_warn(tmp_path: Path) -> None:
    """Profiled with --recompute, an aligned plan is over-predicted: the run says so."""
    problem = write_json(tmp_path / "p.json", problem_document(timing={"recompute": True}))
    plan = plan_file(tmp_path, "aligned", **PLANS["ordered-aligned"])
    result = run_cli(
        "run", str(problem), str(plan), *MODEL, "--write-job", str(tmp_path / "job.json")
    )
    assert result.exit_code == 0, describe(result)
    assert "stages 0, 1 run backward on stored graphs" in result.stderr


@pytest.mark.parametrize(
    "extra", [["--json"], ["--trace", "t.json"], ["--replay"], ["--nproc", "2"]]
)
def test_write_job_refuses_the_outputs_of_a_run(tmp_path: Path, extra: list[str]) -> None:
    plan = plan_file(tmp_path, "plan", **PLANS["flush-unequal"])
    problem = write_json(tmp_path / "p.json", problem_document())
    job = tmp_path / "job.json"
    result = run_cli("run", str(problem), str(plan), *MODEL, "--write-job", str(job), *extra)
    assert result.exit_code == 2, describe(result)
    assert "--write-job" in result.output and not job.exists()


def test_write_job_refuses_a_results_folder_that_is_a_file(tmp_path: Path) -> None:
    """It wrote the job, which every torchrun worker then failed on."""
    plan = plan_file(tmp_path, "plan", **PLANS["flush-unequal"])
    problem = write_json(tmp_path / "p.json", problem_document())
    (tmp_path / "results").write_text("")
    job = tmp_path / "job.json"
    result = run_cli("run", str(problem), str(plan), *MODEL, "--write-job", str(job))
    assert result.exit_code == 2, describe(result)
    assert result.stderr.strip() == (
        f"tidgap: error: --write-job: its results go to {tmp_path / 'results'}, a file, not a "
        "folder"
    )
    assert not job.exists()


def test_job_files_round_trip_and_bad_ones_are_named(tmp_path: Path) -> None:
    job = Job(
        problem="p.json",
        plan="plan.json",
        model="gpt",
        boundaries=[3],
        results="out",
        model_options={"layers": 2},
        float64=True,
    )
    path = tmp_path / "job.json"
    job.save(path)
    assert Job.load(path) == job
    document = json.loads(path.read_text(encoding="utf-8"))
    for change, field in (({"format": "x"}, "format"), ({"extra": 1}, "extra")):
        write_json(tmp_path / "bad.json", {**document, **change})
        with pytest.raises(InputError, match=field):
            Job.load(tmp_path / "bad.json")
    del document["plan"]
    write_json(tmp_path / "bad.json", document)
    with pytest.raises(InputError, match=r"bad\.json: plan: is missing"):
        Job.load(tmp_path / "bad.json")


def test_measured_timeline_pairs_each_send_with_its_receive() -> None:
    problem = Problem.from_dict(problem_document())
    rank0 = [
        ("forward", 0, 0, 8, 0.000, 0.001),
        ("send_forward", 0, 0, 8, 0.001, 0.0011),
        ("recv_backward", 0, 0, 8, 0.0011, 0.004),
        ("backward", 0, 0, 8, 0.004, 0.006),
    ]
    rank1 = [
        ("recv_forward", 0, 0, 8, 0.000, 0.0015),
        ("forward", 0, 0, 4, 0.0015, 0.002),
        ("forward", 1, 4, 8, 0.002, 0.0025),
        ("backward", 0, 0, 8, 0.0025, 0.0035),
        ("send_backward", 0, 0, 8, 0.0035, 0.0036),
    ]
    timeline = measured_timeline(problem, [rank0, rank1], "measured")
    assert timeline.iteration_time == pytest.approx(6.0)  # ms
    assert [(s.kind, s.samples) for s in timeline.stages[1]] == [
        ("F", (1, 4)),
        ("F", (5, 8)),
        ("B", (1, 8)),
    ]
    (forward, backward) = timeline.links[0]
    assert (forward.start, forward.end) == pytest.approx((1.0, 1.5))
    assert (backward.start, backward.end) == pytest.approx((3.5, 4.0))
    assert timeline.busy(1) == pytest.approx(2.0)


GPT = ["--model", "gpt", "--layers", "2", "--hidden", "16", "--heads", "2", "--seq-len", "8"]
GPT += ["--vocab", "50"]


def test_a_job_run_as_torchrun_would_is_reported_with_results(
    problem_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--write-job, the workers started with torchrun's environment (here by the launcher),
    then --results: a tiny GPT (token inputs, dropout off for the check) on 1F1B(2). A
    trace that cannot be written at the end (its folder removed during the run) comes
    after the report, which it lost."""
    from tidgap.runtime.launch import launch

    problem = Problem.from_dict(problem_document())
    plan = plan_file(tmp_path, "1f1b", **one_f_one_b_plan(problem, 2).model_dump(exclude_none=True))
    options = [str(problem_file), str(plan), *GPT, "--check-gradients", "--iterations", "1"]
    job = tmp_path / "job.json"
    written = run_cli("run", *options, "--write-job", str(job))
    assert written.exit_code == 0, describe(written)
    launch(job, 2, threads=1, timeout=60, logs=tmp_path)
    result = run_cli("run", *options, "--results", str(tmp_path / "results"), "--json")
    assert result.exit_code == 0, describe(result)
    document = json.loads(result.stdout)
    assert document["run"]["max_gradient_relative_difference"] < 1e-4
    assert len(document["run"]["measured"]["iterations"]) == 1
    empty = run_cli("run", *options, "--results", "")
    assert empty.exit_code == 2 and "--results: no folder name" in empty.stderr
    folder = tmp_path / "results"
    with monkeypatch.context() as patch:

        def gone(files: list) -> list[str]:
            raise InputError("cannot write: No such file or directory", source="t.json")

        patch.setattr("tidgap.cli.run.write_files", gone)
        for shown in ([], ["--json"]):
            failed = run_cli("run", *options, "--results", str(folder), "--trace", "t.json", *shown)
            assert failed.exit_code == 2 and "t.json: cannot write" in failed.stderr
            assert "measured" in failed.stdout, describe(failed)
    for damage, status, message in RESULT_DAMAGES:
        reported = report_damaged(folder / "rank0.pt", damage, [*options, "--results", str(folder)])
        assert reported.exit_code == status, describe(reported)
        assert reported.stderr.count("\n") == 1 and message in reported.stderr, reported.stderr
        assert "Traceback" not in reported.stderr
    replayed = report_damaged(
        folder / "rank0.pt",
        lambda saved: saved.update(
            iterations=[[(*r[:5], 1e300) for r in rows] for rows in saved["iterations"]],
            job=saved["job"] | {"timeout": 1e301},
        ),
        [*options, "--replay", "--results", str(folder)],
    )  # ops that end in 1e300 s, within a job's timeout: no problem holds such times
    assert replayed.exit_code == 2, describe(replayed)
    assert replayed.stderr.startswith(f"tidgap: error: {folder}: the run's measured")
    nan, _, message = RESULT_DAMAGES[-1]  # --json of a check that fails on a NaN (it was
    reported = report_damaged(  # a traceback: JSON holds no NaN)
        folder / "rank0.pt", nan, [*options, "--results", str(folder), "--json"]
    )
    assert reported.exit_code == 1 and message in reported.stderr, describe(reported)
    assert "Traceback" not in reported.stderr
    document = json.loads(reported.stdout)
    assert document["run"]["max_gradient_relative_difference"] == "not finite"
    text = report_damaged(folder / "rank0.pt", nan, [*options, "--results", str(folder)])
    assert text.exit_code == 1 and "max relative difference not finite from" in text.stdout


def _first_tensor(saved: dict[str, Any], field: str) -> Any:
    """The first tensor of the mapping ``saved[field]``."""
    return next(iter(saved[field].values()))


def _renamed(mapping: dict[str, Any]) -> dict[str, Any]:
    """``mapping`` with its first key renamed."""
    (key, value), *rest = mapping.items()
    return {f"{key}.renamed": value, **dict(rest)}


#: Damages to rank 0's result of a checked 1F1B(2) run on a tiny GPT, each field still of
#: its kind so that the file passes its own checks: the exit status and what the one line
#: says.
RESULT_DAMAGES = [
    (
        lambda saved: saved.update(
            iterations=[[(r[0], 99, *r[2:]) for r in rows] for rows in saved["iterations"]]
        ),
        2,
        "rank0.pt: iterations[0][0]: is ('forward', 99, 0, 4), not the plan's ('forward', 0, 0, 4)",
    ),
    (
        lambda saved: saved.update(iterations=[rows[:-1] for rows in saved["iterations"]]),
        2,
        "rank0.pt: iterations[0][7]: is missing: the plan's ('backward', 1, 4, 8)",
    ),
    (lambda saved: saved.update(layers=saved["layers"][:-1]), 2, "rank0.pt: layers: are not"),
    (
        lambda saved: saved.update(
            iterations=[[(*r[:5], 1e300) for r in rows] for rows in saved["iterations"]]
        ),
        2,
        "rank0.pt: iterations[0][0]: has times that are not 0 <= start <= end <= the job's",
    ),
    (
        lambda saved: saved.update(iterations=[[*rows, rows[-1]] for rows in saved["iterations"]]),
        2,
        "rank0.pt: iterations[0][8]: is ('backward', 1, 4, 8), past the plan's 8 records",
    ),
    (
        lambda saved: saved.update(gradients=_renamed(saved["gradients"])),
        2,
        "rank0.pt: gradients: differs from stage 0's in",
    ),
    (
        lambda saved: saved["weights"].update(
            (k, v.reshape(-1)) for k, v in list(saved["weights"].items())[:1]
        ),
        2,
        'rank0.pt: weights["embed.tokens.weight"]: has shape (800,), not (50, 16)',
    ),
    (
        lambda saved: _first_tensor(saved, "gradients").view(-1).__setitem__(0, float("nan")),
        1,
        "gradients of plan are not all finite",
    ),  # a NaN gradient matches nothing, not even the reference's
]


def report_damaged(path: Path, damage: Callable[[dict[str, Any]], Any], args: list[str]) -> Any:
    """``tidgap run ARGS`` with the result file ``path`` damaged by ``damage`` (in place on
    the loaded result), then ``path`` restored."""
    import torch

    original = path.read_bytes()
    saved = torch.load(path, weights_only=False)
    damage(saved)
    torch.save(saved, path)
    try:
        return run_cli("run", *args)
    finally:
        path.write_bytes(original)


def assert_compared_and_baselines(document: dict[str, Any], other: Path) -> None:
    """The ``--json`` report ran ``other``, then the best GPipe and 1F1B, after the plan,
    every one's gradients within 1e-4."""
    labels = [run["label"] for run in document["baselines"]]
    assert labels[0] == str(other) and [label[:4] for label in labels[1:]] == ["GPip", "1F1B"]
    for run in (document["run"], *document["baselines"]):
        assert run["max_gradient_relative_difference"] < 1e-4


def test_a_torchrun_job_runs_compared_plans_and_baselines_in_turn(
    problem_file: Path, tmp_path: Path
) -> None:
    """--write-job with --compare and --baselines writes the other plans beside the job;
    --results reports every plan, and refuses a command that names fewer."""
    from tidgap.runtime.launch import launch

    plan = plan_file(tmp_path, "aligned", **PLANS["ordered-aligned"])
    other = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    options = [str(problem_file), str(plan), *MODEL, "--iterations", "1", "--warmup", "0"]
    options += ["--timeout", "50", "--check-gradients", "--compare", str(other), "--baselines"]
    job = tmp_path / "job.json"
    written = run_cli("run", *options, "--write-job", str(job))
    assert written.exit_code == 0, describe(written)
    alternates = Job.load(job).alternates
    assert alternates == [str(tmp_path / f"job.plan{k}.json") for k in (1, 2, 3)]
    assert Job.load(job).timeout == 200  # --timeout is per plan: the worker's covers 4
    problem = Problem.from_dict(problem_document())
    assert load_plan(alternates[0], problem) == load_plan(other, problem)
    launch(job, 2, threads=1, timeout=60, logs=tmp_path)
    folder = str(tmp_path / "results")
    document = json.loads(run_cli("run", *options, "--results", folder, "--json").stdout)
    assert_compared_and_baselines(document, other)
    fewer = run_cli("run", *options[:-3], "--baselines", "--results", folder)
    assert fewer.exit_code == 2, describe(fewer)
    assert "rank 0 ran 3 plan(s) in turn after the plan, this command's" in fewer.stderr
    swapped = [*options[:-2], str(plan), "--baselines"]  # the plan itself as --compare
    another = run_cli("run", *swapped, "--results", folder)
    assert another.exit_code == 2, describe(another)
    assert f"rank 0 ran another plan 1 run in turn than {plan} of this command" in (another.stderr)
    import torch

    for rank in (0, 1):  # the compared plan timed twice, in both ranks' files: they agree
        path = tmp_path / "results" / f"rank{rank}-plan1.pt"
        result = torch.load(path, weights_only=False)
        for field in ("iterations", "starts", "peak_bytes"):
            result[field] = result[field] * 2
        torch.save(result, path)
    uneven = run_cli("run", *options, "--results", folder)
    assert uneven.exit_code == 2, describe(uneven)
    first = tmp_path / "results" / "rank0-plan1.pt"
    assert f"{first}: iterations: is not a list of the job's 1 iterations" in uneven.stderr


def torchrun(processes: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``tidgap run ARGS`` under one torchrun agent starting ``processes`` processes."""
    (done,) = tidgap_under_torchrun(["run", *args], processes)
    return done


def test_tidgap_run_under_torchrun_runs_a_rank_and_rank_0_reports(
    problem_file: Path, tmp_path: Path
) -> None:
    """The one-command form: torchrun starts ``tidgap run`` on every process, each runs its
    own stage, and rank 0 alone prints the report (stdout only the JSON document) and
    writes the trace, with the compared plan and the baselines run in turn, every gradient
    checked and the replay computed."""
    plan = plan_file(tmp_path, "aligned", **PLANS["ordered-aligned"])
    other = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    trace = tmp_path / "trace.json"
    args = [str(problem_file), str(plan), *MODEL, *QUICK, "--check-gradients", "--json"]
    args += ["--trace", str(trace), "--replay"]
    done = torchrun(2, *args, "--compare", str(other), "--baselines")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["run"]["replay"]["predicted"] > 0
    assert json.loads(trace.read_text())["traceEvents"]
    assert_compared_and_baselines(document, other)
    for run in (document["run"], *document["baselines"]):
        assert len(run["measured"]["iterations"]) == 2
    assert document["run"]["recompute"] == [False, False]


def test_tidgap_run_under_torchrun_needs_a_process_per_stage(
    problem_file: Path, tmp_path: Path
) -> None:
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    done = torchrun(3, str(problem_file), str(plan), *MODEL, *QUICK)
    assert done.returncode != 0 and not done.stdout
    line = "stages: has 2 stages, and torchrun started 3 processes (WORLD_SIZE): one per stage"
    # once a rank, from each that gets there before torchrun stops the others
    assert 1 <= done.stderr.count(f"tidgap: error: {problem_file}: {line}") <= 3


@pytest.mark.parametrize(
    "case",
    [
        ("blow", "FUSED", "RuntimeError: Fuse blew on rank 1"),  # fails once the group is up
        # rank 1 hangs building the model: its own --timeout watchdog or rank 0's ends it
        # (rank 0's says "timed out waiting for the others at ...": first on a loaded machine)
        ("hang", "MLP", " timed out"),
    ],
)
def test_a_failing_or_hanging_rank_under_torchrun_ends_the_run(
    case: tuple[str, str, str], problem_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``case``: what rank 1 does, the model, and a line the run must print. No rank leaves a
    file in the temporary folder."""
    behaviour, model, message = case
    plan, model_args = misbehaving_rank1(monkeypatch, behaviour, model, tmp_path)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    started = time.monotonic()
    done = torchrun(2, str(problem_file), str(plan), *model_args, "--timeout", "10")
    assert done.returncode != 0 and not done.stdout
    assert time.monotonic() - started < 60
    assert message in done.stderr
    assert workers_under(tmp_path, "tidgap run") == []  # torchrun ended every rank
    assert list(temporary.glob("tidgap-*")) == []


def test_torchruns_variables_left_in_a_shell_say_so_at_the_timeout(
    problem_file: Path, tmp_path: Path
) -> None:
    """A shell holding torchrun's variables makes ``tidgap run`` one rank, which waits for
    the others until its timeout: the line says which variables and where the ranks meet
    (it said "worker timed out; exiting")."""
    from tidgap.runtime.launch import free_port

    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    port = str(free_port())
    variables = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": port}
    env = {**os.environ, **variables, "MASTER_ADDR": "127.0.0.1"}
    command = [sys.executable, "-m", "tidgap", "run", str(problem_file), str(plan), *MODEL]
    done = subprocess.run(
        [*command, "--iterations", "1", "--timeout", "3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 124, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    expected = f"tidgap run rank 0 timed out waiting for the others at 127.0.0.1:{port}"
    assert last.startswith(expected) and last.endswith("from here); exiting")
    assert "(torchrun's RANK, WORLD_SIZE" in last


def test_write_job_and_results_are_refused_under_torchrun(
    problem_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    as_torchrun(monkeypatch, "1")
    for option, value in (("--write-job", "x"), ("--results", "x"), ("--nproc", "2")):
        result = run_cli("run", str(problem_file), str(plan), *MODEL, option, value)
        assert result.exit_code == 2, describe(result)
        assert "under torchrun tidgap run runs its rank: no --write-job, --results, --nproc" in (
            result.stderr
        )
    assert not Path("x").exists()


def test_results_without_a_rank_file_exit_2(problem_file: Path, tmp_path: Path) -> None:
    plan = plan_file(tmp_path, "plan", **PLANS["flush-unequal"])
    (tmp_path / "empty").mkdir()
    result = run_cli(
        "run", str(problem_file), str(plan), *MODEL, "--results", str(tmp_path / "empty")
    )
    assert result.exit_code == 2, describe(result)
    assert result.stderr.strip().endswith("rank0.pt: rank 0 wrote no result")


def test_bad_results_are_one_line_before_any_warning(tmp_path: Path) -> None:
    """A recomputing plan's warning came first: two lines for one bad folder."""
    problem = write_json(tmp_path / "p.json", problem_document())
    plan = plan_file(tmp_path, "plan", **PLANS["recompute"])
    (tmp_path / "empty").mkdir()
    result = run_cli("run", str(problem), str(plan), *MODEL, "--results", str(tmp_path / "empty"))
    assert result.exit_code == 2, describe(result)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.strip().endswith("rank0.pt: rank 0 wrote no result")


def test_results_are_reported_with_the_options_they_ran_with(
    problem_file: Path, tmp_path: Path
) -> None:
    from tidgap.runtime.launch import launch

    plan = plan_file(tmp_path, "plan", **PLANS["flush-unequal"])
    options = [str(problem_file), str(plan), *MODEL, "--iterations", "1", "--warmup", "0"]
    job = tmp_path / "job.json"
    assert run_cli("run", *options, "--write-job", str(job)).exit_code == 0
    launch(job, 2, threads=1, timeout=60, logs=tmp_path)
    folder = str(tmp_path / "results")
    result = run_cli("run", *options, "--results", folder, "--check-gradients")
    assert result.exit_code == 2, describe(result)
    assert result.stderr.strip() == (
        f"tidgap: error: {folder}: rank 0 ran check_gradients False, this command gives True"
    )
    plain = run_cli("run", *options, "--results", folder)
    assert plain.exit_code == 0, describe(plain)
    other = run_cli("run", *options, "--results", folder, "--seed", "1")
    assert other.exit_code == 2, describe(other)
    assert other.stderr.strip() == (
        f"tidgap: error: {folder}: rank 0 ran seed 0, this command gives 1"
    )
    assert plain.stdout.splitlines()[1].startswith("plan: measured ")


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGKILL"])
def test_no_worker_outlives_an_interrupted_or_killed_run(
    signal_name: str, problem_file: Path, tmp_path: Path
) -> None:
    """SIGINT: the launcher kills the workers on its way out; SIGKILL (no way out): each
    worker's watchdog sees its parent gone and exits."""
    import signal
    import subprocess

    runs = tmp_path / "own-runs"
    runs.mkdir()
    plan = plan_file(tmp_path, "flush", **PLANS["flush-unequal"])
    environment = {**os.environ, "TMPDIR": str(runs), "TIDGAP_TEST_RANK1": "hang"}
    command = [sys.executable, "-c", "from tidgap.cli import main; main()", "run"]
    process = subprocess.Popen(
        [*command, str(problem_file), str(plan), *MODEL, "--timeout", "60"],
        env=environment,
        # As from a terminal: a test run in the background of a non-interactive shell
        # inherits SIGINT ignored, and so would this command (then Ctrl-C cannot reach it).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while len(workers_under(runs)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers_under(runs)) == 2
        process.send_signal(getattr(signal, signal_name))
        process.wait(timeout=15)
        deadline = time.monotonic() + 5
        while workers_under(runs) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert workers_under(runs) == []
    finally:
        process.kill()
        process.wait()
        process.stderr.close()
        for line in workers_under(runs):  # only if the test failed: end what it started
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)


def test_a_recorded_split_is_layer_indices_even_where_layers_are_named_by_digits() -> None:
    """The problem's boundaries [2] were read as names: the layer named '2' (index 0)."""
    from tidgap.cli.workers import boundaries_of

    problem = Problem.from_dict(problem_document())  # split recorded at [2]
    assert boundaries_of(problem, "p.json", None, ["2", "0", "1", "3"]) == [2]
