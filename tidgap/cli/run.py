"""``tidgap run``: execute a plan on torch.distributed (one process per stage on this
machine, chunks over gloo or NCCL; under torchrun, this process's stage, rank 0
reporting), check its gradients and measure it against the prediction.

Everything that can be checked before a worker starts is (the plan against the problem,
the split against the model, the model's import), as bad input: one line, exit 2. A worker
that fails, or a run past ``--timeout``, exits 1 naming the rank, with every worker killed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from tidgap.cli.launching import results_of, write_plans
from tidgap.cli.main import end_rank_on_signals
from tidgap.cli.options import (
    count_range,
    describe_problem,
    echo_json,
    json_option,
    problem_argument,
    require_folder_name,
)
from tidgap.cli.profile import learning_rate, optimizer_options
from tidgap.cli.run_caveats import caveats, shared_cores
from tidgap.cli.run_results import checked_results, figures_of_runs, require_within
from tidgap.cli.workers import (
    named_by_split,
    require_batch_room,
    require_consistent_recompute,
    require_device,
    require_probe_runs,
    worker_job,
    worker_options,
)
from tidgap.model.errors import InputError
from tidgap.model.fileio import read_json
from tidgap.model.plan import Plan, load_plan
from tidgap.model.problem import Problem, load_problem, problem_path
from tidgap.model.text import printable, unique_labels
from tidgap.outputs.files import check_outputs, timeline_files, write_files
from tidgap.profiling.user_code import model_inputs
from tidgap.runtime.job import Job
from tidgap.runtime.optimizers import describe
from tidgap.runtime.report import (
    RunFigures,
    format_figures,
    speedup_line,
    speedup_record,
)
from tidgap.runtime.worker import local_processes, require_world, torchrun_rank

#: Largest max relative gradient difference accepted, by precision.
TOLERANCE = {False: 1e-4, True: 1e-10}

EPILOG = """\b
Recomputation: a stage whose backward partition has a boundary that is not one of its
forward boundaries (tidgap search may return such plans; --no-recompute avoids them)
keeps its inputs instead of its graphs and re-runs the forward of each backward chunk
before its backward, so its backwards cost about one forward more. The prediction prices
its forwards and backwards as tidgap calibrate measured them in recomputing runs (a
calibrated problem's source.calibration.recompute); without those, each backward as the
profiled forward plus backward of the same samples (a problem profiled with tidgap
profile --recompute has that in every backward already). In train
mode the recomputed forward replays, per sample, the random draws (dropout masks) the
stage's forwards made; where a random op's values are not per sample (noise shared by the
samples, a fused kernel's generator seed) it draws anew and the report says so. Its
memory is predicted from what tidgap profile measured it holds (source.memory: inputs,
random draws, one backward's working set), the model's figure beside it; a run-priced
tidgap search of such a profile limits memory by the same prediction (--pricing model: by
the model's). Flush plans with equal partitions, GPipe and 1F1B never recompute.

\b
Several machines (torchrun): run this command under torchrun on each machine NODE of N,
N*K processes, one per stage (the files at the same paths on every machine); each runs its
stage and rank 0 prints the report:
  torchrun --nnodes N --nproc-per-node K --node-rank NODE \\
      --master-addr HOST --master-port PORT -m tidgap run PROBLEM PLAN --model ...
Or with files: write the job here, copy it and the files it names (same paths) to every
machine, and run on each machine NODE of N:
  tidgap run PROBLEM PLAN --model ... --write-job job.json
  torchrun --nnodes N --nproc-per-node K --node-rank NODE \\
      --master-addr HOST --master-port PORT -m tidgap.runtime.worker job.json
(N*K processes, one per stage); rank R writes rank<R>.pt into the job's results folder.
Gather them in one folder and report with the same options:
  tidgap run PROBLEM PLAN --model ... --results FOLDER
With --compare and --baselines the job runs those plans in turn too (written beside it as
JOB.plan1.json, ...; rank R also writes rank<R>-plan<K>.pt).
"""


def alternate_files(job: str, count: int) -> list[str]:
    """Where ``--write-job JOB`` writes the ``count`` plans run in turn after the plan:
    ``JOB``'s name with ``.plan1.json``, ``.plan2.json``, ..."""
    path = Path(job)
    return [str(path.with_name(f"{path.stem}.plan{k}.json")) for k in range(1, count + 1)]


def results_beside(job: str) -> Path:
    """Where the workers of ``--write-job JOB`` write their results: ``results`` beside it."""
    return Path(job).parent / "results"


def to_run(
    problem: Problem, plan: Plan, with_baselines: bool, compared: Sequence[str]
) -> list[tuple[str, Plan]]:
    """``(label, plan)`` of every plan the run runs in turn: the plan, then the
    ``--compare`` plan files (each checked against ``problem``, labelled with its name,
    control characters escaped), then with ``--baselines`` the best GPipe and the best 1F1B
    (as the run prices them: :func:`~tidgap.runtime.pricing.run_priced_baselines`); labels
    made unique (:func:`unique_labels`), as the report and the trace's keys need."""
    runs = [
        ("plan", plan),
        *((printable(path), load_plan(path, problem, refuse_other=True)) for path in compared),
    ]
    if with_baselines:
        from tidgap.runtime.pricing import run_priced_baselines
        from tidgap.schedules.baselines import best_baselines
        from tidgap.schedules.families import SCHEDULES, TIMED_BASELINES, baseline_label

        best = run_priced_baselines(problem, best_baselines(problem))
        for name in TIMED_BASELINES:
            m = best[name].microbatches
            runs.append((baseline_label(name, m), SCHEDULES[name].baseline(problem, m)))
    labels = unique_labels([label for label, _ in runs])
    return [(label, each) for label, (_, each) in zip(labels, runs, strict=True)]


@click.command(name="run", epilog=EPILOG)
@problem_argument()
@click.argument("plan_file", metavar="PLAN")
@worker_options
@click.option(
    "--check-gradients",
    is_flag=True,
    help="Compare every parameter's gradient after one extra pipelined iteration with one "
    "process's forward and backward of the whole batch, both in train mode with the "
    "pipeline's dropout masks replayed (in eval mode where the model has batch norm or draws "
    "that cannot be replayed per sample; the report says why); exit 1 above 1e-4 (float32) "
    "or 1e-10 (--float64).",
)
@click.option(
    "--float64",
    is_flag=True,
    help="Model and inputs in double precision (the prediction stays a float32 run's: "
    "profiles measure float32).",
)
@optimizer_options
@click.option(
    "--baselines",
    is_flag=True,
    help="Also run the best GPipe and the best 1F1B (by prediction) and print the "
    "measured speedup beside the predicted one.",
)
@click.option(
    "--compare",
    "compared",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="PLAN2",
    help="Also run this plan file for PROBLEM (repeatable) and print the speedup over it. "
    "The plan, these and the baselines run in turn, iteration by iteration, in the same "
    "processes, so that all meet the machine's same moments.",
)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    help="Write a Chrome trace: each run's predicted and measured timelines.",
)
@click.option(
    "--replay",
    is_flag=True,
    help="Also evaluate the plan with this run's own op and transfer times: their medians "
    "(per stage, direction and size; the model's error once the op times are right, to tell a "
    "wrong op time from a wrong model), each op's drawn from a random timed iteration (what "
    "their variation costs), and each timed iteration's own (what the dependencies leave).",
)
@click.option(
    "--nproc",
    type=count_range(1),
    metavar="N",
    help="Stage processes to start on this machine: one per stage, so N must be PROBLEM's "
    "stage count (the default). On several machines, start this command under torchrun "
    "instead (below).",
)
@click.option(
    "--write-job",
    type=click.Path(dir_okay=False),
    help="Write the plan's job file for torchrun (results beside it) instead of running.",
)
@click.option(
    "--results",
    type=click.Path(file_okay=False),
    help="Report the run whose workers wrote rank<R>.pt into this folder (torchrun on a "
    "--write-job job given the same options) instead of running.",
)
@json_option
def run_command(
    problem: str,
    plan_file: str,
    model_reference: str,
    split: str | None,
    iterations: int,
    warmup: int,
    threads: int,
    check_gradients: bool,
    float64: bool,
    optimizer: str | None,
    lr: float | None,
    seed: int,
    device: str,
    transport: str,
    baselines: bool,
    compared: tuple[str, ...],
    timeout: float,
    trace: str | None,
    replay: bool,
    nproc: int | None,
    write_job: str | None,
    results: str | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Execute PLAN for PROBLEM on torch.distributed (one process per stage on this
    machine, or under torchrun one per stage across machines; chunks over gloo, or NCCL
    between GPUs of their own: --transport), and print the measured iteration time beside
    the prediction.

    MODEL and its options are those PROBLEM was profiled from (tidgap profile); every
    process builds it from --seed and keeps its stage's layers. Times are in PROBLEM's
    unit: the median (of an even count the lower middle one, the iteration --trace
    shows), min and max over --iterations after --warmup, the error against the
    prediction in per cent, and each stage's busy time. With --optimizer each stage
    steps its parameters after its last backward (a "tail" op, in the busy time and the
    trace; --check-gradients also checks the weights after one step). Needs PyTorch.
    """
    lr = learning_rate(optimizer, lr)
    here = torchrun_rank()
    if here is not None:
        end_rank_on_signals()
    if here is not None and (write_job, results, nproc) != (None, None, None):
        raise click.UsageError(
            "under torchrun tidgap run runs its rank: no --write-job, --results, --nproc"
        )
    if results is not None and write_job is not None:
        raise click.UsageError("--results reports a finished run: no --write-job")
    require_folder_name(results, "--results")
    if write_job is not None and (as_json or trace is not None or replay or nproc is not None):
        raise click.UsageError(
            "--write-job writes the job and runs nothing: no --json, --trace, --replay, --nproc"
        )
    if write_job is not None and results_beside(write_job).is_file():
        raise InputError(
            f"its results go to {results_beside(write_job)}, a file, not a folder",
            source="--write-job",
        )
    arguments = {"PROBLEM": problem, "PLAN": plan_file, **model_inputs("--model", model_reference)}
    inputs = [*arguments.items(), *(("--compare", path) for path in compared)]
    loaded = load_problem(problem)
    if here is not None:
        require_world(here[1], loaded, problem)
    if nproc is not None and nproc != loaded.num_stages:
        raise InputError(
            f"{nproc} processes for {loaded.num_stages} stages: tidgap run starts one process "
            "per stage (on several machines, start it under torchrun)",
            source="--nproc",
        )
    plan = load_plan(plan_file, loaded, refuse_other=True)
    todo = to_run(loaded, plan, baselines, compared)  # every plan checked before any warning
    alternates = [] if write_job is None else alternate_files(write_job, len(todo) - 1)
    check_outputs(
        None,
        trace if here is None or here[0] == 0 else None,  # rank 0 alone writes it
        ("--write-job", write_job),
        *(("--write-job", path) for path in alternates),
        inputs=inputs,
    )
    job, model = worker_job(
        problem,
        plan_file,
        loaded,
        model_reference,
        split,
        options,
        "run",
        iterations=iterations,
        warmup=warmup,
        threads=threads,
        check_gradients=check_gradients,
        float64=float64,
        seed=seed,
        device=device,
        transport=transport,
        timeout=timeout,
        optimizer=optimizer,
        lr=lr,
    )
    loaded = named_by_split(loaded, job.boundaries, model)
    files = [plan_file, *compared]  # the baselines, after them, never recompute
    named = [(path, each) for path, (_, each) in zip(files, todo, strict=False)]
    require_consistent_recompute(model, job.boundaries, named)
    if results is not None:  # before any warning: a bad folder is one line
        found = checked_results(results, todo, job, model, loaded.num_stages)
    if write_job is None and results is None:
        processes = loaded.num_stages if here is None else None  # torchrun: its choice
        require_device(device, transport, processes)  # before the warnings: one line
    lines = caveats(loaded, problem, plan, model, optimizer, device, job.boundaries, float64)
    if here is None and write_job is None and results is None:  # the stages start here
        lines += filter(None, [shared_cores(loaded.num_stages, threads, device)])
    for line in lines:
        if here is None or here[0] == 0:  # under torchrun, once
            click.echo(f"tidgap: warning: {printable(line)}", err=True)
    require_probe_runs(model, job, loaded.unit, "run")  # after the warning of another model
    if write_job is not None:
        folder = results_beside(write_job)
        write_plans(alternates, [each for _, each in todo[1:]])
        paths = [os.path.abspath(path) for path in alternates]
        job = dataclasses.replace(
            job.covering(len(todo)), results=os.path.abspath(folder), alternates=paths
        )
        job.save(write_job)
        more = (
            f", with {', '.join(printable(path) for path in alternates)} in turn"
            if alternates
            else ""
        )
        shown, into = printable(write_job), printable(folder)
        click.echo(f"job written to {shown}{more} (results go to {into}); run it with")
        click.echo(
            "  torchrun --nnodes N --nproc-per-node K --node-rank NODE --master-addr HOST "
            f"--master-port PORT -m tidgap.runtime.worker {shown}\n"
            f"on each machine NODE of N, N*K = {loaded.num_stages} processes (one per stage)"
        )
        return
    replay_with = read_json(problem_path(problem)) if replay else None
    if results is None:
        require_batch_room(model, loaded, problem, None if here is None else local_processes())
        labels, plans = zip(*todo, strict=True)
        gathered = results_of(loaded, job, plans, f"run: {', '.join(labels)}", here)
        if gathered is None:
            return  # ranks other than 0 report nothing
        found = gathered
    runs = figures_of_runs(loaded, job, todo, found, model, replay_with, results)
    timelines = [t for figures in runs for t in (figures.predicted_timeline, figures.timeline)]
    files = timeline_files(timelines, None, trace, loaded.name)
    tolerance = TOLERANCE[float64]
    transport = found[0][0].get("transport", "gloo")  # results written before NCCL: gloo
    schedule = todo[0][1].schedule()
    same = [other.schedule() == schedule for _, other in todo[1:]]
    if as_json:
        echo_json(document(loaded, plan_file, job, transport, runs, same, tolerance))
    else:
        names = [loaded.stage_name(s) for s in range(loaded.num_stages)]
        step = "no optimizer step" if optimizer is None else f"tail {describe(optimizer, lr)}"
        click.echo(
            f"{describe_problem(loaded)}; {threads} thread(s) per stage on {device}, chunks "
            f"over {transport}, {'float64' if float64 else 'float32'}, {step}"
        )
        for figures in runs:
            for line in format_figures(figures, names):
                click.echo(line)
        for baseline, one in zip(runs[1:], same, strict=True):
            click.echo(speedup_line(runs[0], baseline, one))
    # after the report: a trace that cannot be written (its folder gone) loses no run
    for line in write_files(files):
        if not as_json:
            click.echo(line)
    require_within(runs, tolerance)


def document(
    problem: Problem,
    plan_file: str,
    job: Job,
    transport: str,
    runs: list[RunFigures],
    same: list[bool],
    tolerance: float,
) -> dict[str, Any]:
    """The ``tidgap run --json`` object: the settings (``transport``: what the chunks
    travelled over), then each run's figures (the plan first, then the baselines with the
    plan's speedup over them; ``same``: per baseline, whether it is the plan's schedule)."""
    plan, *baselines = runs
    return {
        "problem": problem.name,
        "plan": plan_file,
        "model": job.model,
        "boundaries": job.boundaries,
        "stages": problem.num_stages,
        "threads": job.threads,
        "device": job.device,
        "transport": transport,
        "iterations": job.iterations,
        "warmup": job.warmup,
        "float64": job.float64,
        "seed": job.seed,
        "gradient_tolerance": tolerance if job.check_gradients else None,
        "optimizer": None if job.optimizer is None else {"name": job.optimizer, "lr": job.lr},
        "run": plan.as_dict(),
        "baselines": [
            {
                **baseline.as_dict(),
                "speedup": speedup_record(plan, baseline, one),
            }
            for baseline, one in zip(baselines, same, strict=True)
        ],
    }
