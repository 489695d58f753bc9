"""One pipeline stage's torch compute on sample ranges (model.md, A plan; Ordered plans).

:class:`TorchStage` implements :class:`tidgap.runtime.handlers.StageCompute`: a forward of
samples ``(lo, hi)`` is cut from the upstream chunks received so far (they may straddle
it), a backward from the downstream gradient chunks. A stage whose backward boundaries
are all forward boundaries keeps each forward chunk's graph and runs the backward through
the chunks it covers; a recompute stage (:func:`tidgap.runtime.lowering.recomputes`) runs
its forwards without a graph, keeps its inputs, and re-runs the forward of each backward
chunk with grad before its backward; in train mode it replays, per sample, the random
draws (dropout masks) its forward chunks made (:mod:`tidgap.runtime.draws`), or, where
they cannot be replayed, draws anew and says why (``redrawn``). Any stage keeps its
forwards' draws for the gradient check while :attr:`TorchStage.checked_draws` is set. The last
stage's loss per chunk is the sum of its per-sample losses divided by ``B``, so the
chunks' sum is the full-batch mean loss.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from tidgap.profiling.measure import (
    StorageBytes,
    checked_output,
    synchronize_stream,
    watching_saved,
)
from tidgap.runtime.drawing import DrawingModules, drawing_of, generators_unchanged
from tidgap.runtime.draws import Draw, NotReplayable, RecordedDraws, Recording, Replay
from tidgap.runtime.failures import ProbeFailed, probe_failure_line
from tidgap.runtime.task import Task

Samples = tuple[int, int]
#: Per-sample shape and dtype of a boundary tensor (the batch dimension left out).
Spec = tuple[tuple[int, ...], torch.dtype]
#: A stage as :func:`~tidgap.profiling.run.stage_modules` gives it: name, layer names, module.
NamedStage = tuple[str, list[str], nn.Module]


def boundary_specs(stages: list[nn.Module], sample: Tensor) -> list[Spec]:
    """Per stage: the per-sample shape and dtype of its output, from running ``sample``
    (the first stage's input for a few samples, ``(n, ...)``: the problem's unit, the
    smallest chunk a plan has) through the stages without grad, in eval mode (no dropout
    drawn, batch norm with running statistics takes one sample); each module's mode is
    restored. Raises :class:`ProbeFailed` from what a stage raised, or where its output
    is not one tensor of ``n`` samples."""
    modes = [(m, m.training) for stage in stages for m in stage.modules()]
    specs = []
    try:
        with torch.no_grad():
            x = sample
            for i, module in enumerate(stages):
                try:
                    x = checked_output(last_layer(module), module.eval()(x), len(sample), LAST)
                except Exception as error:
                    raise ProbeFailed(i, len(sample)) from error
                specs.append((tuple(x.shape[1:]), x.dtype))
    finally:
        for m, training in modes:
            m.training = training
    return specs


#: What :func:`boundary_specs` names a stage's output as: its last layer's.
LAST = "its last layer"


def last_layer(stage: nn.Module) -> str:
    """The type of ``stage``'s last layer (``stage`` itself if not a ``Sequential``)."""
    layers = list(stage) if isinstance(stage, nn.Sequential) else [stage]
    return type(layers[-1] if layers else stage).__name__


def probed_specs(
    stages: list[NamedStage], sample: Tensor, error: Callable[[str], Exception]
) -> list[Spec]:
    """:func:`boundary_specs` of ``stages``' modules; where a stage fails, raises
    ``error(line)``, ``line`` naming the stage, the layer and the error
    (:func:`~tidgap.runtime.failures.probe_failure_line`)."""
    try:
        return boundary_specs([module for _, _, module in stages], sample)
    except ProbeFailed as failed:
        raise error(probe_failure_line(failed, stages)) from None


def batch_spec(spec: Spec, samples: Samples) -> tuple[tuple[int, ...], torch.dtype]:
    """The shape ``(hi - lo, *shape)`` and dtype of a chunk of ``samples``."""
    shape, dtype = spec
    return (samples[1] - samples[0], *shape), dtype


@dataclass
class Chunks:
    """Tensors of consecutive sample ranges as they arrived (``(lo, hi)``, dim 0 = samples)."""

    pieces: list[tuple[Samples, Tensor]] = field(default_factory=list)

    def add(self, samples: Samples, tensor: Tensor) -> None:
        """Keep ``tensor`` ``(hi - lo, ...)`` for ``samples``."""
        self.pieces.append((samples, tensor))

    def cut(self, samples: Samples, what: str, own: bool = False) -> Tensor:
        """Samples ``(lo, hi)`` cut from the pieces that hold them, concatenated; a
        ``RuntimeError`` naming ``what`` if some of them have not arrived. A cut of one
        piece is a view of it, which keeps the whole piece alive; ``own``: a copy where it
        is part of one piece."""
        lo, hi = samples
        parts, covered = [], lo
        for (a, b), tensor in self.pieces:
            if b <= covered or a >= hi:
                continue
            if a > covered:
                break
            parts.append((tensor[covered - a : min(b, hi) - a], tensor))
            covered = min(b, hi)
            if covered == hi:
                break
        if covered != hi:
            raise RuntimeError(f"{what} of samples {samples}: samples {covered}.. not received")
        if len(parts) > 1:
            return torch.cat([part for part, _ in parts])
        part, piece = parts[0]
        return part.clone() if own and part.shape[0] < piece.shape[0] else part

    def drop_through(self, sample: int) -> None:
        """Forget the pieces that end at or before ``sample`` (0-based, excluded)."""
        self.pieces = [(s, t) for s, t in self.pieces if s[1] > sample]

    def clear(self) -> None:
        """Forget every piece."""
        self.pieces.clear()


class HeldBytes:
    """What a stage holds for its backwards: the tensors autograd saved (saved-tensor hooks,
    the module's parameters and buffers as it is built left out, and kept alive, so that a
    buffer a forward replaces lends its address to no tensor counted:
    :meth:`~tidgap.profiling.measure.StorageBytes.of`) that are still alive and the tensors
    the stage keeps itself, each storage counted once; ``peak``: the most, in bytes, at any
    op's end since :meth:`reset` (the measured twin of the model's ``peak_memory``)."""

    def __init__(self, module: nn.Module) -> None:
        self._state = StorageBytes.of(module)
        self._saved: list[weakref.ref[Tensor]] = []
        self.peak = 0

    def _saved_now(self, saved: Tensor) -> None:
        if not self._state.leaves_out(saved):
            self._saved.append(weakref.ref(saved))

    def watching(self) -> AbstractContextManager[None]:
        """Record what autograd saves for the backward inside the block
        (:func:`~tidgap.profiling.measure.watching_saved`)."""
        return watching_saved(self._saved_now)

    def sample(self, kept: Iterable[Tensor]) -> None:
        """Count what is held now: the saved tensors still alive and ``kept``."""
        self._saved = [ref for ref in self._saved if ref() is not None]
        held = StorageBytes()
        held.add(*(t for t in (ref() for ref in self._saved) if t is not None), *kept)
        self.peak = max(self.peak, held.total())

    def reset(self) -> None:
        self._saved.clear()
        self.peak = 0


def input_leaf(x: Tensor) -> Tensor:
    """``x`` cut off the sender's graph; a leaf that records its gradient if it is
    floating-point (token ids carry none)."""
    x = x.detach()
    return x.requires_grad_() if x.is_floating_point() else x


class TorchStage:
    """:class:`~tidgap.runtime.handlers.StageCompute` for ``module`` (one stage's layers).

    ``first`` / ``last``: the stage's place (the first cuts its inputs from
    ``task.inputs``, the last computes the loss); ``recompute``: re-run forwards at
    backward time (needed when a backward boundary is not a forward boundary);
    ``input_spec`` / ``output_spec``: per-sample shape and dtype of the stage's input
    (``None`` on the first stage) and output (``None`` on the last).
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        first: bool,
        last: bool,
        task: Task,
        recompute: bool,
        input_spec: Spec | None,
        output_spec: Spec | None,
    ) -> None:
        if (input_spec is None) != first or (output_spec is None) != last:
            raise ValueError(
                "input_spec is None exactly on the first stage, output_spec on the last"
            )
        self.module, self.first, self.last, self.task = module, first, last, task
        self.recompute = recompute
        self._input_spec, self._output_spec = input_spec, output_spec
        self._inputs = Chunks()
        self._gradients = Chunks()
        #: Per forward chunk (not recompute): ``(samples, input leaf, output or loss)``.
        self._graphs: list[tuple[Samples, Tensor, Tensor]] = []
        #: Per forward chunk of a recompute stage in train mode: its random draws.
        self._draws = RecordedDraws()
        #: Why this recompute stage's random draws cannot be replayed (then its
        #: recomputed forwards draw anew); ``None`` while they can.
        self.redrawn: str | None = None
        #: While set (the checked iteration of ``tidgap run --check-gradients``, in train
        #: mode): every forward chunk's random draws, for the reference to replay.
        self.checked_draws: RecordedDraws | None = None
        self._loss: Tensor | None = None
        self.held = HeldBytes(module)
        #: Where the stage computes (its task's device).
        self.device = task.inputs.device

    @property
    def loss(self) -> Tensor | None:
        """On the last stage, the sum of the chunks' losses forwarded since :meth:`reset`
        (after a whole iteration, the full-batch mean loss; a detached scalar)."""
        return self._loss

    def reset(self) -> None:
        """Forget stored chunks, graphs and the loss between iterations."""
        self._inputs.clear()
        self._gradients.clear()
        self._graphs.clear()
        self._draws.clear()
        self._loss = None
        self.held.reset()

    def _kept(self) -> list[Tensor]:
        """The tensors the stage keeps itself: received pieces and stored chunks."""
        pieces = [t for _, t in self._inputs.pieces] + [t for _, t in self._gradients.pieces]
        graphs = [t for _, x, y in self._graphs for t in (x, y)]
        return pieces + graphs + self._draws.tensors()

    def input_spec(self, samples: Samples) -> tuple[tuple[int, ...], torch.dtype]:
        """Shape ``(hi - lo, ...)`` and dtype of an upstream chunk of ``samples``."""
        assert self._input_spec is not None, "the first stage receives no inputs"
        return batch_spec(self._input_spec, samples)

    def gradient_spec(self, samples: Samples) -> tuple[tuple[int, ...], torch.dtype]:
        """Shape ``(hi - lo, ...)`` and dtype of a downstream gradient chunk of ``samples``."""
        assert self._output_spec is not None, "the last stage receives no gradients"
        return batch_spec(self._output_spec, samples)

    def receive_input(self, samples: Samples, payload: Tensor) -> None:
        self._inputs.add(samples, payload)

    def receive_gradient(self, samples: Samples, payload: Tensor) -> None:
        self._gradients.add(samples, payload)

    def _stage_input(self, samples: Samples, own: bool = False) -> Tensor:
        if self.first:
            return self.task.inputs[samples[0] : samples[1]]
        return self._inputs.cut(samples, "forward", own)

    def _graph_input(self, samples: Samples, own: bool = False) -> Tensor:
        """The stage's input for a forward with grad: a leaf on every stage but the first;
        ``own``: not a view of part of a received chunk (a stored graph would keep the whole
        chunk alive until its backward)."""
        x = self._stage_input(samples, own)
        return x if self.first else input_leaf(x)

    def _output(self, samples: Samples, x: Tensor) -> Tensor:
        """The module's output on ``x``; on the last stage the chunk's loss instead
        (per-sample losses summed, divided by ``B``)."""
        y = self.module(x)
        if not self.last:
            return y
        targets = self.task.targets[samples[0] : samples[1]]
        return self.task.loss(y, targets).sum() / self.task.batch_size

    def forward(self, samples: Samples) -> Tensor | None:
        """Forward of ``samples``; the output chunk ``(hi - lo, ...)`` to send, ``None`` on
        the last stage."""
        drawing, recording = self._recording(), Recording()

        def drawn(compute: Callable[[], Tensor]) -> Tensor:
            return compute() if drawing is None else drawing.run(recording, compute, self.device)

        if self.recompute:
            with torch.no_grad():
                y = drawn(lambda: self._output(samples, self._stage_input(samples)))
        else:
            x = self._graph_input(samples, own=True)
            with self.held.watching():
                y = drawn(lambda: self._output(samples, x))
            self._graphs.append((samples, x, y))
            self._inputs.drop_through(samples[1])
        if drawing is not None:
            if self._replaying():
                self._draws.add(samples, recording.draws)
            if self.checked_draws is not None:
                self.checked_draws.add(samples, recording.draws)
        self.held.sample(self._kept())
        # the op's end is when its kernels end, on a GPU (its stream's: NCCL's receives
        # posted ahead wait on other streams)
        synchronize_stream(self.device)
        if self.last:
            self._loss = y.detach() if self._loss is None else self._loss + y.detach()
            return None
        return y.detach()

    def _replaying(self) -> bool:
        """Whether the recomputation replays the forwards' random draws: a recompute stage
        in train mode, while they can be replayed."""
        return self.recompute and self.module.training and self.redrawn is None

    def _recording(self) -> DrawingModules | None:
        """Where the stage draws (:func:`drawing_of` its module) when its forwards record
        their random draws: for the recomputation (:meth:`_replaying`) or for the gradient
        check (:attr:`checked_draws`, in train mode); else ``None``."""
        checked = self.checked_draws is not None and self.module.training
        return drawing_of(self.module) if self._replaying() or checked else None

    def _recomputed(self, samples: Samples, x: Tensor) -> Tensor:
        """The forward of ``samples`` on ``x`` again, with grad, its random draws replayed
        from the forward chunks' (:class:`Replay`); drawn anew where they cannot be, from
        then on, :attr:`redrawn` saying why."""
        if self._replaying():
            try:
                replay = Replay(self._draws.rows(samples))
                drawing = drawing_of(self.module)
                with drawing.under(replay), generators_unchanged(self.device):
                    y = self._output(samples, x)
                replay.check_done()
                return y
            except NotReplayable as error:
                self.redrawn = str(error)
                self._draws.clear()
        return self._output(samples, x)

    def whole_batch_draws(self) -> list[Draw]:
        """The random draws the forward chunks made while :attr:`checked_draws` was set, as
        one forward of the whole batch takes them (rows ``0..B``, each draw's chunks
        joined), and stop keeping them; :class:`NotReplayable` where they cannot be
        replayed per sample, or where the recomputed forwards drew anew (:attr:`redrawn`)."""
        record, self.checked_draws = self.checked_draws, None
        assert record is not None, "checked_draws was set before the checked iteration"
        if self.redrawn is not None:
            raise NotReplayable(self.redrawn)
        return record.rows((0, self.task.batch_size))

    def _covered(self, samples: Samples) -> list[tuple[Samples, Tensor, Tensor]]:
        """The stored forward chunks that make up backward ``samples``, removed from store."""
        lo, hi = samples
        taken = [g for g in self._graphs if lo <= g[0][0] and g[0][1] <= hi]
        if not taken or taken[0][0][0] != lo or taken[-1][0][1] != hi:
            raise RuntimeError(
                f"backward of samples {samples} is not made of stored forward chunks "
                "(its boundaries must be forward boundaries, or the stage must recompute)"
            )
        self._graphs = [g for g in self._graphs if not (lo <= g[0][0] and g[0][1] <= hi)]
        return taken

    def backward(self, samples: Samples) -> Tensor | None:
        """Backward of ``samples``, accumulating the parameters' gradients; the input
        gradient ``(hi - lo, ...)`` to send upstream, ``None`` on the first stage."""
        if self.recompute:
            x = self._graph_input(samples)
            with self.held.watching():
                chunks = [(samples, x, self._recomputed(samples, x))]
            self.held.sample([*self._kept(), x, chunks[0][2]])
            self._inputs.drop_through(samples[1])
            self._draws.drop_through(samples[1])
        else:
            chunks = self._covered(samples)
        outputs = [y for _, _, y in chunks]
        gradients = None
        if not self.last:
            gradients = [self._gradients.cut(s, "backward") for s, _, _ in chunks]
        # Outputs that need no gradient (a first stage with nothing to train) have none to
        # compute: their backward is empty.
        wanted = [i for i, y in enumerate(outputs) if y.requires_grad]
        if wanted:
            torch.autograd.backward(
                [outputs[i] for i in wanted],
                None if gradients is None else [gradients[i] for i in wanted],
            )
        if gradients is not None:
            self._gradients.drop_through(samples[1])
        synchronize_stream(self.device)
        if self.first:
            return None
        leaves = [x.grad if x.grad is not None else torch.zeros_like(x) for _, x, _ in chunks]
        return leaves[0] if len(leaves) == 1 else torch.cat(leaves)


def stage_of(
    stages: list[nn.Module], rank: int, task: Task, recompute: bool, specs: list[Spec]
) -> TorchStage:
    """The :class:`TorchStage` of ``stages[rank]``, its place and boundary specs taken
    from its position (``specs`` from :func:`boundary_specs`)."""
    last = rank == len(stages) - 1
    return TorchStage(
        stages[rank],
        first=rank == 0,
        last=last,
        task=task,
        recompute=recompute,
        input_spec=None if rank == 0 else specs[rank - 1],
        output_spec=None if last else specs[rank],
    )
