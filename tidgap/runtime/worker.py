"""One pipeline stage's process: ``python -m tidgap.runtime.worker JOB.json``.

Compatible with ``torchrun``: the rank, world size and rendezvous come from ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``; rank ``r`` runs stage ``r`` (the
process group is gloo's; chunks travel in groups of their own per link and direction,
over the job's ``transport``: :func:`resolved_transport`). Every rank builds the whole
model from the job's seed (the same weights everywhere), keeps its own stage's layers on
its device (the CPU, or with ``device`` ``cuda`` a GPU: :func:`rank_device`; over gloo
chunks travel between ranks through host memory, over NCCL from GPU to GPU), lowers the plan
(and the job's alternates, which run in turn with it, iteration by iteration) and runs
iterations through :func:`tidgap.runtime.executor.execute`. With ``check_gradients`` a
first, extra iteration of each plan runs in train mode with its random draws kept for the
single-process reference to replay, or in eval mode (dropout off) where they cannot be
(:func:`run_rank`'s ``checked``), and its parameter gradients are kept; the ``warmup`` and
timed ``iterations`` run in train mode. Each iteration posts its receives, then starts
at a barrier; its records are in seconds from there. With an optimizer
(``job.optimizer``) each rank steps its own stage's parameters after its last backward,
before it waits for its last sends
(:class:`TailHandlers`), recorded as a ``"tail"`` record; the checked iteration keeps the
gradients before the step and the parameters after it.

The rank writes ``rank<R>.pt`` (``torch.save`` of :func:`run_rank`'s result for the job's
plan; ``rank<R>-plan<K>.pt`` for its ``K``-th alternate) atomically into the job's results
folder (or, when torchrun runs ``tidgap run`` itself, :func:`run_here` gathers every
rank's results at rank 0 instead). On failure it prints the traceback and, last, one line
``Error: message`` on stderr and exits 1 at once (see :func:`main`). It exits by itself
when the job's timeout passes or its parent process dies, so no worker outlives its
launcher.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from tidgap.model.errors import InputError, first_line
from tidgap.outputs.atomic import abandon_writes
from tidgap.runtime.failures import (
    InstructionFailed,
    RunFailed,
    failure_line,
)
from tidgap.runtime.handlers import PipelineHandlers, StageCompute, Transport
from tidgap.runtime.job import Job
from tidgap.started import parent_at_start

if TYPE_CHECKING:
    from tidgap.model.plan import Plan
    from tidgap.model.problem import Problem
    from tidgap.runtime.lowering import Instruction
    from tidgap.runtime.report import Row
    from tidgap.runtime.stage import TorchStage


class JobError(InputError):
    """A job whose model options or split do not fit its model: bad input (status 2),
    found once the model is built, unlike the model's own failures (status 1)."""


#: Exit status of a worker stopped by its own watchdog (as ``timeout`` does).
WATCHDOG_STATUS = 124
#: How often the watchdog looks at the clock and the parent, in seconds.
WATCHDOG_PERIOD = 0.5
#: The environment variable in which the launcher gives its process id.
PARENT_VARIABLE = "TIDGAP_LAUNCHER_PID"


def result_path(results: str | os.PathLike[str], rank: int, plan: int = 0) -> Path:
    """Where rank ``rank`` writes its result of the job's plan ``plan`` (0: ``plan``, ``k``:
    the ``k``-th of ``alternates``)."""
    return Path(results) / (f"rank{rank}.pt" if plan == 0 else f"rank{rank}-plan{plan}.pt")


def progress(text: str) -> None:
    """One line of progress on stdout (the launcher quotes a hanging rank's last one)."""
    print(text, flush=True)


def watched_environment() -> dict[str, str]:
    """This process's environment naming this process as the launcher
    (:data:`PARENT_VARIABLE`), for a child whose :func:`start_watchdog` ends it once this
    process is gone."""
    return {**os.environ, PARENT_VARIABLE: str(os.getpid())}


def start_watchdog(
    timeout: float,
    who: str = "worker",
    launched: bool = True,
    parent: int | None = None,
    hint: str = "",
) -> threading.Event:
    """A daemon thread that ends the process (status :data:`WATCHDOG_STATUS`, a line on
    stderr naming ``who``, ``hint`` after "timed out") once ``timeout`` seconds pass
    or, when ``launched``, the parent process is gone: ``parent``, else the one named by
    :data:`PARENT_VARIABLE` (set by the launcher, so a parent that died before this
    started counts too), else the parent when the process imported tidgap (torchrun's
    agent, which may die while the stage builds its model:
    :func:`tidgap.started.parent_at_start`). Setting the returned event stops it."""
    if parent is None:
        parent = int(os.environ.get(PARENT_VARIABLE) or parent_at_start())
    deadline = time.monotonic() + timeout
    stopped = threading.Event()

    def here() -> bool:
        return not launched or os.getppid() == parent

    def watch() -> None:
        while time.monotonic() < deadline and here():
            if stopped.wait(WATCHDOG_PERIOD):
                return
        said = f"timed out{hint}; exiting" if here() else "its launcher is gone; exiting"
        print(f"{who} {said}", file=sys.stderr, flush=True)
        abandon_writes()  # os._exit runs no cleanup
        os._exit(WATCHDOG_STATUS)

    threading.Thread(target=watch, daemon=True).start()
    return stopped


class TailHandlers(PipelineHandlers):
    """:class:`PipelineHandlers` that run ``tail`` (the optimizer step) once the rank's
    instructions are done and before waiting for its outstanding sends, as the model runs
    a stage's tail right after its last backward; ``span``: its ``(start, end)`` in seconds
    of ``time.perf_counter`` (the executor's clock)."""

    def __init__(
        self,
        rank: int,
        stage: StageCompute,
        transport: Transport,
        tail: Callable[[], None],
    ) -> None:
        super().__init__(rank, stage, transport)
        self.tail = tail
        self.span: tuple[float, float] | None = None

    def finish(self) -> None:
        start = time.perf_counter()
        self.tail()
        self.span = (start, time.perf_counter())
        super().finish()


@dataclass
class PlanRun:
    """One plan of a job on this rank: the ``plan``, its lowered ``instructions`` and its
    ``stage`` compute, then per timed iteration its start (``starts``,
    ``time.perf_counter()`` seconds), its records (``timed``) and the most the stage held
    (``peaks``, bytes)."""

    plan: Plan
    instructions: list[Instruction]
    stage: TorchStage
    starts: list[float] = field(default_factory=list)
    timed: list[list[Row]] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)


#: What receives a rank's results (one per plan of the job), while its process group is up.
Deliver = Callable[[list[dict[str, Any]]], None]
#: What prints a rank's steps (:func:`progress`, or nothing).
Say = Callable[[str], None]


def run_rank(
    job: Job,
    rank: int,
    world_size: int,
    deliver: Deliver,
    say: Say = progress,
    plans: Sequence[Plan] | None = None,
) -> None:
    """Run ``job`` as rank ``rank`` of ``world_size`` (the process group is initialised
    here, and torn down on success, after ``deliver`` was given the results while it is
    still up); ``plans`` (default: the job's plan files, :attr:`Job.plans`, loaded) run in
    turn, iteration by iteration; ``say`` prints each step. One result per plan, in the
    job's order: ``job`` (as a dict), ``rank``, ``stage`` (its name), ``layers``,
    ``threads``, ``transport`` (the backend chunks travelled over: ``gloo`` or ``nccl``),
    ``plan`` (the plan's fields, as JSON), ``recompute``, ``iterations`` (per
    timed iteration, its records as :data:`~tidgap.runtime.report.Row`, seconds from the
    iteration's barrier), ``starts`` (per timed iteration, its start: ``time.perf_counter()``
    of this process, seconds), ``peak_bytes`` (per timed iteration, the most the stage held:
    ``TorchStage.held``), ``gradients`` (this stage's parameters' gradients after the
    plan's checked iteration's backwards) and ``weights`` (:func:`stage_weights` before
    it), both ``None`` without ``check_gradients``, and ``stepped`` (this stage's
    parameters after the checked iteration's optimizer step; ``None`` without
    ``check_gradients`` or an optimizer), ``checked_in`` (the checked iteration's mode,
    ``"train"`` or ``"eval"``), ``eval_reason`` (this rank's reason for eval mode) and
    ``draws`` (in train mode, the stage's random draws for the whole batch), all three
    ``None`` without ``check_gradients``."""
    import click
    import torch
    from torch import distributed as dist

    from tidgap.cli.profile import build_model
    from tidgap.model.plan import load_plan
    from tidgap.model.problem import load_problem
    from tidgap.profiling.allocator import keep_freed_memory
    from tidgap.profiling.run import stage_modules
    from tidgap.runtime.dist_transport import DistTransport, dist_timeout, handshake, link_groups
    from tidgap.runtime.draws import NotReplayable, RecordedDraws, as_saved
    from tidgap.runtime.executor import execute
    from tidgap.runtime.lowering import lower, recomputes
    from tidgap.runtime.optimizers import build_optimizer, step
    from tidgap.runtime.reference import batch_statistics, stage_gradients, stage_parameters
    from tidgap.runtime.stage import probed_specs, stage_of
    from tidgap.runtime.task import make_task

    say("building the model")
    keep_freed_memory()
    torch.set_num_threads(job.threads)
    problem = load_problem(job.problem)
    if plans is None:
        plans = [load_plan(path, problem) for path in job.plans]
    if world_size != problem.num_stages:
        raise ValueError(f"WORLD_SIZE is {world_size}, the problem has {problem.num_stages} stages")
    torch.manual_seed(job.seed)
    try:
        model = build_model(job.model, job.model_options, "run")
    except click.UsageError as error:  # an option of another model
        raise JobError(f"{job.model}: {error}", ("model_options",)) from None
    except InputError as error:  # an option's value; the model's own errors fail the run
        if not (error.source or "").startswith("--"):
            raise
        raise JobError(f"{job.model}: {error}", ("model_options",)) from None
    if job.boundaries and job.boundaries[-1] >= len(model.layers):
        raise JobError(
            f"{job.boundaries[-1]} is past the model's last layer, {len(model.layers) - 1}",
            ("boundaries",),
        )
    dtype = torch.float64 if job.float64 else torch.float32
    model.layers.to(dtype).eval()
    stages = stage_modules(model, job.boundaries)
    if len(stages) != world_size:
        raise ValueError(f"{len(stages)} stages from boundaries {job.boundaries}, not {world_size}")
    modules = [module for _, _, module in stages]
    device = rank_device(job.device)
    task = make_task(model, problem.batch_size, job.seed, device, dtype)
    # every stage, on the CPU, on the smallest chunk a plan has
    specs = probed_specs(stages, task.inputs[: problem.unit].cpu(), RunFailed)
    modules[rank].to(device)  # only this rank's stage on its device
    runs = []
    for plan in plans:
        stage = stage_of(modules, rank, task, recomputes(plan)[rank], specs)
        runs.append(PlanRun(plan, lower(plan)[rank], stage))
    module, names = modules[rank], stages[rank][1]
    tail: Callable[[], None] | None = None
    if job.optimizer is not None:
        tail = functools.partial(step, build_optimizer(job.optimizer, module.parameters(), job.lr))

    say("joining the process group")
    timeout = dist_timeout(job.timeout)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timeout)

    say("joined the process group")
    groups = link_groups(world_size, resolved_transport(job.transport, device), timeout)
    handshake(groups, rank, device)

    def iteration(
        run: PlanRun, train: bool, after: Callable[[], None] | None
    ) -> tuple[float, list[Row]]:
        """One iteration of ``run`` from a barrier, ``after`` (the tail) run by
        :class:`TailHandlers`: its start (``time.perf_counter()``, seconds) and records."""
        mode = "train" if train else "eval"
        # a rank killed or stuck in it is named so by the launcher (its log's last line)
        say(f"running an iteration ({mode} mode)")
        module.train(train)
        for parameter in module.parameters():
            parameter.grad = None
        run.stage.reset()
        transport = DistTransport(rank, groups, device)
        handlers = (
            PipelineHandlers(rank, run.stage, transport)
            if after is None
            else TailHandlers(rank, run.stage, transport, after)
        )
        # the receives are posted before the barrier: posting them took 0.2-5 ms (gloo's
        # irecv, half the time over 1.5) that the schedule's first op waited for
        handlers.expect(run.instructions)
        dist.barrier()
        start = time.perf_counter()
        try:
            records = execute(run.instructions, handlers)
        except InstructionFailed as failed:
            raise RunFailed(failure_line(failed, rank, module, names)) from failed
        say(f"ran an iteration ({mode} mode)")
        rows: list[Row] = [
            (r.kind, r.microbatch, r.samples[0], r.samples[1], r.start - start, r.end - start)
            for r in records
        ]
        if isinstance(handlers, TailHandlers) and handlers.span is not None:
            rows.append(("tail", 0, 0, 0, handlers.span[0] - start, handlers.span[1] - start))
        return start, rows

    def checked_iteration(run: PlanRun, train: bool) -> dict[str, Any]:
        """One checked iteration of ``run``: the weights before it, the gradients its
        backwards left and, with an optimizer, the parameters after its step (a fresh
        optimizer's first, as the reference steps: no state of another plan's or another
        try's step)."""
        weights = stage_weights(model.layers, names)
        kept: dict[str, Any] = {}

        def checked_tail() -> None:
            """Keep the gradients the backwards left, then step a fresh optimizer."""
            kept.update(stage_gradients(model.layers, names))
            if tail is not None:
                step(build_optimizer(job.optimizer, module.parameters(), job.lr))

        iteration(run, train=train, after=checked_tail)
        stepped = None if tail is None else stage_parameters(model.layers, names)
        return {"gradients": kept, "weights": weights, "stepped": stepped}

    normalised_by_batch = batch_statistics(model.layers)  # the same for every plan

    def checked(run: PlanRun) -> dict[str, Any]:
        """The checked iteration of ``run`` (:func:`checked_iteration`): in train mode, its
        forwards' random draws kept for the reference to replay (``draws``: the whole
        batch's, :func:`~tidgap.runtime.draws.as_saved`), unless the model normalises by
        batch statistics (every rank sees it: every rank builds the whole model) or some
        rank's draws cannot be replayed (then again in eval mode); ``checked_in`` says
        which, ``eval_reason`` this rank's reason for eval mode (``None``: another's)."""
        why = normalised_by_batch
        if why is None:
            run.stage.checked_draws = RecordedDraws()
            kept = checked_iteration(run, train=True)
            try:
                draws = as_saved(run.stage.whole_batch_draws())
            except NotReplayable as error:
                draws, why = None, f"stage {rank} (layers {stages[rank][0]}): {error}"
            if every_rank(why is None):
                return {**kept, "checked_in": "train", "eval_reason": None, "draws": draws}
        kept = checked_iteration(run, train=False)
        return {**kept, "checked_in": "eval", "eval_reason": why, "draws": None}

    unchecked = dict.fromkeys(
        ("gradients", "weights", "stepped", "checked_in", "eval_reason", "draws")
    )
    checks = [checked(run) if job.check_gradients else unchecked for run in runs]
    for _ in range(job.warmup):
        for run in runs:
            iteration(run, train=True, after=tail)
    for _ in range(job.iterations):
        for run in runs:
            start, rows = iteration(run, train=True, after=tail)
            run.starts.append(start)
            run.timed.append(rows)
            run.peaks.append(run.stage.held.peak)
    dist.barrier()
    deliver(
        [
            {
                "job": dataclasses.asdict(job),
                "rank": rank,
                "stage": stages[rank][0],
                "layers": stages[rank][1],
                "threads": torch.get_num_threads(),
                "transport": groups.backend,
                "plan": run.plan.document(),
                "recompute": run.stage.recompute,
                "redrawn": run.stage.redrawn,
                "iterations": run.timed,
                "starts": run.starts,
                "peak_bytes": run.peaks,
                **check,
            }
            for run, check in zip(runs, checks, strict=True)
        ]
    )
    dist.destroy_process_group()  # on failure, main ends the process instead


def gathered(value: Any) -> list[Any]:
    """Every rank's ``value``, by rank (a collective: every rank calls it; picklable
    values, over the gloo process group)."""
    from torch import distributed as dist

    found: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(found, value)
    return found


def every_rank(ok: bool) -> bool:
    """Whether ``ok`` holds on every rank of the process group (a collective: every rank
    calls it)."""
    return all(gathered(ok))


def gpu_identity(device: Any) -> tuple[str, str] | None:
    """This rank's GPU (``device``, a ``torch.device``) as ``(host name, GPU)``: its UUID
    where PyTorch gives one, else its index among the GPUs ``CUDA_VISIBLE_DEVICES`` shows
    it; ``None`` on the CPU."""
    import torch

    if device.type == "cpu":  # the job's devices: cpu or cuda
        return None
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all")
    return socket.gethostname(), str(uuid) if uuid is not None else f"{visible}/{device.index}"


def nccl_obstacle(ranks: Sequence[tuple[bool, tuple[str, str] | None]]) -> str | None:
    """Why chunks cannot travel over NCCL between ``ranks`` (per rank, whether its PyTorch
    has NCCL and its :func:`gpu_identity`), or ``None``: every rank needs a GPU of its own
    (NCCL refuses two ranks on one GPU)."""
    seen: dict[tuple[str, str], int] = {}
    for rank, (available, gpu) in enumerate(ranks):
        if gpu is None:
            return f"rank {rank} computes on the CPU"
        if not available:
            return f"rank {rank}'s PyTorch has no NCCL"
        if gpu in seen:
            return f"ranks {seen[gpu]} and {rank} share a GPU on {gpu[0]}"
        seen[gpu] = rank
    return None


def resolved_transport(requested: str, device: Any) -> str:
    """The backend chunks travel over for the job's ``transport`` ``requested`` (a
    collective: every rank calls it, ``device`` its own): ``gloo``; ``nccl``, which every
    rank must be able to use (:func:`nccl_obstacle` of what every rank says; else
    :class:`ValueError`); or for ``auto`` NCCL where every rank can, else gloo."""
    from torch import distributed as dist

    if requested == "gloo":
        return "gloo"
    why = nccl_obstacle(gathered((dist.is_nccl_available(), gpu_identity(device))))
    if why is None:
        return "nccl"
    if requested == "nccl":
        raise ValueError(f"transport nccl needs a GPU per process: {why}")
    return "gloo"


def rank_device(kind: str) -> Any:
    """The ``torch.device`` this rank computes on: the CPU, or for ``cuda`` GPU
    ``LOCAL_RANK`` modulo the GPUs this process sees (made the current one; ranks share
    GPUs when there are fewer than ranks)."""
    import torch

    if kind == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ValueError("the job asks for CUDA and this worker sees no usable GPU")
    index = int(os.environ.get("LOCAL_RANK", "0")) % count
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def stage_weights(layers: Any, names: list[str]) -> dict[str, Any]:
    """CPU copies of the state (parameters and buffers) of the top-level layers ``names``,
    keyed as in ``layers.state_dict()``, so the reference can use the same weights."""
    keep = set(names)
    return {
        key: value.detach().to("cpu", copy=True)
        for key, value in layers.state_dict().items()
        if key.split(".", 1)[0] in keep
    }


def save_result(result: dict[str, Any], path: Path) -> None:
    """``torch.save`` ``result`` to ``path`` through a temporary file in the same folder,
    so a reader never sees half a file."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(result, temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """The worker's entry point: 0 on success; a job file that is bad input is one line
    ``tidgap worker: error: ...`` and status 2. On any other failure it reports and ends
    the process at once with status 1, before the process group is torn down, so that a
    rank that fails because of this one (its connection closed) fails later, and this
    report is the last line of its output."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tidgap.runtime.worker JOB.json", file=sys.stderr)
        return 2
    try:
        job = Job.load(args[0])
        rank, world_size = launched_rank()
        plans = checked_job(job, args[0], world_size)
    except InputError as error:  # bad input: one line, exit 2, as tidgap's commands
        print(f"tidgap worker: error: {error}", file=sys.stderr)
        return 2

    def save(results: list[dict[str, Any]]) -> None:
        for index, result in enumerate(results):
            save_result(result, result_path(job.results, rank, index))

    run_watched(job, rank, world_size, save, plans=plans, source=args[0])
    return 0


def launched_rank() -> tuple[int, int]:
    """``(RANK, WORLD_SIZE)`` as the launcher set them; :class:`InputError` unless they are
    set, integers, and the rank below the world size."""
    rank, world_size = os.environ.get("RANK", ""), os.environ.get("WORLD_SIZE", "")
    if not (rank.isdigit() and world_size.isdigit() and int(rank) < int(world_size)):
        raise InputError(
            f"RANK {rank!r} and WORLD_SIZE {world_size!r} are not a process of a group: start "
            "the worker under torchrun (tidgap run --write-job prints the command)"
        )
    return int(rank), int(world_size)


def checked_job(job: Job, source: str, world_size: int) -> list[Plan]:
    """The plans of ``job`` (the file ``source``), each checked against its problem (a plan
    for another problem refused), its ``boundaries`` and the launcher's ``world_size``
    counted against the problem's stages and its ``results`` not a file: :class:`InputError`
    naming the file and field otherwise (before the model is built)."""
    from tidgap.model.plan import load_plan
    from tidgap.model.problem import load_problem

    if Path(job.results).exists() and not Path(job.results).is_dir():
        raise InputError("is a file, not a folder", ("results",), source=source)
    problem = load_problem(job.problem)
    require_world(world_size, problem, job.problem)
    if len(job.boundaries) != problem.num_stages - 1:
        raise InputError(
            f"has {len(job.boundaries)} boundaries, the problem's {problem.num_stages} stages "
            f"need {problem.num_stages - 1}",
            ("boundaries",),
            source=source,
        )
    return [load_plan(path, problem, refuse_other=True) for path in job.plans]


def run_watched(
    job: Job,
    rank: int,
    world_size: int,
    deliver: Deliver,
    say: Say = progress,
    plans: Sequence[Plan] | None = None,
    source: str | None = None,
    who: tuple[str, str] = ("worker", ""),
) -> None:
    """:func:`run_rank` (of ``plans``, default the job's) under :func:`start_watchdog`
    (``job.timeout``, naming ``who``: the process and a hint on a timeout), stopped once
    the run is over; any failure is reported as the last stderr line (the launcher quotes
    it) and ends the process at once (:func:`die_reporting`). A :class:`JobError` names
    ``source``, the job's file."""
    try:
        watchdog = start_watchdog(job.timeout, who[0], hint=who[1])
        run_rank(job, rank, world_size, deliver, say, plans)
        watchdog.set()
    except JobError as error:  # the job's model options or split: one line, as main's
        if source is not None:
            error.within(source)
        print(f"tidgap worker: error: {error}", file=sys.stderr, flush=True)
        os._exit(2)
    except BaseException as error:
        die_reporting(error)


#: What torchrun sets in each process it starts (and :func:`torchrun_rank` reads).
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def torchrun_rank() -> tuple[int, int] | None:
    """``(rank, world size)`` when this process was started by torchrun (every one of
    :data:`TORCHRUN_VARIABLES` set), else ``None``; :class:`InputError` naming the variable
    where one is not what torchrun sets (a rank below the world size, a local rank below
    ``LOCAL_WORLD_SIZE``, a port number)."""
    values = dict(zip(TORCHRUN_VARIABLES, map(os.environ.get, TORCHRUN_VARIABLES), strict=True))
    if not all(values.values()):
        return None
    rank, world_size, local_rank, _, port = values.values()
    checks = {
        "WORLD_SIZE": world_size.isdigit() and int(world_size) > 0,
        "RANK": rank.isdigit() and world_size.isdigit() and int(rank) < int(world_size),
        "LOCAL_RANK": local_rank.isdigit()
        and ("LOCAL_WORLD_SIZE" not in os.environ or int(local_rank) < local_processes()),
        "MASTER_PORT": port.isdigit() and int(port) < 65536,
    }
    for name, ok in checks.items():
        if not ok:
            raise InputError(
                f"{values[name]!r} is not what torchrun sets (WORLD_SIZE {world_size!r}, "
                f"LOCAL_WORLD_SIZE {os.environ.get('LOCAL_WORLD_SIZE', '')!r})",
                source=name,
            )
    return int(rank), int(world_size)


def require_world(world_size: int, problem: Problem, source: str) -> None:
    """:class:`InputError` (naming the problem file ``source``) unless torchrun started one
    process per stage of ``problem``."""
    why = stage_count_mismatch(problem.num_stages, world_size)
    if why is not None:
        raise InputError(f"has {why}", ("stages",), source=source)


def stage_count_mismatch(stages: int, world_size: int) -> str | None:
    """Why torchrun's ``world_size`` processes cannot run ``stages`` stages (one process per
    stage), or ``None`` when they can."""
    if world_size == stages:
        return None
    return (
        f"{stages} stages, and torchrun started {world_size} processes (WORLD_SIZE): one per stage"
    )


def local_processes() -> int:
    """How many processes torchrun started on this machine (``LOCAL_WORLD_SIZE``; 1 when
    it does not say)."""
    value = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(value) if value.isdigit() and int(value) > 0 else 1


def run_here(
    job: Job, rank: int, world_size: int, plans: Sequence[Plan]
) -> list[list[dict[str, Any]]] | None:
    """Run ``plans`` in turn as rank ``rank`` of ``world_size`` of ``job`` in this process
    (one torchrun started, which runs ``tidgap run`` itself; no file is written, so a rank
    that fails or is ended leaves nothing behind), quietly; every rank's results reach rank 0
    over the process group: there, per plan, the ranks' results (as :func:`main`'s files
    hold them); ``None`` on the other ranks. A failure ends the process
    (:func:`run_watched`, status 1, one last line); so does a run past ``job.timeout`` or
    the end of torchrun's agent."""
    from torch import distributed as dist

    found: list[list[dict[str, Any]]] | None = None

    def gather(results: list[dict[str, Any]]) -> None:
        nonlocal found
        every: list[Any] | None = [None] * world_size if rank == 0 else None
        dist.gather_object(results, every, dst=0)
        if every is not None:
            found = [list(ranks) for ranks in zip(*every, strict=True)]

    # the watchdog stops with the run: rank 0's report may take longer than its timeout;
    # what the model prints goes to stderr, so that rank 0's --json stays JSON
    with contextlib.redirect_stdout(sys.stderr):
        run_watched(job, rank, world_size, gather, lambda _: None, plans, who=torchrun_who(rank))
    return found


def torchrun_who(rank: int) -> tuple[str, str]:
    """How a rank under torchrun names itself, and what it adds when it times out: the
    rendezvous it waited on, and that a shell holding torchrun's variables makes ``tidgap
    run`` a rank too."""
    address = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
    variables = ", ".join(TORCHRUN_VARIABLES)
    return f"tidgap run rank {rank}", (
        f" waiting for the others at {address} (torchrun's {variables} are set; a shell that "
        "kept them from a torchrun makes tidgap run one rank: unset them to run every stage "
        "from here)"
    )


def die_reporting(error: BaseException) -> NoReturn:
    """Print the traceback, then one last line ``Error: message`` (a :class:`RunFailed`'s
    message alone: it names the error) on stderr (the launcher quotes it), and end the
    process at once with status 1 (no teardown that could hang)."""
    traceback.print_exc()
    line = str(error) if isinstance(error, RunFailed) else first_line(error)
    print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
