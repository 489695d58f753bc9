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

import torch
from torch import Tensor, nn

from tidgap.runtime.optimizers import build_optimizer, step
from tidgap.runtime.task import Task


def _trainable(layers: nn.Sequential, names: list[str] | None = None) -> dict[str, nn.Parameter]:
    """The parameters that need gradients, by name; only those of the top-level layers
    ``names`` when given."""
    keep = None if names is None else set(names)
    return {
        key: p
        for key, p in layers.named_parameters()
        if p.requires_grad and (keep is None or key.split(".", 1)[0] in keep)
    }


def reference_gradients(layers: nn.Sequential, task: Task) -> dict[str, Tensor]:
    """Every trainable parameter's gradient of the full-batch mean loss (one forward and
    backward of all ``B`` samples), without touching the parameters' ``.grad``."""
    parameters = _trainable(layers)
    loss = task.batch_loss(layers(task.inputs))
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
        for key, p in _trainable(layers, names).items()
    }


def stage_parameters(layers: nn.Sequential, names: list[str]) -> dict[str, Tensor]:
    """The trainable parameters of the top-level layers ``names`` (one stage's)."""
    return {key: p.detach().to("cpu", copy=True) for key, p in _trainable(layers, names).items()}


def reference_step(
    layers: nn.Sequential, gradients: dict[str, Tensor], optimizer: str, lr: float
) -> dict[str, Tensor]:
    """Every trainable parameter after one :func:`~tidgap.runtime.optimizers.step` of
    ``optimizer`` (learning rate ``lr``) over the whole model from ``gradients`` (by
    name, as :func:`reference_gradients` or the ranks' ``stage_gradients`` give them);
    ``layers`` is stepped in place."""
    parameters = _trainable(layers)
    for key, p in parameters.items():
        p.grad = gradients[key].to(p.device, p.dtype, copy=True)
    step(build_optimizer(optimizer, parameters.values(), lr))
    return {key: p.detach().to("cpu", copy=True) for key, p in parameters.items()}


def max_relative_difference(got: dict[str, Tensor], want: dict[str, Tensor]) -> float:
    """The largest over tensors of ``max|got - want| / max(max|want|, tiny)`` (``tiny``: the
    smallest normal number of ``want``'s dtype); 0 for empty tensors. A ``KeyError`` if
    the keys differ, a ``ValueError`` if shapes do."""
    missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
    if missing or extra:
        raise KeyError(f"gradients differ in keys: missing {missing}, unexpected {extra}")
    worst = 0.0
    for key, expected in want.items():
        actual = got[key]
        if actual.shape != expected.shape:
            raise ValueError(
                f"{key}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
            )
        if expected.numel() == 0:
            continue
        a, b = actual.detach().cpu().double(), expected.detach().cpu().double()
        scale = max(b.abs().max().item(), torch.finfo(expected.dtype).tiny)
        worst = max(worst, (a - b).abs().max().item() / scale)
    return worst
