"""Running plans in turn with one worker per stage: started here (the plans and the job
written to a temporary folder, the workers' logs kept if one fails) or as this process's
rank under torchrun."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import click

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.outputs.files import write_json
from tidgap.runtime.job import Job
from tidgap.runtime.report import load_results


def write_plans(paths: Sequence[str], plans: Sequence[Plan]) -> None:
    """Write each of ``plans`` as a plan file at the path beside it in ``paths``."""
    for path, plan in zip(paths, plans, strict=True):
        write_json(path, plan.document())


def job_running(job: Job, plans: Sequence[Plan], folder: str) -> Job:
    """``job`` running ``plans`` in turn: they are written into ``folder`` as its plan and
    alternates, its results go there, and its timeout (per plan) covers them all."""
    paths = [str(Path(folder) / f"plan{k}.json") for k in range(len(plans))]
    write_plans(paths, plans)
    return dataclasses.replace(
        job.covering(len(plans)), results=folder, plan=paths[0], alternates=paths[1:]
    )


def results_under_torchrun(
    job: Job, plans: Sequence[Plan], rank: int, world_size: int
) -> list[list[dict]] | None:
    """Under torchrun: run this process's rank of ``plans`` in turn (``job.timeout`` per
    plan); on rank 0, per plan, every rank's results; ``None`` on the others."""
    from tidgap.runtime.worker import run_here

    return run_here(job.covering(len(plans)), rank, world_size, plans)


def launched(problem: Problem, job: Job, plans: Sequence[Plan], label: str) -> list[list[dict]]:
    """Run ``plans`` in turn, iteration by iteration, with one worker per stage (the plans
    written to the run's temporary folder); per plan, the ranks' results. ``job.timeout``
    is per plan. ``label`` begins a failed worker's error line (``run: PLAN``)."""
    from tidgap.runtime.launch import WorkerError, launch

    folder: str | None = tempfile.mkdtemp(prefix="tidgap-run-")
    try:
        job = job_running(job, plans, folder)
        job_path = Path(folder) / "job.json"
        job.save(job_path)
        try:
            launch(job_path, problem.num_stages, job.threads, job.timeout, folder)
        except WorkerError as error:
            kept, folder = folder, None  # the workers' logs stay for the user
            raise click.ClickException(f"{label}: {error} (the workers' logs: {kept})") from None
        return [load_results(folder, problem.num_stages, k) for k in range(len(plans))]
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def results_of(
    problem: Problem,
    job: Job,
    plans: Sequence[Plan],
    label: str,
    here: tuple[int, int] | None,
) -> list[list[dict]] | None:
    """Run ``plans`` in turn: with workers started here (``here`` ``None``,
    :func:`launched`), else as torchrun's rank ``here[0]`` of ``here[1]``
    (:func:`results_under_torchrun`). Per plan, the ranks' results; ``None`` on a torchrun
    rank other than 0."""
    if here is None:
        return launched(problem, job, plans, label)
    return results_under_torchrun(job, plans, *here)
