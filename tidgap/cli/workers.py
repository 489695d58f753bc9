"""What the commands that start stage workers (``tidgap run``, ``tidgap calibrate``)
share: their options, the job every worker runs, and the checks made before any process
starts (the split, the device and transport, the batch in memory, torchrun's world)."""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import click

from tidgap.cli.options import TORCH_SEED, Command, Number, count_range, with_options
from tidgap.cli.profile import build_model, model_options, require_torch
from tidgap.model.errors import InputError
from tidgap.model.examples import EXAMPLE_PREFIX
from tidgap.model.numbers import MAX_THREADS, is_integer
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.profiling.split import groups, parse_split, stage_layers
from tidgap.runtime.job import TRANSPORTS, Job
from tidgap.runtime.lowering import recomputes
from tidgap.runtime.worker import start_watchdog


@contextlib.contextmanager
def launcher_running_user_code(timeout: float, command: str) -> Iterator[None]:
    """The launching process running the model's own code (building it, probing its
    stages, the whole-batch reference of ``--check-gradients``): within ``timeout``
    seconds, else the process exits 124 (:func:`~tidgap.runtime.worker.start_watchdog`),
    and what the code prints goes to stderr, so that ``--json`` stays JSON."""
    watchdog = start_watchdog(timeout, f"tidgap {command}", launched=False)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        watchdog.set()


#: Where a profiled problem records its split.
SPLIT_PATH = ("source", "split", "boundaries")


def recorded_boundaries(problem: Problem) -> Any:
    """``source.split.boundaries`` as the problem records it (any JSON value; ``None``
    where it records none): the split its times were measured on."""
    how = problem.source_fields.get("split")
    return how.get("boundaries") if isinstance(how, dict) else None


def boundaries_of(problem: Problem, spec: str, split: str | None, layers: list[str]) -> list[int]:
    """The stage boundaries: ``--split``, else the split the problem was profiled with;
    either must fit the model's ``layers`` and the problem's stage count."""
    stages = problem.num_stages
    if split is not None:
        return parse_split(split, layers, stages)
    recorded = recorded_boundaries(problem)
    if recorded is None:
        raise InputError(
            "records no split (not written by tidgap profile); give --split",
            SPLIT_PATH,
            source=spec,
        )
    if not isinstance(recorded, list) or not all(is_integer(b) for b in recorded):
        raise InputError("is not a list of layer indices; give --split", SPLIT_PATH, source=spec)
    try:
        return parse_split(",".join(map(str, recorded)), layers, stages, by_name=False)
    except InputError as error:
        raise InputError(
            f"does not fit the model: {error.message}", SPLIT_PATH, source=spec
        ) from None


def absolute(spec: str) -> str:
    """A problem or plan argument as an absolute path (``example:NAME`` as is)."""
    return spec if spec.startswith(EXAMPLE_PREFIX) else os.path.abspath(spec)


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


def worker_options(command: Command) -> Command:
    """The options of every command that starts workers (``run``, ``calibrate``): the model
    and its options, the split, iterations, warm-up, threads, seed, device and timeout."""
    options = [
        click.option(
            "--model",
            "model_reference",
            required=True,
            metavar="gpt|vgg16|module:attribute",
            help="The model the problem was profiled from, as in tidgap profile (one other than "
            "PROBLEM's source.model: calibrate refuses it, run warns).",
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
            help="Timed iterations of each plan.",
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
            "number); then every worker is killed (exit 1). Each run of the model's code in "
            "this process (building it, its import included, probing its stages, run's "
            "--check-gradients reference) may take as long (then exit 124); what it prints "
            "goes to stderr.",
        ),
    ]
    model, *rest = options
    return model(model_options(with_options(command, rest)))


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
    with launcher_running_user_code(settings["timeout"], command):
        model = build_model(model_reference, options, command)
    layers = [name for name, _ in model.named_layers()]
    boundaries = boundaries_of(loaded, problem, split, layers)
    require_unshared(model, boundaries, problem if split is None else None)
    job = Job(
        problem=absolute(problem),
        plan=absolute(plan) if plan else "",
        model=model_reference,
        boundaries=boundaries,
        results="",
        model_options=options,
        **settings,
    )
    return job, model


def named_by_split(problem: Problem, boundaries: list[int], model: Any) -> Problem:
    """``problem`` with its stages named after the layers ``boundaries`` give them
    (``first-last``, as ``tidgap calibrate`` names them) where those are not the split it
    records (``--split``): its own names describe other stages."""
    if recorded_boundaries(problem) == boundaries:
        return problem
    layers = [name for name, _ in model.named_layers()]
    names = stage_layers(layers, boundaries)
    stages = [
        stage.model_copy(update={"name": name})
        for stage, name in zip(problem.stages, names, strict=True)
    ]
    return problem.model_copy(update={"stages": stages})


def require_probe_runs(model: Any, job: Job, samples: int, command: str) -> None:
    """:class:`InputError` on ``--model`` where the model split at ``job``'s boundaries
    fails on ``samples`` samples of ``job``'s task (the problem's unit, the smallest chunk a
    plan has; an ``--input-shape`` other than the one it takes, say), as every worker
    probes it: in ``job``'s dtype (stages holding another are cast on copies); where the
    workers failed (exit 1) after starting. Within ``job.timeout``, its prints on stderr
    (:func:`launcher_running_user_code`; ``command`` names the command that times out)."""
    import torch

    from tidgap.profiling.run import stage_modules
    from tidgap.runtime.stage import probed_specs
    from tidgap.runtime.task import make_task

    dtype = torch.float64 if job.float64 else torch.float32

    def failed(line: str) -> InputError:
        return InputError(f"{model.name}: {line}", source="--model")

    with launcher_running_user_code(job.timeout, command):
        stages = [
            (name, names, in_dtype(module, dtype))
            for name, names, module in stage_modules(model, job.boundaries)
        ]
        sample = make_task(model, samples, job.seed, torch.device("cpu"), dtype).inputs
        probed_specs(stages, sample, failed)


def in_dtype(module: Any, dtype: Any) -> Any:
    """``module`` if its floating-point parameters and buffers are all of ``dtype``, else a
    copy cast to it (as a worker casts its model)."""
    tensors = [*module.parameters(), *module.buffers()]
    if all(tensor.dtype == dtype for tensor in tensors if tensor.is_floating_point()):
        return module
    return copy.deepcopy(module).to(dtype)


def require_consistent_recompute(
    model: Any, boundaries: list[int], plans: Sequence[tuple[str, Plan]]
) -> None:
    """:class:`InputError` naming the plan file (``plans``: ``(file, plan)``) and its
    stage's ``backward`` where a plan recomputes on a stage holding a layer that normalises
    by its batch's statistics: the recomputed forward, on the backward's chunks, would
    normalise by other statistics than the forward did, so its gradients would not be
    those of the function the forward computed (and the running statistics would be
    updated twice)."""
    from tidgap.runtime.reference import batch_normalising_layers  # imports PyTorch

    layers = list(model.named_layers())
    held = [
        batch_normalising_layers([layers[i] for i in indices])
        for indices in groups(len(layers), boundaries)
    ]
    for source, plan in plans:
        for s, (recomputing, found) in enumerate(zip(recomputes(plan), held, strict=True)):
            if recomputing and found:
                raise InputError(
                    f"stage {s} recomputes its forward (a backward boundary is not a forward "
                    f"boundary) and layer {found[0]} normalises by its chunk's statistics in "
                    "train mode: the forward run again on the backward's chunks would be "
                    "another function, and the gradients wrong; run a plan that does not "
                    "recompute there (tidgap search --no-recompute)",
                    ("backward", s),
                    source=source,
                )


def require_unshared(model: Any, boundaries: list[int], spec: str | None) -> None:
    """:class:`InputError` where stages split at ``boundaries`` would share a parameter of
    ``model``: naming ``--split`` (``spec`` ``None``) or the problem ``spec``'s split."""
    from tidgap.profiling.run import SHARED_ACROSS_STAGES, shared_between_stages

    shared = shared_between_stages(model, boundaries)
    if shared is None:
        return
    message = f"{shared}: {SHARED_ACROSS_STAGES}"
    if spec is None:
        raise InputError(message, source="--split")
    raise InputError(message + " (--split)", SPLIT_PATH, source=spec)
