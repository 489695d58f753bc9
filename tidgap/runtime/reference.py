"""The gradients (and weights after an optimizer step) a pipelined iteration must
reproduce, and how far it is from them.

:func:`reference_gradients` runs the whole batch through the whole model in one process;
:func:`stage_gradients` reads what one stage's layers accumulated. :func:`reference_step`
steps the whole model once from given gradients; :func:`stage_parameters` reads one
stage's parameters (after its own step). All key a parameter by its name in the whole
model's ``named_parameters()`` (``"block0.qkv.weight"``) and return CPU copies, so
per-rank results can be saved, merged and compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor, nn

from tidgap.runtime.drawing import drawing_of, generators_unchanged
from tidgap.runtime.draws import Draw, NotReplayable, Replay
from tidgap.runtime.failures import StageNotReplayed
from tidgap.runtime.optimizers import build_optimizer, step
from tidgap.runtime.task import Task

#: A forward of the whole model: ``(B, ...)`` inputs -> ``(B, ...)`` outputs.
Forward = Callable[[Tensor], Tensor]


def trainable(layers: nn.Sequential, names: list[str] | None = None) -> dict[str, nn.Parameter]:
    """The parameters that need gradients, by name; only those of the top-level layers
    ``names`` when given."""
    keep = None if names is None else set(names)
    return {
        key: p
        for key, p in layers.named_parameters()
        if p.requires_grad and (keep is None or key.split(".", 1)[0] in keep)
    }


def batch_normalising(
    layers: nn.Module, prefix: str = "", untracked: bool = False
) -> tuple[str, nn.Module] | None:
    """``(name (kind), module)`` of the first module of ``layers`` that normalises by its
    batch's statistics in train mode (a ``BatchNorm``; ``untracked``: one that keeps no
    running statistics, so in eval mode too), its name within ``layers`` after ``prefix``
    (``"1"``, ``"1.norm"``); ``None`` if there is none."""
    for name, module in layers.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            if untracked and module.running_mean is not None:
                continue
            dotted = ".".join(part for part in (prefix, name) if part)
            return f"{dotted} ({type(module).__name__})", module
    return None


def batch_normalising_layers(named_layers: list[tuple[str, nn.Module]]) -> list[str]:
    """``name (kind)`` (:func:`batch_normalising`) of the first module normalising by its
    batch's statistics in each of the model's ``(name, layer)`` ``named_layers`` holding one."""
    return [hit[0] for name, layer in named_layers if (hit := batch_normalising(layer, name))]


def batch_statistics(layers: nn.Module) -> str | None:
    """Why a pipelined iteration in train mode computes another function than one forward
    of the whole batch: a layer that normalises by its batch's statistics (each
    microbatch by its own), as a sentence; ``None`` if there is none. One that keeps no
    running statistics, which does so in eval mode too, is named first, and the sentence
    says that the check cannot agree."""
    untracked = batch_normalising(layers, untracked=True)
    found = untracked or batch_normalising(layers)
    if found is None:
        return None
    sentence = f"layer {found[0]} normalises each microbatch by its own statistics in train mode"
    if untracked is not None:  # track_running_stats=False: batch statistics in eval mode too
        sentence += (
            ", and in eval mode too (it keeps no running statistics), so no forward of the "
            "whole batch computes what the pipeline does"
        )
    return sentence


def replayed_forward(stages: list[nn.Module], draws: list[list[Draw]]) -> Forward:
    """The whole model's forward as ``stages`` in turn, each random operator of stage
    ``s`` given the values ``draws[s]`` holds (the pipelined iteration's, for the whole
    batch: :meth:`~tidgap.runtime.stage.TorchStage.whole_batch_draws`) instead of drawing;
    :class:`~tidgap.runtime.failures.StageNotReplayed` (from the
    :class:`~tidgap.runtime.draws.NotReplayable`) if a stage runs other random operators."""

    def forward(x: Tensor) -> Tensor:
        for s, (module, drawn) in enumerate(zip(stages, draws, strict=True)):
            replay = Replay(drawn)
            try:
                with generators_unchanged(x.device):
                    x = drawing_of(module).run(replay, partial(module, x), x.device)
                replay.check_done()
            except NotReplayable as error:
                raise StageNotReplayed(s) from error
        return x

    return forward


def reference_gradients(
    layers: nn.Sequential, task: Task, forward: Forward | None = None
) -> dict[str, Tensor]:
    """Every trainable parameter's gradient of the full-batch mean loss (one forward,
    ``layers`` or ``forward`` (of the same layers), and one backward of all ``B``
    samples), without touching the parameters' ``.grad``."""
    parameters = trainable(layers)
    loss = task.batch_loss((layers if forward is None else forward)(task.inputs))
    gradients = torch.autograd.grad(loss, list(parameters.values()), allow_unused=True)
    return {
        key: (torch.zeros_like(p) if g is None else g).detach().cpu()
        for (key, p), g in zip(parameters.items(), gradients, strict=True)
    }


def stage_gradients(layers: nn.Sequential, names: list[str]) -> dict[str, Tensor]:
    """The ``.grad`` of the trainable parameters of the top-level layers ``names`` (one
    stage's), zeros where none accumulated."""
    return {
        key: (torch.zeros_like(p) if p.grad is None else p.grad).detach().to("cpu", copy=True)
        for key, p in trainable(layers, names).items()
    }


def stage_parameters(layers: nn.Sequential, names: list[str]) -> dict[str, Tensor]:
    """The trainable parameters of the top-level layers ``names`` (one stage's)."""
    return {key: p.detach().to("cpu", copy=True) for key, p in trainable(layers, names).items()}


def reference_step(
    layers: nn.Sequential, gradients: dict[str, Tensor], optimizer: str, lr: float
) -> dict[str, Tensor]:
    """Every trainable parameter after one :func:`~tidgap.runtime.optimizers.step` of
    ``optimizer`` (learning rate ``lr``) over the whole model from ``gradients`` (by
    name, as :func:`reference_gradients` or the ranks' ``stage_gradients`` give them);
    ``layers`` is stepped in place."""
    parameters = trainable(layers)
    for key, p in parameters.items():
        p.grad = gradients[key].to(p.device, p.dtype, copy=True)
    step(build_optimizer(optimizer, parameters.values(), lr))
    return {key: p.detach().to("cpu", copy=True) for key, p in parameters.items()}


#: A tensor's differences are relative to at least this share of the largest value of any
#: tensor (:func:`max_relative_difference`): a gradient that is zero but for rounding (a
#: bias a normalisation cancels) is not compared with its own noise.
NOISE_FLOOR = 1e-3


def max_relative_difference(got: dict[str, Tensor], want: dict[str, Tensor]) -> float:
    """The largest over tensors of ``max|got - want| / max(max|want|, NOISE_FLOOR * W,
    tiny)`` (``W``: the largest ``|want|`` of any tensor; ``tiny``: the smallest normal
    number of ``want``'s dtype); 0 for empty tensors, infinity where either holds a value
    that is not finite (NaN gradients match nothing). A ``KeyError`` if the keys differ, a
    ``ValueError`` if shapes do."""
    missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
    if missing or extra:
        raise KeyError(f"gradients differ in keys: missing {missing}, unexpected {extra}")
    pairs: list[tuple[float, float, torch.dtype]] = []  # (max difference, max |want|, dtype)
    for key, expected in want.items():
        actual = got[key]
        if actual.shape != expected.shape:
            raise ValueError(
                f"{key}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
            )
        if expected.numel() == 0:
            continue
        a, b = actual.detach().cpu().double(), expected.detach().cpu().double()
        if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
            return math.inf
        pairs.append(((a - b).abs().max().item(), b.abs().max().item(), expected.dtype))
    largest = max((size for _, size, _ in pairs), default=0.0)
    return max(
        (
            difference / max(size, NOISE_FLOOR * largest, torch.finfo(dtype).tiny)
            for difference, size, dtype in pairs
        ),
        default=0.0,
    )
