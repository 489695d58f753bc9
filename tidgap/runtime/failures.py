"""Where a run failed, in one line: the stage, the instruction and, for a layer's own
error, the layer.

:func:`~tidgap.runtime.executor.execute` raises :class:`InstructionFailed` from what a
handler raised; the worker raises :class:`RunFailed` with :func:`failure_line`, which it
prints as its last line, which ``tidgap run`` and ``tidgap calibrate`` quote.
"""

from __future__ import annotations

from typing import Any

from tidgap.model.errors import first_line
from tidgap.runtime.lowering import Instruction


class InstructionFailed(Exception):
    """A handler raised while running ``step`` (the error is ``__cause__``)."""

    def __init__(self, step: Instruction) -> None:
        lo, hi = step.samples
        super().__init__(f"{step.kind} of samples {lo}..{hi - 1}")
        self.step = step


class ProbeFailed(Exception):
    """Stage ``stage`` raised on ``samples`` samples while its output's shape was probed
    (the error is ``__cause__``)."""

    def __init__(self, stage: int, samples: int = 1) -> None:
        some = "one sample" if samples == 1 else f"{samples} samples"
        super().__init__(f"forward of {some} (probing its output's shape)")
        self.stage = stage


class RunFailed(RuntimeError):
    """A rank's run failed; the message is :func:`failure_line`'s."""


class StageNotReplayed(Exception):
    """The reference could not replay stage ``stage``'s saved random draws (the
    :class:`~tidgap.runtime.draws.NotReplayable` is ``__cause__``)."""

    def __init__(self, stage: int) -> None:
        super().__init__(f"stage {stage}'s random draws do not replay")
        self.stage = stage


def handler_error(error: BaseException) -> BaseException:
    """What the handler raised where ``error`` is :class:`InstructionFailed`, else
    ``error``."""
    if isinstance(error, InstructionFailed):
        return error.__cause__ or error
    return error


def failing_layer(error: BaseException, module: Any, names: list[str]) -> str | None:
    """``layer 'NAME' (Type)``: the top-level layer of ``module`` (the stage's
    ``nn.Sequential``; its children are named ``names``) whose code is on ``error``'s
    traceback, the outermost such; ``None`` where none is (an error raised inside
    autograd's engine or the transport)."""
    children = list(module)  # a layer placed twice too (``children()`` lists it once)
    index = {id(child): i for i, child in enumerate(children)}
    frame = error.__traceback__
    while frame is not None:
        i = index.get(id(frame.tb_frame.f_locals.get("self")))
        if i is not None:
            return f"layer {names[i]!r} ({type(children[i]).__name__})"
        frame = frame.tb_next
    return None


def located_line(where: str, cause: BaseException, module: Any, names: list[str]) -> str:
    """``WHERE in layer '2' (Fuse): RuntimeError: ...``: ``cause`` in one line, after
    ``where`` and the layer of ``module`` (children named ``names``) it was raised in."""
    layer = failing_layer(cause, module, names)
    return f"{where}" + (f" in {layer}" if layer else "") + f": {first_line(cause)}"


def probe_failure_line(failed: ProbeFailed, stages: list[tuple[str, list[str], Any]]) -> str:
    """``stage 1 forward of one sample (...) in layer '2' (Fuse): RuntimeError: ...``:
    ``failed`` in one line; ``stages`` as :func:`~tidgap.profiling.run.stage_modules` gives
    them (name, layer names, module)."""
    _, names, module = stages[failed.stage]
    return located_line(f"stage {failed.stage} {failed}", failed.__cause__, module, names)


#: What a failure of ``torch.utils.checkpoint``'s own re-run adds: it re-runs a forward
#: outside tidgap's record and replay of the stage's random draws.
CHECKPOINT_HINT = (
    " (torch.utils.checkpoint re-ran the forward outside tidgap's replay of its random "
    "draws: take the checkpoint out of the model; tidgap recomputes where a plan asks)"
)


def failure_line(failed: InstructionFailed, stage: int, module: Any, names: list[str]) -> str:
    """``stage 1 forward of samples 2..7 in layer '2' (Fuse): RuntimeError: ...``: where
    ``failed`` happened on ``stage`` and its cause in one line (with what to do where a
    checkpoint's re-run failed: :data:`CHECKPOINT_HINT`)."""
    cause = handler_error(failed)
    hint = CHECKPOINT_HINT if type(cause).__name__ == "CheckpointError" else ""
    return located_line(f"stage {stage} {failed}", cause, module, names) + hint
