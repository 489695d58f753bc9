"""``Job.load`` (issue 12 review): a job with an optimizer needs a positive finite learning
rate, refused with one :class:`InputError` naming the job file and ``lr`` otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import write_json
from tidgap.model.errors import InputError
from tidgap.runtime.job import JOB_FORMAT, Job

BASE = {
    "format": JOB_FORMAT,
    "problem": "p.json",
    "plan": "plan.json",
    "model": "gpt",
    "boundaries": [2],
    "results": "results",
}


def _job_file(folder: Path, **fields: Any) -> Path:
    return write_json(folder / "job.json", {**BASE, **fields})


@pytest.mark.parametrize("lr", [None, "0.01", 0, -0.1, True, [0.01], {"lr": 1}])
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
