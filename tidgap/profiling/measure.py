"""Timing forward and backward passes of consecutive modules, as a training step runs them.

Forward runs with autograd on (as in training, never under ``torch.no_grad()``); backward
is ``y.backward(g)`` on the module's output ``y`` with a random gradient ``g`` of its
shape. Each module is timed on its own stored input, the previous module's output
(computed once, untimed), detached and (when floating point) requiring a gradient, as a
pipeline stage receives it; the first module takes the model's input as is. So modules do
not disturb each other's timings. Times are in ms, synchronised on CUDA: the median of
``repeats`` rounds after ``warmup`` rounds, each round timing every module on every input
once, so that a burst of load from other processes spreads over all the measurements
instead of skewing a few.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tidgap.model.errors import InputError
from tidgap.model.text import counted
from tidgap.profiling.affine import collinear, line_above
from tidgap.profiling.user_code import user_errors
from tidgap.runtime.drawing import (
    DROPOUT_MASK,
    drawing_as_recomputed,
    drew_since,
    generator_states,
)
from tidgap.runtime.draws import Recording


@dataclass(frozen=True)
class Measurement:
    """One module at one microbatch size: times in ms, output bytes per sample."""

    forward_ms: float
    backward_ms: float
    output_bytes_per_sample: int


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA runs asynchronously; nothing on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def synchronize_stream(device: torch.device) -> None:
    """Wait for the work queued on ``device``'s current stream only (nothing on the CPU):
    where other streams hold work that waits on another process (NCCL's receives, posted
    ahead on their own streams), waiting for the whole device would wait for chunks not
    yet sent."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def _timed(action: Callable[..., Any], device: torch.device, *arguments: Any) -> tuple[Any, float]:
    """Run ``action(*arguments)`` once; return its result and its duration in ms."""
    synchronize(device)
    start = time.perf_counter()
    result = action(*arguments)
    synchronize(device)
    return result, (time.perf_counter() - start) * 1e3


#: What the modules measured are: a model's layers, or the stages a split makes of them.
LAYER, STAGE = "layer", "stage"


def checked_output(name: str, output: object, size: int, noun: str = LAYER) -> Tensor:
    """The module's output, if it is one tensor batched along dimension 0 (an error names
    it as ``noun`` ``name``)."""
    if not isinstance(output, Tensor):
        raise InputError(f"{noun} {name!r} returned a {type(output).__name__}, not one tensor")
    if output.dim() == 0 or output.shape[0] != size:
        raise InputError(
            f"{noun} {name!r} returned shape {tuple(output.shape)}, "
            f"whose first dimension is not the microbatch size {size}"
        )
    return output


#: What PyTorch's layers that normalise over the samples say when given one in train mode
#: (``BatchNorm``: "Expected more than 1 value per channel when training").
TOO_FEW_SAMPLES = "more than 1 value"


@contextmanager
def module_errors(name: str, size: int, noun: str = LAYER) -> Iterator[None]:
    """Any error a layer (or stage: ``noun``) raises on ``size`` samples (a shape mismatch,
    say, or the user's own exception) as one line of bad input naming it; on one sample,
    where a layer asks for more (:data:`TOO_FEW_SAMPLES`), with what to do."""
    try:
        with user_errors(f"{noun} {name!r} failed on {counted(size, 'sample')}"):
            yield
    except InputError as error:
        if size == 1 and TOO_FEW_SAMPLES in error.message:
            error.message += (
                " (a layer that normalises over the samples needs more than one: profile "
                "with --unit 2 or more)"
            )
        raise


def time_module(
    name: str,
    module: nn.Module,
    given: Tensor,
    device: torch.device,
    first: bool,
    noun: str = LAYER,
) -> Measurement:
    """One forward and backward of ``module`` (a ``noun``) on ``given`` ``(b, ...)``;
    ``first``: ``given`` is the model's input (no gradient wanted), else a predecessor's
    output (gradient wanted when floating point): a stage's as the transport delivers it
    (contiguous), a layer's as the layer before made it (a layer inside a stage takes a
    transposed view as it is, and pays for any copy)."""
    size = given.shape[0]
    x = stage_input(given, first, received=noun == STAGE)
    with module_errors(name, size, noun):
        output, forward_ms = _timed(module, device, x)
        output = checked_output(name, output, size, noun)
        backward_ms = 0.0
        if output.requires_grad:  # a parameter-free layer on the data has no backward
            gradient = torch.randn_like(output)
            _, backward_ms = _timed(output.backward, device, gradient)
    return Measurement(forward_ms, backward_ms, output.numel() * output.element_size() // size)


def chain_inputs(
    modules: Sequence[tuple[str, nn.Module]], first: Tensor, noun: str = LAYER
) -> list[Tensor]:
    """The input of each module (a ``noun``) when ``first`` goes through the chain (untimed,
    no autograd)."""
    inputs = [first]
    with torch.no_grad():
        for name, module in modules[:-1]:
            with module_errors(name, first.shape[0], noun):
                output = module(inputs[-1])
            inputs.append(checked_output(name, output, first.shape[0], noun))
    return inputs


def held_bytes_per_sample(modules: Sequence[tuple[str, nn.Module]], first: Tensor) -> int:
    """Bytes per sample that timing the chain holds at once at the least: the model's
    input ``first`` ``(b, ...)`` and the largest module output (kept for the next module
    or being timed), from one untimed pass without autograd (rounded up)."""
    size = first.shape[0]
    x, largest = first, 0
    with torch.no_grad():
        for name, module in modules:
            with module_errors(name, size):
                x = checked_output(name, module(x), size)
            largest = max(largest, x.numel() * x.element_size())
    return -(-(first.numel() * first.element_size() + largest) // size)


def storage_key(tensor: Tensor) -> int:
    """The key a storage is known by (:class:`StorageBytes`): its address."""
    return tensor.untyped_storage().data_ptr()


def storage_keys(tensors: Iterable[Tensor]) -> set[int]:
    """The :func:`storage_key` of each of ``tensors``."""
    return {storage_key(tensor) for tensor in tensors}


def state_tensors(module: nn.Module) -> list[Tensor]:
    """``module``'s parameters and buffers: its state, held once whatever the schedule,
    never per forward (a buffer autograd saves, a causal mask or a batch norm's running
    statistics, is the same storage in every graph)."""
    return [*module.parameters(), *module.buffers()]


def watching_saved(saved: Callable[[Tensor], None]) -> AbstractContextManager[None]:
    """Inside the block, ``saved(alias)`` for each tensor autograd saves for the backward,
    ``alias`` a detached alias of it (the same storage and version counter) that the graph
    keeps in its place, as PyTorch advises: an op's output kept itself owns its grad_fn,
    which owns what it saved, a cycle through C++ that the collector cannot break
    (pytorch/pytorch#115255), so a graph that got no backward (a re-run that failed
    midway, an output detached) stayed alive to the process's end."""

    def pack(tensor: Tensor) -> Tensor:
        alias = tensor.detach()
        saved(alias)
        return alias

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)


class StorageBytes:
    """Bytes of tensors counted by storage, each storage once, those of ``left_out`` left
    out: those :meth:`add`-ed and those autograd saves inside :meth:`saving`. The count
    keeps ``left_out`` and what autograd saved alive, so that a storage freed meanwhile (a
    buffer a forward replaces, a branch's graph the forward drops) cannot lend its
    address, by which storages are known, to one it counts."""

    def __init__(self, left_out: Sequence[Tensor] = ()) -> None:
        self._kept = list(left_out)
        self._left_out = storage_keys(self._kept)
        self._storages: dict[int, int] = {}

    @classmethod
    def of(cls, module: nn.Module, left_out: Sequence[Tensor] = ()) -> StorageBytes:
        """A count that leaves out ``module``'s state (:func:`state_tensors`) and
        ``left_out``."""
        return cls([*state_tensors(module), *left_out])

    def leaves_out(self, tensor: Tensor) -> bool:
        """Whether ``tensor``'s storage is one of ``left_out``'s."""
        return storage_key(tensor) in self._left_out

    def add(self, *tensors: Tensor) -> None:
        """Count the storages of ``tensors``."""
        for tensor in tensors:
            if not self.leaves_out(tensor):
                self._storages[storage_key(tensor)] = tensor.untyped_storage().nbytes()

    def saving(self) -> AbstractContextManager[None]:
        """Count what autograd saves for the backward inside the block
        (:func:`watching_saved`)."""

        def counted(saved: Tensor) -> None:
            self.add(saved)
            self._kept.append(saved)

        return watching_saved(counted)

    def total(self) -> int:
        """The bytes counted."""
        return sum(self._storages.values())


def graph_bytes_per_sample(module: nn.Module, given: Tensor, first: bool, last: bool) -> int:
    """Per sample of ``given`` ``(b, ...)`` (rounded up), what a stage of ``tidgap run`` that
    stores a forward's graph holds for its backward (as
    :class:`~tidgap.runtime.stage.HeldBytes` counts it): the tensors autograd saves in one
    forward of ``module`` on ``given``, the graph's input (unless ``first``: the model's
    input, the task's) and its output (:func:`output_kept`: if ``last``, the chunk's loss),
    each storage once, the module's own parameters left out (untimed; ``first`` as in
    :func:`time_module`)."""
    return -(-_graph_bytes(module, given, first, last) // given.shape[0])


def graph_growth(
    module: nn.Module, given: Tensor, first: bool, targets: Tensor | None, least: int = 1
) -> tuple[int, int]:
    """``(per_sample, per_chunk)``, rounded up: what one stored graph (as
    :func:`graph_bytes_per_sample` counts it, but the task's tensors: ``given`` if
    ``first``, the last stage's ``targets`` where given, which the stage keeps whole, and
    the chunk's loss on the last stage) holds is ``per_chunk + n * per_sample`` for a
    forward of ``n`` samples, from forwards of ``given`` ``(b, ...)`` and of its first
    ``least`` samples (:func:`growth`; ``per_chunk``: tensors made once per forward, a GPT's
    positions and masks, and the loss; 0 when ``b <= least``). Untimed."""
    task_data = task_tensors(given, first, targets)
    last = targets is not None

    def count(x: Tensor) -> int:
        return _graph_bytes(module, x, first, last, task_data)

    return growth(count, given, first, least, grows_in_steps(module))


#: Layers whose saved bytes grow in steps with the chunk size, at sizes no probe foresees
#: (oneDNN's LSTM workspace on the CPU: 19 of 240 LSTM shapes measured, up to 11% above
#: a line through a few sizes; no GRU or RNN): a stage holding one is measured at
#: :func:`swept_sizes` (:func:`growth`).
STEPPED_LAYERS = (nn.LSTM,)
#: The most sizes :func:`growth` measures a count that is not affine at: every multiple of
#: the unit up to this many, else this many spread evenly (each a forward: about half as
#: many forwards of the largest size; a 2-layer LSTM of width 256 at 128 samples: 3.9 s
#: a stage, both counts, where every size took 31 s).
MOST_SIZES = 32


def grows_in_steps(module: nn.Module) -> bool:
    """Whether ``module`` holds one of :data:`STEPPED_LAYERS`."""
    return any(isinstance(m, STEPPED_LAYERS) for m in module.modules())


def growth(
    count: Callable[[Tensor], int],
    given: Tensor,
    first: bool,
    least: int = 1,
    sweep: bool = False,
) -> tuple[int, int]:
    """``(per_sample, per_chunk)``, whole numbers, the least line at or above ``count`` of
    ``n`` samples (:func:`~tidgap.profiling.affine.line_above`; ``count`` itself where it is
    affine) at the sizes measured: ``given`` ``(b, ...)``, its first ``least`` samples
    (:func:`first_samples`; the profile's unit: the smallest chunk a plan has, and a layer
    such as ``BatchNorm1d`` fails on one sample) and :func:`probe_sizes`; where those but
    the unit are not on one line (the unit's may be off it: a transpose of one sample
    copies nothing), or ``sweep``, also :func:`swept_sizes` (all of them where there
    are at most :data:`MOST_SIZES`: else a step between two is not seen).
    ``(count(given), 0)`` when ``b <= least``. A layer's error is one line of bad input."""
    size = given.shape[0]

    def counted_at(n: int) -> int:
        with user_errors(f"measuring what a forward of {counted(n, 'sample')} holds failed"):
            return count(given if n == size else first_samples(given, first, n))

    whole = counted_at(size)
    if size <= least:
        return -(-whole // size), 0
    counts = {size: whole, least: counted_at(least)}
    counts |= {n: counted_at(n) for n in probe_sizes(least, size)}
    if sweep or not collinear([(n, f) for n, f in counts.items() if n != least]):
        counts |= {n: counted_at(n) for n in swept_sizes(least, size) if n not in counts}
    return line_above(counts)


def swept_sizes(least: int, size: int) -> list[int]:
    """The multiples of ``least`` from ``least`` to ``size`` that :func:`growth` measures a
    count that is not affine at: all of them up to :data:`MOST_SIZES`, else that many
    spread evenly (the first and the last among them)."""
    multiples = size // least
    if multiples <= MOST_SIZES:
        return [least * k for k in range(1, multiples + 1)]
    picks = {round(1 + i * (multiples - 1) / (MOST_SIZES - 1)) for i in range(MOST_SIZES)}
    return [least * k for k in sorted(picks)]


def probe_sizes(least: int, size: int) -> list[int]:
    """The sizes between ``least`` and ``size`` (multiples of ``least``) at which
    :func:`growth` checks its line: the largest below ``size`` and the middle one."""
    sizes = {size - least, size // (2 * least) * least}
    return sorted(n for n in sizes if least < n < size)


def first_samples(given: Tensor, first: bool, count: int) -> Tensor:
    """The first ``count`` samples of ``given`` ``(b, ...)`` as a stage gets them: a view of
    the task's tensor on the first stage, else a copy (a view's storage is all of
    ``given``)."""
    return given[:count] if first else given[:count].clone()


def task_tensors(given: Tensor, first: bool, targets: Tensor | None) -> list[Tensor]:
    """The task's tensors a stage cuts its chunks from and keeps whole: the model's input
    ``given`` on the first stage, the ``targets`` on the last (where given)."""
    return [given] * first + ([] if targets is None else [targets])


def _graph_bytes(
    module: nn.Module, given: Tensor, first: bool, last: bool, left_out: Sequence[Tensor] = ()
) -> int:
    """The bytes :func:`graph_bytes_per_sample` counts, for the whole of ``given``, but the
    storages of ``left_out``."""
    held = StorageBytes.of(module, left_out)
    x = stage_input(given, first)
    with held.saving():
        y = module(x)
    held.add(*([] if first else [x]), output_kept(y, last))
    return held.total()


def output_kept(y: Tensor, last: bool) -> Tensor:
    """What a stage of ``tidgap run`` keeps of a forward's output ``y`` ``(n, ...)``: ``y``,
    or on the last stage (``y`` the per-sample losses) the chunk's loss, their sum (a
    scalar)."""
    return y.detach().sum() if last else y


def recompute_bytes_per_sample(
    module: nn.Module, given: Tensor, first: bool, targets: Tensor | None, least: int = 1
) -> tuple[int, int, int, int, int, int]:
    """Per sample of ``given`` ``(b, ...)`` (rounded up), what a recomputing stage of
    ``tidgap run`` holds (:class:`~tidgap.runtime.recompute_memory.RecomputeBytes`): the
    bytes of the input it receives (``given``; 0 if ``first``: the model's input) and of the
    random values one forward of ``module`` on ``given`` draws, kept until its backward; its
    backward's working set: the tensors autograd saves in that forward re-run with grad,
    its input and its output (:func:`output_kept`: on the last stage, whose ``targets`` are
    given, the chunk's loss), each storage once, the parameters and the task's tensors
    left out, per sample and, returned last, per forward (:func:`growth`, from ``given``
    and its first ``least`` samples); and the task's
    tensors the stage cuts its chunks from, ``given`` if ``first`` and ``targets``; and
    last, the draws' bytes that are ``nn.Dropout`` masks (a re-run forward's working set
    takes them as views of the kept draws; it copies other random operators' outputs).
    Untimed."""
    task_data = task_tensors(given, first, targets)
    recordings: list[Recording] = []

    def working_set(chunk: Tensor) -> int:
        x = stage_input(chunk, first)
        working = StorageBytes.of(module, task_data)
        with drawing_as_recomputed(module, others=False) as recording, working.saving():
            y = module(x)
        if not recordings:  # the first, at the largest size: the others' draws not kept
            recordings.append(recording)
        working.add(x, output_kept(y, targets is not None))
        return working.total()

    before = generator_states(given.device)
    backward, backward_chunk = growth(working_set, given, first, least, grows_in_steps(module))
    recording = recordings[0]
    if drew_since(before, given.device):  # a random operator besides nn.Dropout drew
        with torch.no_grad(), drawing_as_recomputed(module, others=True) as recording:
            module(stage_input(given, first))
    draws, shared = StorageBytes(), StorageBytes()
    draws.add(*(t for draw in recording.draws for t in draw.tensors))
    shared.add(*(t for draw in recording.draws if draw.name == DROPOUT_MASK for t in draw.tensors))
    data = StorageBytes()
    data.add(*task_data)
    received = 0 if first else given.numel() * given.element_size()
    size = given.shape[0]
    input_bytes, draw_bytes, task_bytes, shared_bytes = (
        -(-count // size) for count in (received, draws.total(), data.total(), shared.total())
    )
    return input_bytes, draw_bytes, backward, task_bytes, backward_chunk, shared_bytes


def stage_input(given: Tensor, first: bool, received: bool = True) -> Tensor:
    """``given`` ``(b, ...)`` as a stage receives it: detached; unless ``first`` (the
    model's input, cut from the task's tensor), contiguous where ``received`` (as the
    transport delivers it: a transposed view's copy; measured on the view, a stage whose
    first layer copies it counted both; a layer inside a stage takes the view as it is),
    and wanting a gradient where floating point."""
    x = given.detach()
    if first:
        return x
    if received:
        x = x.contiguous()
    if x.is_floating_point():
        x.requires_grad_(True)
    return x


def cuda_peak_bytes(
    module: nn.Module, given: Tensor, first: bool, device: torch.device
) -> int | None:
    """On CUDA, the most bytes the caching allocator held during one forward and backward
    of ``module`` on ``given`` ``(b, ...)`` above what it held before
    (``torch.cuda.max_memory_allocated``: activations, the output and its gradient, the
    parameters' gradients and any workspace); ``None`` on another device. The gradients
    are cleared before and after (untimed; ``first`` as in :func:`time_module`)."""
    if device.type != "cuda":
        return None
    x = stage_input(given, first)
    module.zero_grad(set_to_none=True)  # the gradients' buffers count in the peak
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    output = module(x)
    if output.requires_grad:
        output.backward(torch.ones_like(output))
    synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    module.zero_grad(set_to_none=True)
    return peak


def measure(
    modules: Sequence[tuple[str, nn.Module]],
    inputs: Sequence[Tensor],
    device: torch.device,
    repeats: int,
    warmup: int,
    on_step: Callable[[str], None] = lambda label: None,
    model_input: bool = True,
    noun: str = LAYER,
) -> list[list[Measurement]]:
    """Median timings ``[i][m]`` of module ``m`` of the chain fed ``inputs[i]``.

    Each round times every module at every input, module by module.
    ``on_step`` is told ``"NAME, b=SIZE, round R/N"`` after each timing. ``model_input``:
    ``inputs`` are the model's input (else a stage's output, which wants a gradient).
    ``noun``: what the modules are, as errors name them (:data:`LAYER`, :data:`STAGE`).
    """
    fed = [chain_inputs(modules, first, noun) for first in inputs]
    rounds = warmup + repeats
    kept: list[list[list[Measurement]]] = [[[] for _ in modules] for _ in inputs]
    for round_ in range(rounds):
        for m, (name, module) in enumerate(modules):
            for i, chain in enumerate(fed):
                first = model_input and m == 0
                timing = time_module(name, module, chain[m], device, first, noun)
                if round_ >= warmup:
                    kept[i][m].append(timing)
                on_step(f"{name}, b={chain[m].shape[0]}, round {round_ + 1}/{rounds}")
    return [
        [
            Measurement(
                statistics.median(t.forward_ms for t in timings),
                statistics.median(t.backward_ms for t in timings),
                timings[-1].output_bytes_per_sample,
            )
            for timings in per_module
        ]
        for per_module in kept
    ]


def time_steps(
    modules: Sequence[tuple[str, nn.Module]],
    inputs: Sequence[Tensor],
    device: torch.device,
    optimizer: str,
    lr: float,
    repeats: int,
    warmup: int,
    on_step: Callable[[str], None] = lambda label: None,
    model_input: bool = True,
) -> list[float]:
    """Per module, the median ms of its optimizer step (:func:`tidgap.runtime.optimizers.step`:
    ``optimizer`` over its parameters, learning rate ``lr``), the stage's tail, on the
    gradients of one backward of ``inputs[m]`` (module ``m``'s input, ``(b, ...)``; the
    first module's is the model's input when ``model_input``), each round restoring them
    before the step.

    Rounds as :func:`measure`'s: each times every module once; ``on_step`` is told
    ``"NAME step, round R/N"`` after each timing. The modules' weights are stepped.
    """
    from tidgap.runtime.optimizers import build_optimizer, step

    stepped = []
    for m, ((name, module), given) in enumerate(zip(modules, inputs, strict=True)):
        parameters = [p for p in module.parameters() if p.requires_grad]
        for p in parameters:
            p.grad = None
        x = stage_input(given, model_input and m == 0)
        with module_errors(name, x.shape[0], STAGE):
            output = checked_output(name, module(x), x.shape[0], STAGE)
            if output.requires_grad:
                output.backward(torch.randn_like(output))
        gradients = [p.grad for p in parameters]
        stepped.append((name, parameters, gradients, build_optimizer(optimizer, parameters, lr)))
    rounds = warmup + repeats
    kept: list[list[float]] = [[] for _ in modules]
    for round_ in range(rounds):
        for m, (name, parameters, gradients, built) in enumerate(stepped):
            for p, gradient in zip(parameters, gradients, strict=True):
                p.grad = None if gradient is None else gradient.clone()
            _, ms = _timed(step, device, built)
            if round_ >= warmup:
                kept[m].append(ms)
            on_step(f"{name} step, round {round_ + 1}/{rounds}")
    return [statistics.median(times) for times in kept]


def _cpu_seconds() -> tuple[float, float | None, float]:
    """Now: wall clock, CPU seconds every process has been busy (Linux, else ``None``), and
    CPU seconds of this process, all threads, in seconds."""
    try:
        fields = Path("/proc/stat").read_text(encoding="ascii").split("\n", 1)[0].split()
        busy = sum(int(fields[i]) for i in (1, 2, 3, 6, 7, 8)) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        busy = None
    own = os.times()
    return time.perf_counter(), busy, own.user + own.system


class OtherLoad:
    """How many cores other processes kept busy, on average, since this was created.

    Measured CPU times are inflated when other processes compete for the cores.
    """

    def __init__(self) -> None:
        self._start = _cpu_seconds()

    def cores(self) -> float | None:
        """Average busy cores outside this process so far; ``None`` where unknown."""
        wall, busy, own = _cpu_seconds()
        wall0, busy0, own0 = self._start
        if busy is None or busy0 is None or wall <= wall0:
            return None
        return max(0.0, (busy - busy0 - (own - own0)) / (wall - wall0))
