"""The optimizer step as each stage's tail: ``tidgap run --optimizer`` (real 2-process gloo
runs of a tiny MLP: the tail op on every rank after its last backward, the weights after one
step against one process's step), ``tidgap profile --optimizer`` (positive tails, recorded
in ``source``), the warnings, and bad options (exit 2, one line, nothing started)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.runtime.test_run import MODEL, plan_file, problem_document  # noqa: E402
from tests.support.cli_helpers import describe, run_cli, write_json  # noqa: E402
from tidgap.cli.run_caveats import optimizer_caveats  # noqa: E402
from tidgap.model.errors import InputError  # noqa: E402
from tidgap.model.problem import Problem  # noqa: E402
from tidgap.runtime.job import JOB_FORMAT, Job  # noqa: E402
from tidgap.runtime.optimizers import build_optimizer, step  # noqa: E402
from tidgap.runtime.reference import max_relative_difference  # noqa: E402
from tidgap.runtime.report import load_results, measured_timeline, stage_busy  # noqa: E402

#: A flush plan whose stage 1 cuts its first forward from two upstream chunks (batch 8).
PLAN = {"forward": [[2, 6], [4, 4]], "backward": [[2, 6], [4, 4]]}
#: Learning rates large enough that one step moves the weights far beyond the tolerance.
LR = {"sgd": "0.5", "adam": "0.05"}


def untailed_problem(folder: Path) -> Path:
    """The MLP's 2-stage problem with every tail 0 (the prediction counts no step)."""
    document = problem_document()
    for stage in document["stages"]:
        stage["tail"] = 0
    return write_json(folder / "problem.json", document)


def ran_job(folder: Path, options: list[str]) -> list[dict[str, Any]]:
    """Write the job of ``tidgap run OPTIONS``, run its 2 workers, return their results."""
    from tidgap.runtime.launch import launch

    job = folder / "job.json"
    written = run_cli("run", *options, "--write-job", str(job))
    assert written.exit_code == 0, describe(written)
    launch(job, 2, threads=1, timeout=60, logs=folder)
    return load_results(folder / "results", 2)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_each_rank_steps_after_its_last_backward_as_one_process_would(
    optimizer: str, tmp_path: Path
) -> None:
    problem = untailed_problem(tmp_path)
    options = [str(problem), str(plan_file(tmp_path, "plan", **PLAN)), *MODEL]
    options += ["--optimizer", optimizer, "--lr", LR[optimizer], "--check-gradients"]
    options += ["--iterations", "2", "--warmup", "1", "--timeout", "60"]
    results = ran_job(tmp_path, options)
    for result in results:
        for rows in result["iterations"]:
            tails = [row for row in rows if row[0] == "tail"]
            assert len(tails) == 1, rows
            last_backward = max(row[5] for row in rows if row[0] == "backward")
            assert last_backward <= tails[0][4] <= tails[0][5]
        # the checked step moved this stage's weights well beyond the tolerance
        before = {key: result["weights"][key] for key in result["stepped"]}
        assert max_relative_difference(result["stepped"], before) > 1e-2

    folder = str(tmp_path / "results")
    report = run_cli("run", *options, "--results", folder, "--json")
    assert report.exit_code == 0, describe(report)
    document = json.loads(report.stdout)
    assert document["optimizer"] == {"name": optimizer, "lr": float(LR[optimizer])}
    run = document["run"]
    assert run["max_gradient_relative_difference"] < 1e-4
    assert run["max_weight_relative_difference"] < 1e-4
    assert "the prediction does not count the " + optimizer in report.stderr

    text = run_cli("run", *options, "--results", folder)
    assert text.exit_code == 0, describe(text)
    assert f"tail torch.optim.{'SGD' if optimizer == 'sgd' else 'Adam'}(lr=" in text.stdout
    assert "weights after one optimizer step: max relative difference" in text.stdout

    # the same results with a rank's step undone fail the weight check (exit 1)
    rank1 = tmp_path / "results" / "rank1.pt"
    damaged = torch.load(rank1, weights_only=True)
    damaged["stepped"] = {key: damaged["weights"][key] for key in damaged["stepped"]}
    torch.save(damaged, rank1)
    undone = run_cli("run", *options, "--results", folder)
    assert undone.exit_code == 1, describe(undone)
    assert (
        undone.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "tidgap: error: run: weights after the optimizer step of plan differ from one process's"
        )
    )


def test_every_compared_plan_checks_its_step_against_a_fresh_optimizer(tmp_path: Path) -> None:
    # Adam keeps state: each plan's checked step (and a second try in eval mode) steps an
    # optimizer of its own, as the one-process reference does, not the one the plan before
    # stepped
    problem = untailed_problem(tmp_path)
    plan = plan_file(tmp_path, "plan", **PLAN)
    other = plan_file(tmp_path, "other", forward=[[4, 4], [8]], backward=[[4, 4], [8]])
    result = run_cli(
        "run", str(problem), str(plan), *MODEL, "--compare", str(other), "--optimizer", "adam",
        "--lr", LR["adam"], "--check-gradients", "--iterations", "1", "--warmup", "0",
        "--timeout", "60",
    )  # fmt: skip
    assert result.exit_code == 0, describe(result)
    lines = [line for line in result.stdout.splitlines() if "weights after one optimizer" in line]
    assert len(lines) == 2, result.stdout


def test_the_trace_shows_each_ranks_tail(tmp_path: Path) -> None:
    problem = untailed_problem(tmp_path)
    plan = plan_file(tmp_path, "plan", **PLAN)
    trace = tmp_path / "trace.json"
    result = run_cli(
        "run", str(problem), str(plan), *MODEL, "--optimizer", "sgd", "--iterations", "1",
        "--warmup", "0", "--timeout", "60", "--trace", str(trace), "--json",
    )  # fmt: skip
    assert result.exit_code == 0, describe(result)
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    measured = {e["pid"] for e in events if e["name"] == "process_name" and "measured" in str(e)}
    tails = [e for e in events if e["ph"] == "X" and e["name"] == "tail" and e["pid"] in measured]
    assert sorted(e["tid"] for e in tails) == sorted({e["tid"] for e in tails}) and len(tails) == 2
    run = json.loads(result.stdout)["run"]
    assert run["max_gradient_relative_difference"] is None
    assert "max_weight_relative_difference" not in run  # not checked


def test_the_tail_counts_in_the_busy_time_and_the_timeline() -> None:
    rows = [("forward", 0, 0, 4, 0.0, 1.0), ("recv_backward", 0, 0, 4, 1.0, 2.0)]
    rows += [("backward", 0, 0, 4, 2.0, 4.0), ("tail", 0, 0, 0, 4.0, 4.5)]
    assert stage_busy(rows) == pytest.approx(3.5)
    problem = Problem.from_dict(json.loads(json.dumps(problem_document())))
    timeline = measured_timeline(problem, [rows, rows], "measured")
    tail = timeline.stages[0][-1]
    assert (tail.kind, tail.microbatch, tail.samples, tail.size) == ("T", None, None, 0)
    assert (tail.start, tail.end) == pytest.approx((4000.0, 4500.0))  # ms
    assert timeline.iteration_time == pytest.approx(4500.0)


def test_a_stage_without_weights_steps_nothing() -> None:
    assert build_optimizer("adam", torch.nn.Tanh().parameters(), 0.1) is None
    step(None)  # a no-op tail
    layer = torch.nn.Linear(2, 2)
    layer.bias.requires_grad_(False)
    built = build_optimizer("sgd", layer.parameters(), 0.1)
    assert built is not None and built.param_groups[0]["params"] == [layer.weight]
    layer(torch.ones(1, 2)).sum().backward()
    before = layer.weight.detach().clone()
    step(built)
    assert torch.allclose(layer.weight, before - 0.1 * torch.ones(2, 2))
    assert layer.weight.grad is None  # zero_grad(set_to_none=True)


def test_profile_writes_each_stages_step_as_its_tail(tmp_path: Path) -> None:
    out = tmp_path / "profiled.json"
    result = run_cli(
        "profile", "tests.runtime.pipeline_models:MLP", "--input-shape", "6", "--stages", "2",
        "--batch-size", "8", "--split", "2", "--repeats", "2", "--warmup", "1",
        "--optimizer", "adam", "--lr", "0.01", "--out", str(out), "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, describe(result)
    document = json.loads(out.read_text(encoding="utf-8"))
    tails = [stage["tail"] for stage in document["stages"]]
    assert len(tails) == 2 and min(tails) > 0
    timing = document["source"]["timing"]
    assert timing["optimizer"] == {"name": "adam", "lr": 0.01}
    assert timing["tail"].startswith("torch.optim.Adam(lr=0.01) over the stage's parameters")
    loaded = Problem.from_dict(document)
    assert [stage.tail for stage in loaded.stages] == tails
    assert optimizer_caveats(loaded, "p.json", "adam") == []
    assert optimizer_caveats(loaded, "p.json", None) == [
        "p.json: source.timing.optimizer: the tails time adam, this run steps nothing "
        "(no --optimizer)"
    ]
    assert optimizer_caveats(loaded, "p.json", "sgd") == [
        "p.json: source.timing.optimizer: the tails time adam, this run steps with sgd"
    ]


def test_tails_of_zero_warn_only_with_an_optimizer(tmp_path: Path) -> None:
    problem = Problem.from_dict(json.loads(untailed_problem(tmp_path).read_text()))
    assert optimizer_caveats(problem, "p.json", None) == []
    assert optimizer_caveats(problem, "p.json", "sgd") == [
        "p.json: every stage's tail is 0, so the prediction does not count the sgd step "
        "(profile with --optimizer sgd)"
    ]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--lr", "0.1"], "--lr needs --optimizer"),
        (["--optimizer", "adam", "--lr", "0"], "Invalid value for '--lr': 0.0 is not in the range"),
        (["--optimizer", "adam", "--lr", "-1"], "Invalid value for '--lr'"),
        (["--optimizer", "sgd", "--lr", "1e308"], "Invalid value for '--lr': 1e+308 is not in"),
        (["--optimizer", "rmsprop"], "Invalid value for '--optimizer': 'rmsprop' is not one of"),
    ],
)
def test_bad_optimizer_options_exit_2_in_one_line(
    options: list[str], expected: str, tmp_path: Path
) -> None:
    problem = untailed_problem(tmp_path)
    plan = plan_file(tmp_path, "plan", **PLAN)
    out = tmp_path / "never.json"
    for command, args in (
        ("run", [str(problem), str(plan), *MODEL]),
        ("profile", ["tests.runtime.pipeline_models:MLP", "--input-shape", "6", "--out", str(out)]),
    ):
        result = run_cli(command, *args, *options)
        assert result.exit_code == 2, describe(result)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"tidgap: error: {command}: "), lines
        assert expected in lines[0]
    assert not out.exists()


def test_a_job_with_an_unknown_optimizer_is_refused(tmp_path: Path) -> None:
    job = Job("p.json", "plan.json", "gpt", [2], "results", {}, optimizer="adam", lr=0.01)
    job.save(tmp_path / "job.json")
    assert Job.load(tmp_path / "job.json") == job
    bad = write_json(
        tmp_path / "bad.json",
        {"format": JOB_FORMAT, "problem": "p", "plan": "q", "model": "gpt", "boundaries": [],
         "results": "r", "model_options": {}, "optimizer": "lamb"},
    )  # fmt: skip
    with pytest.raises(InputError, match="optimizer: expected one of sgd, adam or null"):
        Job.load(bad)
