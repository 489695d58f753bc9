"""``tidgap run``: execute a plan on torch.distributed (one process per stage on this
machine, chunks over gloo or NCCL; under torchrun, this process's stage, rank 0
reporting), check its gradients and measure it against the prediction.

Everything that can be checked before a worker starts is (the plan against the problem,
the split against the model, the model's import), as bad input: one line, exit 2. A worker
that fails, or a run past ``--timeout``, exits 1 naming the rank, with every worker killed.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from tidgap.cli.options import (
    TORCH_SEED,
    Command,
    Number,
    about_problem,
    count_range,
    describe_problem,
    echo_json,
    json_option,
    problem_argument,
    require_folder_name,
)
from tidgap.cli.profile import (
    build_model,
    learning_rate,
    model_options,
    optimizer_options,
    require_torch,
)
from tidgap.model.errors import InputError
from tidgap.model.examples import EXAMPLE_PREFIX
from tidgap.model.fileio import read_json
from tidgap.model.lists import stages_doing
from tidgap.model.numbers import MAX_THREADS, is_integer
from tidgap.model.plan import Plan, load_plan
from tidgap.model.problem import Problem, load_problem, problem_path
from tidgap.model.text import brief, printable
from tidgap.outputs.files import check_outputs, timeline_files, write_files, write_json
from tidgap.profiling.split import parse_split
from tidgap.runtime.failures import StageNotReplayed
from tidgap.runtime.job import TRANSPORTS, Job
from tidgap.runtime.optimizers import describe
from tidgap.runtime.report import (
    RunFigures,
    checked_in,
    format_figures,
    load_results,
    merged_gradients,
    run_figures,
    speedup_line,
    speedup_record,
)
from tidgap.runtime.results_check import check_plan_results, rank_plans
from tidgap.runtime.worker import (
    local_processes,
    result_path,
    stage_count_mismatch,
    start_watchdog,
    torchrun_rank,
)

#: Largest max relative gradient difference accepted, by precision.
TOLERANCE = {False: 1e-4, True: 1e-10}
#: Where a profiled problem records its split.
SPLIT_PATH = ("source", "split", "boundaries")
#: Where ``tidgap profile --optimizer`` records the optimizer it timed into the tails.
OPTIMIZER_PATH = ("source", "timing", "optimizer")

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


def boundaries_of(problem: Problem, spec: str, split: str | None, layers: list[str]) -> list[int]:
    """The stage boundaries: ``--split``, else the split the problem was profiled with;
    either must fit the model's ``layers`` and the problem's stage count."""
    stages = problem.num_stages
    if split is not None:
        return parse_split(split, layers, stages)
    how = problem.source_fields.get("split")
    recorded = how.get("boundaries") if isinstance(how, dict) else None
    if recorded is None:
        raise InputError(
            "records no split (not written by tidgap profile); give --split",
            SPLIT_PATH,
            source=spec,
        )
    if not isinstance(recorded, list) or not all(is_integer(b) for b in recorded):
        raise InputError("is not a list of layer indices; give --split", SPLIT_PATH, source=spec)
    try:
        return parse_split(",".join(map(str, recorded)), layers, stages)
    except InputError as error:
        raise InputError(
            f"does not fit the model: {error.message}", SPLIT_PATH, source=spec
        ) from None


def caveats(
    problem: Problem,
    spec: str,
    plan: Plan,
    model: Any,
    optimizer: str | None = None,
    device: str = "cpu",
    boundaries: list[int] | None = None,
) -> list[str]:
    """Reasons the prediction may not describe this run: a model other than the profiled
    one, stage ``boundaries`` other than the split its times were measured on, recomputing
    stages neither the profile nor a calibration timed that way, a calibration entry left
    out as malformed (:attr:`Problem.unused_calibration`), another ``device`` than the
    profiled one, and an ``optimizer`` step the stages' tails leave out (all 0) or another
    optimizer than the profiled one."""
    from tidgap.runtime.lowering import recomputes

    found = []
    recorded = problem.source_fields.get("model")
    if isinstance(recorded, dict):
        wanted = {"name": model.name, **model.config}
        differ = sorted(key for key in wanted if key in recorded and recorded[key] != wanted[key])
        if differ:
            was = ", ".join(f"{key} {brief(recorded[key])}" for key in differ)
            now = ", ".join(f"{key} {brief(wanted[key])}" for key in differ)
            found.append(f"{spec}: source.model: profiled with {was}, running {now}")
    split = problem.source_fields.get("split")
    timed = split.get("boundaries") if isinstance(split, dict) else None
    if boundaries is not None and isinstance(timed, list) and timed != boundaries:
        found.append(
            f"{spec}: source.split: its times were measured with boundaries {brief(timed)}, "
            f"this run splits at {boundaries} (--split): the prediction uses the other "
            "split's op times"
        )
    flags = recomputes(plan)
    again = [s for s, flag in enumerate(flags) if flag]
    profiled_again = problem.profiled_with_recompute
    if again and not profiled_again and problem.recompute_times is None:
        found.append(
            f"{stages_doing(again, 'recompute')} forwards, and {spec} was neither calibrated with "
            "recomputing plans (tidgap calibrate) nor profiled with --recompute: the "
            "prediction prices each of their backwards as the profiled forward plus backward "
            "of its samples"
        )
    stored = [s for s, flag in enumerate(flags) if not flag]
    if profiled_again and stored:
        found.append(
            f"{stages_doing(stored, 'run')} backward on stored graphs, but {spec} was profiled "
            "with --recompute: the prediction counts a forward in each of their backwards"
        )
    found += [f"{spec}: {reason}" for reason in problem.unused_calibration]
    return [
        *found,
        *device_caveats(problem, spec, device),
        *optimizer_caveats(problem, spec, optimizer),
    ]


def device_caveats(problem: Problem, spec: str, device: str) -> list[str]:
    """:func:`caveats` of the device: a run on another kind of device than the profile's
    (``source.device``) is predicted with the other device's op times."""
    profiled = problem.source_fields.get("device")
    if isinstance(profiled, str) and profiled != device:
        return [
            f"{spec}: source.device: profiled on {brief(profiled)}, this run computes on "
            f"{device}: the prediction uses {brief(profiled)} op times (profile or calibrate "
            f"with --device {device})"
        ]
    return []


def optimizer_caveats(problem: Problem, spec: str, optimizer: str | None) -> list[str]:
    """:func:`caveats` of the optimizer step: one the prediction does not count (every
    tail 0), or a step other than the one ``tidgap profile --optimizer`` timed."""
    if optimizer is not None and all(stage.tail == 0 for stage in problem.stages):
        return [
            f"{spec}: every stage's tail is 0, so the prediction does not count the "
            f"{optimizer} step (profile with --optimizer {optimizer})"
        ]
    timing = problem.source_fields.get("timing")
    timed = timing.get("optimizer") if isinstance(timing, dict) else None
    name = timed.get("name") if isinstance(timed, dict) else None
    if name is not None and name != optimizer:
        running = f"steps with {optimizer}" if optimizer else "steps nothing (no --optimizer)"
        where = ".".join(OPTIMIZER_PATH)
        return [f"{spec}: {where}: the tails time {brief(name)}, this run {running}"]
    return []


def absolute(spec: str) -> str:
    """A problem or plan argument as an absolute path (``example:NAME`` as is)."""
    return spec if spec.startswith(EXAMPLE_PREFIX) else os.path.abspath(spec)


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


def alternate_files(job: str, count: int) -> list[str]:
    """Where ``--write-job JOB`` writes the ``count`` plans run in turn after the plan:
    ``JOB``'s name with ``.plan1.json``, ``.plan2.json``, ..."""
    path = Path(job)
    return [str(path.with_name(f"{path.stem}.plan{k}.json")) for k in range(1, count + 1)]


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
    gradients = max_relative_difference(ran, reference_gradients(layers, task, forward))
    if job.optimizer is None:
        return gradients, None
    assert job.lr is not None, "a job with an optimizer has a learning rate"
    stepped = reference_step(layers, ran, job.optimizer, job.lr)
    got = {key: value for result in results for key, value in result["stepped"].items()}
    return gradients, max_relative_difference(got, stepped)


def require_batch_room(
    model: Any, problem: Problem, source: str, processes: int | None = None
) -> None:
    """:class:`InputError` on ``source``'s ``batch_size`` if the ``processes`` of a run on
    this machine (default one per stage) cannot hold even their copies of the batch's input
    (each makes the whole batch; bytes a sample from one sample of ``model``'s input) in the
    memory available: before any process starts, so that a batch far beyond memory is one
    line, not the out-of-memory killer in a worker."""
    import torch

    from tidgap.optimize.memory import require_available

    processes = problem.num_stages if processes is None else processes
    sample = model.input(1, torch.device("cpu"))
    per_sample = sample.numel() * sample.element_size()
    needed = processes * problem.batch_size * per_sample
    require_available(
        needed,
        f"each of the run's {processes} processes here makes the whole batch's input: "
        f"{problem.batch_size} samples of {per_sample} bytes need at least {needed / 1e9:.3g} GB",
        source,
        ("batch_size",),
    )


def require_device(device: str, transport: str, processes: int | None) -> None:
    """:class:`InputError` on ``--device`` when it names CUDA and none is usable here, and
    on ``--transport nccl`` unless this PyTorch has NCCL and this machine has a GPU for
    each of the ``processes`` this command starts (``None``: under torchrun, where each
    rank's GPU is its launcher's choice and the workers check that no two share one);
    before any process starts; a job written for torchrun is not checked."""
    import torch
    from torch import distributed as dist

    from tidgap.profiling.run import torch_device

    torch_device(device)
    if transport != "nccl":
        return
    if not dist.is_nccl_available():
        raise InputError(
            f"this PyTorch has no NCCL (torch {torch.__version__})", source="--transport"
        )
    gpus = torch.cuda.device_count()
    if processes is not None and gpus < processes:
        raise InputError(
            f"nccl needs a GPU per process: {processes} processes on this machine, {gpus} "
            "GPU(s) (--transport gloo passes chunks through host memory)",
            source="--transport",
        )


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
        job, results=folder, plan=paths[0], alternates=paths[1:], timeout=job.timeout * len(plans)
    )


def results_under_torchrun(
    job: Job, plans: Sequence[Plan], rank: int, world_size: int
) -> list[list[dict]] | None:
    """Under torchrun: run this process's rank of ``plans`` in turn (``job.timeout`` per
    plan); on rank 0, per plan, every rank's results; ``None`` on the others."""
    from tidgap.runtime.worker import run_here

    job = dataclasses.replace(job, timeout=job.timeout * len(plans))
    return run_here(job, rank, world_size, plans)


def require_world(world_size: int, problem: Problem, source: str) -> None:
    """:class:`InputError` unless torchrun started one process per stage of ``problem``."""
    why = stage_count_mismatch(problem.num_stages, world_size)
    if why is not None:
        raise InputError(f"has {why}", ("stages",), source=source)


def launched(problem: Problem, job: Job, plans: Sequence[Plan], label: str) -> list[list[dict]]:
    """Run ``plans`` in turn, iteration by iteration, with one worker per stage (the plans
    written to the run's temporary folder); per plan, the ranks' results. ``job.timeout``
    is per plan."""
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
            raise click.ClickException(
                f"run: {label}: {error} (the workers' logs: {kept})"
            ) from None
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


def to_run(
    problem: Problem, plan: Plan, with_baselines: bool, compared: Sequence[str]
) -> list[tuple[str, Plan]]:
    """``(label, plan)`` of every plan the run runs in turn: the plan, then the
    ``--compare`` plan files (each checked against ``problem``, labelled with its name),
    then with ``--baselines`` the best GPipe and the best 1F1B (as the run prices them:
    :func:`~tidgap.runtime.pricing.run_priced_baselines`)."""
    runs = [
        ("plan", plan),
        *((path, load_plan(path, problem, refuse_other=True)) for path in compared),
    ]
    if with_baselines:
        from tidgap.runtime.pricing import run_priced_baselines
        from tidgap.schedules.baselines import best_baselines
        from tidgap.schedules.families import SCHEDULES, TIMED_BASELINES, baseline_label

        best = run_priced_baselines(problem, best_baselines(problem))
        for name in TIMED_BASELINES:
            m = best[name].microbatches
            runs.append((baseline_label(name, m), SCHEDULES[name].baseline(problem, m)))
    return runs


def worker_options(command: Command) -> Command:
    """The options of every command that starts workers (``run``, ``calibrate``): the model
    and its options, the split, iterations, warm-up, threads, seed, device and timeout."""
    options = [
        click.option(
            "--model",
            "model_reference",
            required=True,
            metavar="gpt|vgg16|module:attribute",
            help="The model the problem was profiled from, as in tidgap profile.",
        ),
        click.option(
            "--split",
            metavar="B1,B2,..",
            help="Stage boundaries (the first layer, index or name, of stages 1..S-1); "
            "default the split recorded in PROBLEM (source.split.boundaries).",
        ),
        click.option(
            "--iterations",
            type=count_range(1),
            default=5,
            show_default=True,
            help="Timed iterations (the median is reported).",
        ),
        click.option(
            "--warmup",
            type=count_range(0),
            default=1,
            show_default=True,
            help="Untimed iterations before them.",
        ),
        click.option(
            "--threads",
            type=count_range(1, MAX_THREADS),
            default=1,
            show_default=True,
            help="PyTorch threads per stage process.",
        ),
        click.option(
            "--seed",
            type=TORCH_SEED,
            default=0,
            show_default=True,
            help="Seed of the weights and the data.",
        ),
        click.option(
            "--device",
            type=click.Choice(["cpu", "cuda"]),
            default="cpu",
            show_default=True,
            help="Where each stage process computes: the CPU, or a GPU (process R on GPU "
            "LOCAL_RANK modulo the GPUs it sees; processes share GPUs when there are fewer "
            "GPUs than stages).",
        ),
        click.option(
            "--transport",
            type=click.Choice(TRANSPORTS),
            default="auto",
            show_default=True,
            help="What chunks travel over between stage processes: gloo (through host "
            "memory), nccl (GPU to GPU; needs --device cuda and a GPU per process) or auto "
            "(nccl where every process has a GPU of its own, else gloo). The report says "
            "which ran.",
        ),
        click.option(
            "--timeout",
            type=Number(min=0, min_open=True),
            default=300.0,
            show_default=True,
            help="Seconds each plan's run may take (plans run in turn: that times their "
            "number); then every worker is killed (exit 1). Building the model before the "
            "workers start (its import included) may take as long (then exit 124).",
        ),
    ]
    model, *rest = options
    for option in reversed(rest):
        command = option(command)
    return model(model_options(command))


def worker_job(
    problem: str,
    plan: str,
    loaded: Problem,
    model_reference: str,
    split: str | None,
    options: dict[str, Any],
    command: str,
    **settings: Any,
) -> tuple[Job, Any]:
    """The job of a run of ``plan`` (a file, or ``""`` for plans written per run) and the
    model, built from ``seed`` as every worker builds it (imports PyTorch; ``command``
    names a missing PyTorch; within ``settings["timeout"]`` seconds, else the process
    exits 124); ``settings``: the other :class:`Job` fields."""
    if settings["transport"] == "nccl" and settings["device"] == "cpu":
        raise InputError(
            "nccl passes chunks from GPU to GPU: give --device cuda", source="--transport"
        )
    require_torch(command)
    import torch

    torch.manual_seed(settings["seed"])
    # --timeout covers building the model here too (an import that hangs ends the command)
    watchdog = start_watchdog(settings["timeout"], f"tidgap {command}", launched=False)
    try:
        model = build_model(model_reference, options, command)
    finally:
        watchdog.set()
    layers = [name for name, _ in model.layers.named_children()]
    job = Job(
        problem=absolute(problem),
        plan=absolute(plan) if plan else "",
        model=model_reference,
        boundaries=boundaries_of(loaded, problem, split, layers),
        results="",
        model_options=options,
        **settings,
    )
    return job, model


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
@click.option("--float64", is_flag=True, help="Model and inputs in double precision.")
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
    unit: the median, min and max over --iterations after --warmup, the error against
    the prediction in per cent, and each stage's busy time. With --optimizer each stage
    steps its parameters after its last backward (a "tail" op, in the busy time and the
    trace; --check-gradients also checks the weights after one step). Needs PyTorch.
    """
    lr = learning_rate(optimizer, lr)
    here = torchrun_rank()
    if here is not None and (write_job, results, nproc) != (None, None, None):
        raise click.UsageError(
            "under torchrun tidgap run runs its rank: no --write-job, --results, --nproc"
        )
    if results is not None and write_job is not None:
        raise click.UsageError("--results reports a finished run: no --write-job")
    require_folder_name(results, "--results")
    if write_job is not None and (as_json or trace is not None):
        raise click.UsageError("--write-job writes the job and runs nothing: no --json, --trace")
    inputs = {"PROBLEM": problem, "PLAN": plan_file}
    inputs.update((f"--compare {path}", path) for path in compared)
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
        trace,
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
    if write_job is None and results is None:
        processes = loaded.num_stages if here is None else None  # torchrun: its choice
        require_device(device, transport, processes)  # before the warnings: one line
    for line in caveats(loaded, problem, plan, model, optimizer, device, job.boundaries):
        if here is None or here[0] == 0:  # under torchrun, once
            click.echo(f"tidgap: warning: {printable(line)}", err=True)
    if write_job is not None:
        folder = Path(write_job).parent / "results"
        write_plans(alternates, [each for _, each in todo[1:]])
        paths = [os.path.abspath(path) for path in alternates]
        job = dataclasses.replace(job, results=os.path.abspath(folder), alternates=paths)
        job.save(write_job)
        more = f", with {', '.join(alternates)} in turn" if alternates else ""
        click.echo(f"job written to {write_job}{more} (results go to {folder})")
        return
    replay_with = read_json(problem_path(problem)) if replay else None
    if results is not None:
        with about_problem(results):
            found = [load_results(results, loaded.num_stages, k) for k in range(len(todo))]
            tail = job.optimizer is not None
            for k, ((label, each), ranks) in enumerate(zip(todo, found, strict=True)):
                same_job(job, ranks, len(todo) - 1)
                same_plan(each, label, k, ranks)
                expected = rank_plans(each, model, job.boundaries, tail)
                check_plan_results(results, k, ranks, expected, job.check_gradients)
    else:
        require_batch_room(model, loaded, problem, None if here is None else local_processes())
        labels, plans = zip(*todo, strict=True)
        gathered = results_of(loaded, job, plans, ", ".join(labels), here)
        if gathered is None:
            return  # ranks other than 0 report nothing
        found = gathered
    runs = []
    for k, ((label, each), ranks) in enumerate(zip(todo, found, strict=True)):
        try:
            runs.append(figures_of(loaded, job, each, label, ranks, model, replay_with))
        except (InputError, StageNotReplayed) as error:
            if results is None:
                raise
            if isinstance(error, InputError):  # one naming no file came from the rank files
                raise error.within(results) from None
            raise InputError(
                f"do not replay on the model's stage: {error.__cause__}",
                ("draws",),
                source=str(result_path(results, error.stage, k)),
            ) from None
    timelines = [t for figures in runs for t in (figures.predicted_timeline, figures.timeline)]
    written = write_files(timeline_files(timelines, None, trace, loaded.name))
    tolerance = TOLERANCE[float64]
    transport = found[0][0].get("transport", "gloo")  # results written before NCCL: gloo
    if as_json:
        echo_json(document(loaded, plan_file, job, transport, runs, tolerance))
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
        for baseline in runs[1:]:
            click.echo(speedup_line(runs[0], baseline))
        for line in written:
            click.echo(line)
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


def document(
    problem: Problem,
    plan_file: str,
    job: Job,
    transport: str,
    runs: list[RunFigures],
    tolerance: float,
) -> dict[str, Any]:
    """The ``tidgap run --json`` object: the settings (``transport``: what the chunks
    travelled over), then each run's figures (the plan first, then the baselines with the
    plan's speedup over them)."""
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
                "speedup": speedup_record(plan, baseline),
            }
            for baseline in baselines
        ],
    }
