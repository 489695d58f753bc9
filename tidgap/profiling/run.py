"""``tidgap profile`` end to end: split a model into stages, measure them, build the problem."""

from __future__ import annotations

import contextlib
import datetime
import platform
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from tidgap import __version__
from tidgap.host import cpu_model
from tidgap.model.errors import InputError
from tidgap.model.text import counted
from tidgap.optimize.memory import require_available
from tidgap.profiling.allocator import ALLOCATOR_KEPT, keep_freed_memory
from tidgap.profiling.build import Json, link, measurement_sizes, problem_document, rounded
from tidgap.profiling.measure import (
    MOST_SIZES,
    STAGE,
    Measurement,
    OtherLoad,
    chain_inputs,
    cuda_peak_bytes,
    graph_bytes_per_sample,
    graph_growth,
    held_bytes_per_sample,
    measure,
    recompute_bytes_per_sample,
    time_steps,
)
from tidgap.profiling.models import Model, parameter_count
from tidgap.profiling.split import balanced_split, groups, parse_split, stage_layers
from tidgap.profiling.user_code import naming, user_errors
from tidgap.runtime.optimizers import describe
from tidgap.runtime.recompute_memory import CHUNK_FIELD, FIELDS, GRAPH_FIELDS, SHARED_DRAWS_FIELD
from tidgap.runtime.reference import batch_normalising_layers
from tidgap.runtime.stage import NamedStage
from tidgap.runtime.task import Task, make_task

Step = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    """How to profile. Sizes in samples, ``bandwidth`` in GB/s, ``latency`` in ms;
    ``split`` is the ``--split`` text or ``None`` to balance; ``threads`` ``None`` keeps
    PyTorch's default; ``recompute``: each backward time includes the stage's forward of the
    same samples (``tidgap run`` recomputes it for plans whose backward boundaries are not
    forward boundaries); ``optimizer`` (a :data:`~tidgap.runtime.optimizers.OPTIMIZERS`
    name, learning rate ``lr``): time its step into each stage's ``tail`` (``None``: tails
    0)."""

    name: str
    stages: int
    batch_size: int
    unit: int
    cap: int
    split: str | None
    device: str
    repeats: int
    warmup: int
    threads: int | None
    bandwidth: float
    latency: float
    recompute: bool = False
    optimizer: str | None = None
    lr: float | None = None


def torch_device(name: str) -> torch.device:
    """``cpu`` or ``cuda``; CUDA that is not usable is an :class:`InputError` on ``--device``."""
    if name == "cuda" and not torch.cuda.is_available():
        reason = "no CUDA device found" if torch.version.cuda else "this PyTorch has no CUDA"
        raise InputError(
            f"CUDA is not usable: {reason} (torch {torch.__version__})", source="--device"
        )
    return torch.device(name)


def machine(device: torch.device) -> str:
    """The GPU's name, or the CPU's model and core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def require_activation_room(model: Model, settings: Settings, device: torch.device) -> None:
    """:class:`InputError` on ``--batch-size`` (``--max-microbatch`` when it sets the cap) if
    a microbatch of ``settings.cap`` samples cannot hold even the model's input and its
    largest layer's output (:func:`held_bytes_per_sample` of ``settings.unit`` samples) in
    the memory available: before measuring, so that an absurd batch is one line, not the
    out-of-memory killer (Linux grants large allocations before it has the pages)."""
    layers = list(model.named_layers())
    per_sample = held_bytes_per_sample(layers, model.input(settings.unit, device))
    needed = per_sample * settings.cap
    require_available(
        needed,
        f"a microbatch of {settings.cap} samples holds at least {needed / 1e9:.3g} GB (the "
        f"input and the largest layer's output, {per_sample} bytes a sample)",
        "--batch-size" if settings.cap == settings.batch_size else "--max-microbatch",
        available=torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None,
    )


#: Where the stages are cut (``source.split.boundaries``) and how that was chosen.
Split = tuple[list[int], Json]


def balance(model: Model, settings: Settings, device: torch.device, on_step: Step) -> Split:
    """Boundaries balancing per-layer forward+backward time at the cap, and how (``source``)."""
    layers = list(model.named_layers())
    first = model.input(settings.cap, device)
    (measured,) = measure(layers, [first], device, settings.repeats, settings.warmup, on_step)
    costs = [m.forward_ms + m.backward_ms for m in measured]
    boundaries = balanced_split(costs, settings.stages)
    return boundaries, {
        "method": "balanced: consecutive layers, least largest stage sum of per-layer "
        f"forward+backward medians measured at {settings.cap} samples",
        "boundaries": boundaries,
        "layer_ms": {name: rounded(cost) for (name, _), cost in zip(layers, costs, strict=True)},
    }


def chosen_split(
    model: Model, settings: Settings, given: list[int] | None, device: torch.device, on_step: Step
) -> Split:
    """``given`` boundaries (``--split``), else balanced ones (:func:`balance`, measured)."""
    if given is None:
        return balance(model, settings, device, on_step)
    return given, {"method": "given by --split", "boundaries": given}


def checked_split(model: Model, settings: Settings) -> list[int] | None:
    """The ``--split`` boundaries (``None``: to balance), checked against ``model``'s layers
    and ``settings.stages`` before anything is measured: else :class:`InputError`."""
    names = [name for name, _ in model.named_layers()]
    if settings.stages > len(names):
        raise InputError(
            f"{settings.stages} stages need at least {settings.stages} layers, "
            f"the model has {len(names)}",
            source="--stages",
        )
    return None if settings.split is None else parse_split(settings.split, names, settings.stages)


def stage_modules(model: Model, boundaries: list[int]) -> list[NamedStage]:
    """Per stage: its name (``first-last`` layer), its layer names, the layers as one module."""
    layers = dict(model.named_layers())
    return [
        (label, names, nn.Sequential(*(layers[name] for name in names)))
        for label, names in stage_layers(list(layers), boundaries).items()
    ]


#: What a split whose stages share a parameter would do in ``tidgap run``.
SHARED_ACROSS_STAGES = (
    "each stage's process holds its own copy, so their gradients and updates would not be "
    "the model's (tied weights across stages are not supported): split so that both are on "
    "one stage"
)


def shared_between_stages(model: Model, boundaries: list[int]) -> str | None:
    """Where layers of two stages share a parameter (tied weights, or one layer placed
    twice), the first pair, as ``"layers 'embed' (stage 0) and 'head' (stage 1) share a
    parameter (weight, weight)"``; ``None`` where no stage shares one."""
    layers = list(model.named_layers())
    owners: dict[int, tuple[int, str, str]] = {}
    for stage, indices in enumerate(groups(len(layers), boundaries)):
        for name, layer in (layers[i] for i in indices):
            for parameter_name, parameter in layer.named_parameters():
                first = owners.setdefault(id(parameter), (stage, name, parameter_name))
                if first[0] != stage:
                    return (
                        f"layers {first[1]!r} (stage {first[0]}) and {name!r} (stage {stage}) "
                        f"share a parameter ({first[2]}, {parameter_name})"
                    )
    return None


def step_count(model: Model, settings: Settings) -> int:
    """How many timings :func:`profile` makes: each round, every layer at the cap to
    balance them (unless ``--split`` is given), then every stage at every size, then
    (``optimizer``) every stage's step."""
    balancing = len(model.layers) if settings.split is None else 0
    sizes = measurement_sizes(settings.unit, settings.cap)
    steps = settings.stages if settings.optimizer is not None else 0
    rounds = settings.warmup + settings.repeats
    return rounds * (balancing + settings.stages * len(sizes) + steps)


class WithLoss(nn.Module):
    """A last stage and the loss ``tidgap run`` computes after it: ``(n, ...)`` inputs ->
    ``(n,)`` per-sample losses against the first ``n`` of ``task``'s targets."""

    def __init__(self, stage: nn.Module, task: Task) -> None:
        super().__init__()
        self.stage, self.task = stage, task

    def forward(self, x: Tensor) -> Tensor:
        return self.task.loss(self.stage(x), self.task.targets[: x.shape[0]])


@dataclass(frozen=True)
class StageMeasurements:
    """What :func:`measure_stages` measured of some consecutive stages: their ``names``;
    ``runs[i][k]`` (``sizes[i]``, the ``k``-th of them); ``held[k]``, the bytes it holds for
    the backward per sample when it stores a forward's graph (at the largest size:
    ``activation_bytes``, :func:`~tidgap.profiling.measure.graph_bytes_per_sample`);
    ``recompute[k]``, the bytes per sample a recomputing stage holds (its input, its
    forward's random draws, its backward's working set, its task's tensors, and the working
    set's bytes per forward: :class:`~tidgap.runtime.recompute_memory.RecomputeBytes`, at
    the largest size, the unit and the sizes :func:`~tidgap.profiling.measure.growth`
    probes);
    ``cuda_peaks[k]``, on CUDA the most bytes the allocator held in its forward and
    backward at the largest size (``None`` elsewhere); ``tails[k]``, its optimizer step in
    ms on the gradients of a backward at the largest size (``None`` without
    ``settings.optimizer``); ``how`` the split was chosen; ``growth[k]``, a stored graph's
    bytes per sample and per forward (:func:`~tidgap.profiling.measure.graph_growth`)."""

    names: list[str]
    runs: list[list[Measurement]]
    held: list[int]
    recompute: list[tuple[int, int, int, int, int, int]]
    cuda_peaks: list[int | None]
    tails: list[float] | None
    how: Json
    growth: list[tuple[int, int]] = field(default_factory=list)


def joined_measurements(parts: Sequence[StageMeasurements]) -> StageMeasurements:
    """``parts`` (each of some stages, in stage order, of one split) as one measurement."""
    tails = [part.tails for part in parts]
    return StageMeasurements(
        names=[name for part in parts for name in part.names],
        runs=[[m for part in parts for m in part.runs[i]] for i in range(len(parts[0].runs))],
        held=[held for part in parts for held in part.held],
        recompute=[bytes_ for part in parts for bytes_ in part.recompute],
        cuda_peaks=[peak for part in parts for peak in part.cuda_peaks],
        tails=None if None in tails else [t for part in tails for t in part or []],
        how=parts[0].how,
        growth=[g for part in parts for g in part.growth],
    )


def measure_stages(
    model: Model,
    settings: Settings,
    split: Split,
    device: torch.device,
    sizes: list[int],
    on_step: Step,
    stage: int | None = None,
) -> StageMeasurements:
    """Measure the stages of ``model`` cut at ``split`` at ``sizes``: every one, or only
    ``stage`` (fed what the stages before it output, computed untimed)."""
    boundaries, how = split
    stages = stage_modules(model, boundaries)
    how = {**how, "stages": {label: layers for label, layers, _ in stages}}
    named = [(label, module) for label, _, module in stages]
    task = make_task(model, max(sizes), 0, device, torch.get_default_dtype())
    named[-1] = (named[-1][0], WithLoss(named[-1][1], task))
    picked = range(len(named)) if stage is None else range(stage, stage + 1)
    ahead = named[: picked[0] + 1]  # the stages up to the first measured, to feed it
    inputs = [chain_inputs(ahead, model.input(size, device), STAGE)[-1] for size in sizes]
    timed = named[picked[0] : picked[-1] + 1]
    first = picked[0] == 0
    runs = measure(timed, inputs, device, settings.repeats, settings.warmup, on_step, first, STAGE)
    fed = chain_inputs(timed, inputs[-1], STAGE)
    # per measured stage: its module, its input at the largest size, whether it is the first
    largest = [
        (module, x, first and k == 0)
        for k, ((_, module), x) in enumerate(zip(timed, fed, strict=True))
    ]
    # per measured stage: the targets, on the model's last stage only
    ends = [None] * (len(largest) - 1) + [task.targets if picked[-1] == len(named) - 1 else None]
    unit = settings.unit
    held, growth, recompute, peaks = [], [], [], []
    for (label, _), given, targets in zip(timed, largest, ends, strict=True):
        with memory_forwards(label, given[1]):
            held.append(graph_bytes_per_sample(*given, targets is not None))
            growth.append(graph_growth(*given, targets, unit))
            recompute.append(recompute_bytes_per_sample(*given, targets, unit))
            peaks.append(cuda_peak_bytes(*given, device))
    tails = None
    if settings.optimizer is not None:
        assert settings.lr is not None, "an optimizer comes with its learning rate"
        tails = time_steps(
            timed,
            fed,
            device,
            settings.optimizer,
            settings.lr,
            settings.repeats,
            settings.warmup,
            on_step,
            first,
        )
    return StageMeasurements(
        [label for label, _ in timed], runs, held, recompute, peaks, tails, how, growth
    )


@contextlib.contextmanager
def memory_forwards(label: str, given: Tensor) -> Iterator[None]:
    """The forwards measuring what stage ``label`` holds, on ``given`` ``(b, ...)``: a
    layer's error in them is one line of bad input naming the stage."""
    forward = f"measuring what a forward of {counted(given.shape[0], 'sample')} holds failed"
    with naming(f"stage {label!r}"), user_errors(forward):
        yield


def batch_statistics_source(model: Model) -> Json:
    """``source.batch_statistics`` where some layer of ``model`` normalises by its batch's
    statistics in train mode (:attr:`tidgap.model.problem.Problem.batch_statistics_layers`);
    nothing where none does."""
    found = batch_normalising_layers(model.named_layers())
    if not found:
        return {}
    return {
        "batch_statistics": {
            "layers": found,
            "rule": "layers that normalise by their batch's statistics in train mode: a "
            "stage holding one that recomputes its forward would compute other gradients "
            "(tidgap run refuses it), so a search of this problem recomputes on no stage",
        }
    }


#: How ``source.memory``'s per-sample and per-forward figures come from forwards of a stage
#: (:func:`~tidgap.profiling.measure.growth`), after "measured at {cap} samples".
GROWTH_RULE = (
    f", at the unit and at two sizes between (also at every multiple of the unit, or "
    f"{MOST_SIZES} spread evenly, on a stage holding an nn.LSTM, whose oneDNN workspace "
    "grows in steps, or where the sizes but the unit are not on one line), the least line "
    "at or above them all"
)


def memory_source(measured: StageMeasurements, cap: int) -> Json:
    """``source.memory``: per stage, the bytes per sample a recomputing stage holds
    (:mod:`tidgap.runtime.recompute_memory`); on CUDA also each stage's allocator peak in a
    forward and backward at ``cap`` samples."""
    columns = map(list, zip(*measured.recompute, strict=True))
    memory: Json = dict(zip((*FIELDS, CHUNK_FIELD, SHARED_DRAWS_FIELD), columns, strict=True))
    memory["recompute_rule"] = (
        f"per sample at {cap} samples, what a recomputing stage of tidgap run holds: the "
        "bytes of the input it receives (0 on the first stage) and of the random values its "
        "forward draws in train mode as the stage keeps them (a bool mask per nn.Dropout, "
        "every output of other random operators; of those, the nn.Dropout masks as "
        f"{SHARED_DRAWS_FIELD}, which the re-run forward takes as views of the kept draws "
        "where one forward chunk holds them, where it copies the others); of its "
        "backward's working set (what "
        "autograd saves in the forward re-run with grad, its input and output, on the last "
        "stage the chunk's loss; each storage once, the parameters and the task's tensors "
        f"left out), measured at {cap} samples{GROWTH_RULE}, split into bytes per sample and "
        f"{CHUNK_FIELD} (tensors made once per forward, whatever its size); and of the "
        "task's tensors it cuts its chunks from (the model's input on the first stage, the "
        "targets on the last)"
    )
    if len(measured.growth) == len(measured.recompute):
        for field_name, column in zip(
            GRAPH_FIELDS, zip(*measured.growth, strict=True), strict=True
        ):
            memory[field_name] = list(column)
        memory["graph_rule"] = (
            f"measured at {cap} samples{GROWTH_RULE}, what a stage that stores a forward's "
            "graph holds for its backward, as activation_bytes counts it (on the last stage "
            "with the chunk's loss) but the task's tensors (held whole: "
            "task_bytes_per_sample), split into bytes per sample and bytes per forward "
            "(tensors made once per forward, whatever its size)"
        )
    if None not in measured.cuda_peaks:
        memory["cuda_peak_allocated_bytes"] = measured.cuda_peaks
        memory["cuda_rule"] = (
            f"torch.cuda.max_memory_allocated over one forward and backward of the stage "
            f"at {cap} samples, less what was allocated before (the parameters and the "
            "input): activations, the output and its gradient, the parameters' gradients "
            "and any workspace"
        )
    return {"memory": memory}


def tail_rule(settings: Settings) -> str:
    """How the stages' tails were measured (``source.timing.tail``)."""
    if settings.optimizer is None:
        return "not measured (0)"
    assert settings.lr is not None, "an optimizer comes with its learning rate"
    return (
        f"{describe(settings.optimizer, settings.lr)} over the stage's parameters: step() then "
        f"zero_grad(set_to_none=True), the median of {settings.repeats} rounds after "
        f"{settings.warmup} warm-up rounds, on the gradients of one backward at "
        f"{settings.cap} samples"
    )


@dataclass(frozen=True)
class Place:
    """Where a process measured: its ``host`` name, ``machine`` (the GPU's name, or the
    CPU's model and cores), PyTorch's ``threads``, and the cores other processes kept busy
    on average meanwhile (``None`` where unknown)."""

    host: str
    machine: str
    threads: int
    other_cores: float | None


def place_here(device: torch.device, load: OtherLoad) -> Place:
    """This process's :class:`Place`, the other processes' load since ``load`` began."""
    return Place(socket.gethostname(), machine(device), torch.get_num_threads(), load.cores())


@contextlib.contextmanager
def prepared(model: Model, settings: Settings, device: torch.device) -> Iterator[None]:
    """PyTorch on ``settings.threads`` threads (restored after), ``model``'s layers on
    ``device`` in training mode, room checked for a microbatch of the cap
    (:func:`require_activation_room`)."""
    previous_threads = torch.get_num_threads()
    try:
        if settings.threads is not None:
            torch.set_num_threads(settings.threads)
        model.layers.to(device).train()
        require_activation_room(model, settings, device)
        yield
    finally:
        torch.set_num_threads(previous_threads)


def profile(
    model: Model,
    settings: Settings,
    command: str,
    on_step: Step = lambda label: None,
) -> Json:
    """Measure ``model`` cut into ``settings.stages`` stages: a ``tidgap.problem/1`` document.

    ``on_step(label)`` follows each of the :func:`step_count` timings; ``command``
    (the command line) is recorded in ``source``. Bad settings raise :class:`InputError`
    before anything is measured. PyTorch's thread count is restored afterwards; the C
    library's ``malloc`` is left keeping freed memory, as in ``tidgap run``'s workers
    (:func:`~tidgap.profiling.allocator.keep_freed_memory`).
    """
    given = checked_split(model, settings)
    device = torch_device(settings.device)
    sizes = measurement_sizes(settings.unit, settings.cap)
    kept_freed_memory = keep_freed_memory()
    with prepared(model, settings, device):
        load = OtherLoad()
        split = chosen_split(model, settings, given, device, on_step)
        measured = measure_stages(model, settings, split, device, sizes, on_step)
        place = place_here(device, load)
    return problem_from(model, settings, measured, [place], device, kept_freed_memory, command)


def places_source(places: Sequence[Place], device: torch.device) -> tuple[str, Json]:
    """Where it was measured, as ``source``'s ``description`` ends, and as fields: one process's
    ``machine``, ``threads`` and ``other_processes_cores``; with a :class:`Place` per stage
    (under torchrun), the distinct machines and thread counts, the most busy cores, and
    ``ranks``, each stage's place."""
    machines = list(dict.fromkeys(place.machine for place in places))
    threads = list(dict.fromkeys(place.threads for place in places))
    others = [place.other_cores for place in places if place.other_cores is not None]
    fields: Json = {
        "machine": "; ".join(machines),
        "threads": threads[0] if len(threads) == 1 else threads,
        "other_processes_cores": round(max(others), 2) if others else None,
    }
    counts = "/".join(str(t) for t in threads)
    where = f"{device.type} ({fields['machine']}, {counts} thread{'' if counts == '1' else 's'})"
    if len(places) > 1:
        hosts = len({place.host for place in places})
        where += f", one process per stage on {hosts} host(s) under torchrun"
        fields["ranks"] = [
            {
                "host": place.host,
                "machine": place.machine,
                "threads": place.threads,
                "other_processes_cores": None
                if place.other_cores is None
                else round(place.other_cores, 2),
            }
            for place in places
        ]
    return where, fields


def problem_from(
    model: Model,
    settings: Settings,
    measured: StageMeasurements,
    places: Sequence[Place],
    device: torch.device,
    kept_freed_memory: bool,
    command: str,
) -> Json:
    """The ``tidgap.problem/1`` document of every stage ``measured`` on ``device``, at
    ``places`` (one, or one per stage), the links guessed from the bandwidth and latency;
    ``kept_freed_memory``: the allocator kept what was freed; ``command`` is recorded."""
    sizes = measurement_sizes(settings.unit, settings.cap)
    runs = measured.runs
    forward = [[run[s].forward_ms for run in runs] for s in range(settings.stages)]
    again = 1 if settings.recompute else 0  # the recomputed forward, counted in the backward
    backward = [
        [run[s].backward_ms + again * run[s].forward_ms for run in runs]
        for s in range(settings.stages)
    ]
    boundary_bytes = [m.output_bytes_per_sample for m in runs[-1][:-1]]
    links = [link(b, settings.bandwidth, settings.latency) for b in boundary_bytes]
    config = ", ".join(f"{key} {value}" for key, value in model.config.items())
    where, fields = places_source(places, device)
    source = {
        "description": f"{model.name} ({config}), {settings.stages} stages, batch "
        f"{settings.batch_size}, unit {settings.unit}; measured on {where}",
        "measured": True,
        "generated_by": f"tidgap profile (tidgap {__version__})",
        "command": command,
        "model": {"name": model.name, "parameters": parameter_count(model), **model.config},
        "device": device.type,
        **fields,
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "date": datetime.date.today().isoformat(),
        "split": measured.how,
        "timing": {
            "sizes": sizes,
            "statistic": f"median of {settings.repeats} rounds after {settings.warmup} warm-up "
            "rounds; each round times every stage at every size once, each stage on its own "
            "stored input",
            "forward": "the stage's forward with autograd on, as in training; the last "
            "stage's includes the per-sample loss tidgap run computes",
            "backward": "y.backward(g) on the stage output y, g a random gradient of y's shape"
            + (
                ", plus the forward of the same samples (recomputed, --recompute)"
                if settings.recompute
                else ""
            ),
            "recompute": settings.recompute,
            "allocator": ALLOCATOR_KEPT if kept_freed_memory else "the C library's defaults",
            "monotone": "times are the cumulative maximum over sizes (noisy medians may dip)",
            "tail": tail_rule(settings),
            "optimizer": None
            if settings.optimizer is None
            else {"name": settings.optimizer, "lr": settings.lr},
            "activation_bytes": "what a stage that stores a forward's graph holds for its "
            "backward, at the largest size, per sample: the tensors autograd saves "
            "(saved-tensor hooks), the graph's input (not on the first stage) and output (not "
            "on the last), each storage once, the stage's parameters left out",
        },
        **memory_source(measured, settings.cap),
        **batch_statistics_source(model),
        "links": {
            "bytes_per_sample": boundary_bytes,
            "bandwidth_GBps": settings.bandwidth,
            "latency_ms": settings.latency,
            "rule": "affine: latency + b * bytes_per_sample / bandwidth, the same both ways",
        },
    }
    return problem_document(
        settings.name,
        settings.batch_size,
        settings.unit,
        settings.cap,
        measured.names,
        sizes,
        forward,
        backward,
        links,
        source,
        measured.held,
        measured.tails,
    )
