"""``tidgap run``'s results: rank files checked against the job and the plans that
wrote them (``--results``), and each run's figures with its gradients checked against one
process's forward and backward of the whole batch."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import click

from tidgap.cli.options import about_problem
from tidgap.cli.workers import launcher_running_user_code
from tidgap.model.errors import InputError
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.runtime.failures import StageNotReplayed
from tidgap.runtime.job import Job
from tidgap.runtime.report import (
    RunFigures,
    checked_in,
    load_results,
    merged_gradients,
    run_figures,
)
from tidgap.runtime.results_check import check_plan_results, rank_plans
from tidgap.runtime.worker import result_path

#: Job fields that may differ between a job and the command that reports its results
#: (``alternates``: the plan files written beside the job; their number must match).
FREE_FIELDS = ("results", "timeout", "alternates")


def same_job(job: Job, results: list[dict[str, Any]], alternates: int = 0) -> None:
    """Raise :class:`InputError` unless every rank ran ``job`` (up to :data:`FREE_FIELDS`)
    with ``alternates`` plans in turn after its plan: ``--results`` reports a run with the
    options it was written with."""
    wanted = dataclasses.asdict(job)
    defaults = {f.name: f.default for f in dataclasses.fields(Job)}  # fields newer than a run
    for rank, result in enumerate(results):
        ran = result.get("job") or {}
        for key, value in wanted.items():
            if key not in FREE_FIELDS and ran.get(key, defaults[key]) != value:
                raise InputError(
                    f"rank {rank} ran {key} {ran.get(key)!r}, this command gives {value!r}"
                )
        count = len(ran.get("alternates") or [])
        if count != alternates:
            raise InputError(
                f"rank {rank} ran {count} plan(s) in turn after the plan, this command's "
                f"--compare and --baselines give {alternates}"
            )


def same_plan(plan: Plan, label: str, index: int, results: list[dict[str, Any]]) -> None:
    """Raise :class:`InputError` unless every rank's result of the job's plan ``index``
    records ``plan`` (``label`` in this command; results that record no plan pass)."""
    wanted = plan.document()
    for rank, result in enumerate(results):
        if result.get("plan") not in (None, wanted):
            if index == 0:
                raise InputError(f"rank {rank} ran another plan than this command's PLAN")
            raise InputError(
                f"rank {rank} ran another plan {index} run in turn than {label} of this command"
            )


def reference_differences(
    model: Any, results: list[dict[str, Any]], problem: Problem, job: Job
) -> tuple[float, float | None]:
    """The largest relative difference of the run's gradients from one process's forward
    and backward of the whole batch, on the weights the workers used and in the mode of
    their checked iteration (in train mode each stage's random operators given the
    pipelined iteration's draws: :func:`~tidgap.runtime.reference.replayed_forward`), and
    with ``job.optimizer`` of the parameters after the workers' step from those after one
    process's step of the same optimizer over the whole model on the same weights and the
    run's gradients (``None`` without one). From the reference gradients instead, Adam's
    first step, about ``lr * g / (|g| + eps)``, would turn float32 noise in gradients near
    its ``eps`` into weight differences near the tolerance (8e-5 on a tiny GPT at lr
    1e-3): the gradients are checked against the reference, the step against the same
    step in one process."""
    import torch

    from tidgap.profiling.run import stage_modules
    from tidgap.profiling.user_code import user_errors
    from tidgap.runtime.draws import from_saved
    from tidgap.runtime.reference import (
        max_relative_difference,
        reference_gradients,
        reference_step,
        replayed_forward,
    )
    from tidgap.runtime.task import make_task

    dtype = torch.float64 if job.float64 else torch.float32
    cpu = torch.device("cpu")
    reference = dataclasses.replace(model, layers=copy.deepcopy(model.layers).to(dtype))
    layers = reference.layers
    weights: dict[str, Any] = {}
    for result in results:
        weights.update(result["weights"])
    layers.load_state_dict(weights)
    train = checked_in(results) == "train"
    layers.train(train)
    forward = None
    if train:
        stages = [module for _, _, module in stage_modules(reference, job.boundaries)]
        forward = replayed_forward(stages, [from_saved(r["draws"], cpu) for r in results])
    task = make_task(model, problem.batch_size, job.seed, cpu, dtype)
    ran = merged_gradients(results)
    # the user's layers under torch.autograd.grad (a reentrant checkpoint refuses it)
    with user_errors("--check-gradients: the one-process reference on the whole batch failed"):
        reference = reference_gradients(layers, task, forward)
    gradients = max_relative_difference(ran, reference)
    if job.optimizer is None:
        return gradients, None
    assert job.lr is not None, "a job with an optimizer has a learning rate"
    stepped = reference_step(layers, ran, job.optimizer, job.lr)
    got = {key: value for result in results for key, value in result["stepped"].items()}
    return gradients, max_relative_difference(got, stepped)


def checked_results(
    folder: str, todo: Sequence[tuple[str, Plan]], job: Job, model: Any, stages: int
) -> list[list[dict[str, Any]]]:
    """Per plan run in turn (``todo``: label and plan), the results the ``stages`` ranks
    wrote into ``folder`` (``--results``), each rank file checked against ``job`` and the
    plan at its own depth (:func:`~tidgap.runtime.results_check.check_plan_results`); an
    error names the folder or the file."""
    with about_problem(folder):
        found = [load_results(folder, stages, k) for k in range(len(todo))]
        tail = job.optimizer is not None
        for k, ((label, each), ranks) in enumerate(zip(todo, found, strict=True)):
            same_job(job, ranks, len(todo) - 1)
            same_plan(each, label, k, ranks)
            expected = rank_plans(each, model, job.boundaries, tail)
            check_plan_results(folder, k, ranks, expected, job.check_gradients)
    return found


def figures_of(
    problem: Problem,
    job: Job,
    plan: Plan,
    label: str,
    results: list[dict],
    model: Any,
    replay: dict[str, Any] | None = None,
) -> RunFigures:
    """The figures of a run's ``results``, its gradients checked when ``job`` asks, and
    with ``replay`` (the problem's document) the model's time with the run's median op
    times, with each iteration's own, and with times drawn from them
    (:func:`~tidgap.runtime.replay.replays`)."""
    difference = weights = None
    if job.check_gradients:
        with launcher_running_user_code(job.timeout, "run"):
            difference, weights = reference_differences(model, results, problem, job)
    figures = dataclasses.replace(
        run_figures(problem, plan, results, label, difference), weight_difference=weights
    )
    if replay is None:
        return figures
    from tidgap.runtime.replay import replays

    found = replays(replay, problem, plan, results)
    return dataclasses.replace(
        figures,
        replayed=found.medians,
        replayed_iterations=found.each,
        replayed_drawn=found.drawn,
    )


def figures_of_runs(
    problem: Problem,
    job: Job,
    todo: Sequence[tuple[str, Plan]],
    found: Sequence[list[dict]],
    model: Any,
    replay: dict[str, Any] | None,
    folder: str | None,
) -> list[RunFigures]:
    """:func:`figures_of` each plan run in turn (``todo``: label and plan; ``found``: its
    ranks' results). Results read from the rank files in ``folder`` (``--results``) that
    the figures cannot use are bad input naming the folder, or the rank file whose draws
    do not replay on the model's stage."""
    runs = []
    for k, ((label, plan), ranks) in enumerate(zip(todo, found, strict=True)):
        try:
            runs.append(figures_of(problem, job, plan, label, ranks, model, replay))
        except (InputError, StageNotReplayed) as error:
            if folder is None:
                raise
            if isinstance(error, InputError):  # one naming no file came from the rank files
                raise error.within(folder) from None
            raise InputError(
                f"do not replay on the model's stage: {error.__cause__}",
                ("draws",),
                source=str(result_path(folder, error.stage, k)),
            ) from None
    return runs


def require_within(runs: Sequence[RunFigures], tolerance: float) -> None:
    """:class:`click.ClickException` (exit 1) where a run's gradients, or its weights after
    the optimizer step, are not all finite or differ from one process's by more than
    ``tolerance`` (max relative difference)."""
    for figures in runs:
        for what, difference in (
            ("gradients", figures.gradient_difference),
            ("weights after the optimizer step", figures.weight_difference),
        ):
            if difference is not None and not math.isfinite(difference):
                raise click.ClickException(
                    f"run: {what} of {figures.label} are not all finite (NaN or infinity, in "
                    "the pipeline or in one process), so they cannot be checked"
                )
            if difference is not None and difference > tolerance:
                raise click.ClickException(
                    f"run: {what} of {figures.label} differ from one process's by "
                    f"{difference:.3g} (above {tolerance:g})"
                )
