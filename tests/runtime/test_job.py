"""What a worker's job takes, checked before any work: the job file field by field
(``Job.load``; an optimizer needs a positive finite learning rate) and the split recorded
in its problem (``boundaries_of``), each refusal one :class:`InputError` naming file and
field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import write_json
from tidgap.cli.workers import boundaries_of
from tidgap.model.errors import InputError
from tidgap.model.problem import Problem
from tidgap.profiling.synth import synth_problem
from tidgap.runtime.job import JOB_FORMAT, Job

BASE = {
    "format": JOB_FORMAT,
    "problem": "p.json",
    "plan": "plan.json",
    "model": "gpt",
    "boundaries": [2],
    "results": "results",
    "model_options": {},
}


def _job_file(folder: Path, **fields: Any) -> Path:
    return write_json(folder / "job.json", {**BASE, **fields})


@pytest.mark.parametrize("lr", [None, "0.01", 0, -0.1, True, [0.01], {"lr": 1}, 1e300])
def test_an_optimizer_without_a_positive_number_lr_is_refused(tmp_path: Path, lr: Any) -> None:
    path = _job_file(tmp_path, optimizer="sgd", lr=lr)
    with pytest.raises(InputError, match=r"job\.json: lr: expected a positive number"):
        Job.load(path)


def test_a_missing_or_infinite_lr_is_refused(tmp_path: Path) -> None:
    missing = _job_file(tmp_path / "missing", optimizer="adam")
    with pytest.raises(InputError, match=r"job\.json: lr: expected a positive number"):
        Job.load(missing)
    infinite = _job_file(tmp_path / "infinite", optimizer="adam", lr=float("inf"))
    with pytest.raises(InputError, match=r"job\.json: lr: must be a finite number"):
        Job.load(infinite)


@pytest.mark.parametrize(
    ("fields", "lr"),
    [({"optimizer": "adam", "lr": 0.001}, 0.001), ({"optimizer": "sgd", "lr": 2}, 2), ({}, None)],
)
def test_valid_learning_rates_load(tmp_path: Path, fields: dict[str, Any], lr: Any) -> None:
    job = Job.load(_job_file(tmp_path, **fields))
    assert job.lr == lr and job.optimizer == fields.get("optimizer")


def test_without_an_optimizer_lr_is_not_checked(tmp_path: Path) -> None:
    assert Job.load(_job_file(tmp_path, optimizer=None, lr=None)).lr is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"problem": 3}, "problem: expected a file name or example:NAME"),
        ({"boundaries": [2, "x"]}, "boundaries: expected a strictly increasing list of layer"),
        ({"boundaries": [2, 2]}, "boundaries: expected a strictly increasing list of layer"),
        ({"boundaries": [0]}, "boundaries: expected a strictly increasing list of layer"),
        ({"model_options": []}, "model_options: expected an object of tidgap profile's model"),
        ({"model_options": {"layers": "2"}}, "model_options: expected an object of tidgap"),
        ({"model_options": {"layers": 0}}, "model_options: expected an object of tidgap"),
        ({"model_options": {"zzz": 1}}, "model_options: expected an object of tidgap"),
        ({"model_options": {"input_shape": [8]}}, "model_options: expected an object of"),
        ({"results": ""}, "results: expected a folder name"),
        ({"iterations": 0}, "iterations: expected an integer in 1..2**31-1"),
        ({"warmup": 1.5}, "warmup: expected an integer in 0..2**31-1"),
        ({"threads": 10**20}, "threads: expected an integer in 1..1024"),
        ({"check_gradients": "yes"}, "check_gradients: expected true or false"),
        ({"seed": -1}, "seed: expected an integer in 0..2**63-1"),
        ({"timeout": 0}, "timeout: expected a positive number of seconds"),
        ({"alternates": "b.json"}, "alternates: expected a list of file names"),
        ({"device": "gpu"}, "device: expected cpu or cuda"),
        ({"alternates": ["b.json", ""]}, "alternates: expected a list of file names"),
    ],
)
def test_fields_of_the_wrong_kind_are_refused(
    tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    """A job written by hand (for torchrun) is checked field by field before any work."""
    path = _job_file(tmp_path, **fields)
    with pytest.raises(InputError) as caught:
        Job.load(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_a_job_without_model_options_is_refused(tmp_path: Path) -> None:
    """Else it would run the default GPT (GPT1-14), whatever the problem was profiled on."""
    document = {key: value for key, value in BASE.items() if key != "model_options"}
    path = write_json(tmp_path / "job.json", document)
    with pytest.raises(InputError, match="job.json: model_options: is missing"):
        Job.load(path)


def test_a_worker_given_a_bad_job_is_one_line_and_status_2(tmp_path: Path) -> None:
    """``python -m tidgap.runtime.worker JOB`` on a bad job: one line, exit 2, no traceback."""
    path = _job_file(tmp_path, threads=0)
    done = subprocess.run(
        [sys.executable, "-m", "tidgap.runtime.worker", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RANK": "0", "WORLD_SIZE": "1"},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"tidgap worker: error: {path}: threads: expected an integer in 1..1024\n"


def _worker(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    return subprocess.run(
        [sys.executable, "-m", "tidgap.runtime.worker", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environment, **env},
        cwd=path.parent,
    )


def _runnable_job(folder: Path, plan_problem: str = "two", **fields: Any) -> Path:
    """A job on a 2-stage problem named ``two`` whose plan names ``plan_problem``."""
    problem = synth_problem(0, 2, 8) | {"name": "two"}
    write_json(folder / "p.json", problem)
    plan = {"format": "tidgap.plan/1", "problem": plan_problem, "forward": [[8], [8]]}
    plan["backward"] = plan["forward"]
    write_json(folder / "plan.json", plan)
    return _job_file(
        folder, **{"model": "mlp:model", "model_options": {"input_shape": "4"}, **fields}
    )


@pytest.mark.parametrize(
    ("env", "fields", "plan_problem", "message"),
    [
        ({}, {}, "two", "RANK '' and WORLD_SIZE '' are not a process of a group"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, {}, "two", "RANK '2' and WORLD_SIZE '2' are not"),
        ({}, {}, "other", "plan.json: problem: is a plan for 'other', not for 'two'"),
        ({}, {"boundaries": [1, 2]}, "two", "job.json: boundaries: has 2 boundaries, the"),
        ({}, {"results": "p.json"}, "two", "job.json: results: is a file, not a folder"),
        # a traceback (exit 1) after the model was built
        (
            {"RANK": "0", "WORLD_SIZE": "3"},
            {},
            "two",
            "stages: has 2 stages, and torchrun started 3 processes (WORLD_SIZE): one per stage",
        ),
    ],
)
def test_a_worker_checks_its_launch_and_its_jobs_files_first(
    tmp_path: Path, env: dict[str, str], fields: dict[str, Any], plan_problem: str, message: str
) -> None:
    """Before any work, without the launcher's variables, or with a plan for another
    problem or a split of another stage count: one line, exit 2."""
    if env == {} and not fields and plan_problem == "two":
        env = {}  # no RANK, no WORLD_SIZE
    elif not env:
        env = {"RANK": "0", "WORLD_SIZE": "2"}
    done = _worker(_runnable_job(tmp_path, plan_problem, **fields), env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert done.stderr.startswith("tidgap worker: error: ")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model_options": {"layers": 2}}, "job.json: model_options: mlp:model: --layers applies"),
        ({"boundaries": [9]}, "job.json: boundaries: 9 is past the model's last layer"),
    ],
)
def test_a_worker_checks_the_model_its_job_describes(
    tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    """Options for another model, or a split past the model's layers: one line naming the
    job's file and field, exit 2."""
    pytest.importorskip("torch")
    (tmp_path / "mlp.py").write_text(
        "from torch import nn\nmodel = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))\n"
    )
    path = _runnable_job(tmp_path, **fields)
    done = _worker(path, {"RANK": "0", "WORLD_SIZE": "2", "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("tidgap worker: error: "), done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({}, "p.json: source.split.boundaries: records no split"),
        ({"split": {"boundaries": ["2"]}}, "p.json: source.split.boundaries: is not a list of"),
        ({"split": {"boundaries": [True]}}, "p.json: source.split.boundaries: is not a list of"),
        ({"split": {"boundaries": [9]}}, "p.json: source.split.boundaries: does not fit the model"),
    ],
)
def test_the_recorded_split_is_checked(source: dict[str, Any], message: str) -> None:
    """The split a problem records (no --split given): missing, malformed or not this
    model's, each with its own one line."""
    document = synth_problem(0, 2, 8) | {"source": source}
    with pytest.raises(InputError) as caught:
        boundaries_of(Problem.from_dict(document), "p.json", None, ["0", "1", "2", "3"])
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_recorded_split_that_fits_is_used() -> None:
    document = synth_problem(0, 2, 8) | {"source": {"split": {"boundaries": [3]}}}
    assert boundaries_of(Problem.from_dict(document), "p.json", None, ["0", "1", "2", "3"]) == [3]


def test_alternates_follow_the_plan(tmp_path: Path) -> None:
    job = Job.load(_job_file(tmp_path, alternates=["b.json", "c.json"]))
    assert job.plans == ["plan.json", "b.json", "c.json"]
    assert Job.load(_job_file(tmp_path / "alone")).plans == ["plan.json"]


@pytest.mark.parametrize(("stop", "status"), [(True, 0), (False, 124)])
def test_a_stopped_watchdog_lets_the_process_live(stop: bool, status: int) -> None:
    """Under torchrun rank 0 reports after its run, past the run's timeout perhaps: its
    watchdog is stopped first. Unstopped, it ends the process (status 124)."""
    script = (
        "import time\n"
        "from tidgap.runtime.worker import start_watchdog\n"
        "watchdog = start_watchdog(0.2)\n"
        f"if {stop}: watchdog.set()\n"
        "time.sleep(1.5)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == status, done.stderr


@pytest.mark.parametrize(("rank", "expected"), [("1", (1, 2)), ("", None)])
def test_torchrun_is_recognised_by_its_whole_environment(
    rank: str, expected: tuple[int, int] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.torchrun_env import as_torchrun
    from tidgap.runtime.worker import torchrun_rank

    as_torchrun(monkeypatch, rank)
    assert torchrun_rank() == expected


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RANK", "one"),
        ("RANK", "-1"),
        ("RANK", "2"),
        ("WORLD_SIZE", "0"),
        ("LOCAL_RANK", "x"),
        ("LOCAL_WORLD_SIZE", "1"),  # with LOCAL_RANK 1
        ("MASTER_PORT", "notaport"),
        ("MASTER_PORT", "70000"),
    ],
)
def test_a_torchrun_environment_torchrun_never_sets_is_one_line_naming_it(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """These crashed later with a traceback (``int('x')``, an assertion, the rendezvous)."""
    from tests.support.torchrun_env import as_torchrun
    from tidgap.runtime.worker import torchrun_rank

    as_torchrun(monkeypatch, "1")
    monkeypatch.setenv(variable, value)
    named = "LOCAL_RANK" if variable == "LOCAL_WORLD_SIZE" else variable
    with pytest.raises(InputError, match="is not what torchrun sets") as caught:
        torchrun_rank()
    assert caught.value.source == named


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("", 1), ("0", 1), ("x", 1)])
def test_local_processes_come_from_torchruns_local_world_size(
    value: str, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tidgap.runtime.worker import local_processes

    monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
    assert local_processes() == expected


def test_the_batch_room_counts_the_processes_on_this_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One stage process of a 2-stage run here (torchrun, a machine each) needs half the
    room of both."""
    torch = pytest.importorskip("torch")
    import tidgap.optimize.memory
    from tidgap.cli.workers import require_batch_room

    asked: list[int] = []
    monkeypatch.setattr(
        tidgap.optimize.memory, "require_available", lambda needed, *_: asked.append(needed)
    )
    model = type("Model", (), {"input": staticmethod(lambda b, d: torch.zeros(b, 6))})()
    problem = Problem.from_dict(synth_problem(0, 2, 8, 1, 0.5, "affine", "tiny"))
    require_batch_room(model, problem, "problem.json")
    require_batch_room(model, problem, "problem.json", processes=1)
    assert asked == [2 * 8 * 6 * 4, 8 * 6 * 4]
