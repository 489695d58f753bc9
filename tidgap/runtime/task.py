"""What a run trains on: the whole batch's inputs and targets and a per-sample loss.

The data are random and deterministic from a seed (drawn on the CPU, then moved to the
device), so every rank of a run, and the single-process reference, build the same batch.
The batch loss is the mean over the batch of the per-sample loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional

from tidgap.profiling.models import Model

#: ``(outputs (n, ...), targets (n, ...)) -> (n,)``: the loss of each sample.
Loss = Callable[[Tensor, Tensor], Tensor]


@dataclass
class Task:
    """``inputs``: ``(B, ...)``, the first stage's input for the whole batch; ``targets``:
    ``(B, ...)``; ``loss``: the per-sample loss (:data:`Loss`)."""

    inputs: Tensor
    targets: Tensor
    loss: Loss

    @property
    def batch_size(self) -> int:
        """``B``, the samples in the batch."""
        return self.inputs.shape[0]

    def batch_loss(self, outputs: Tensor) -> Tensor:
        """The full-batch loss of the last stage's ``outputs`` ``(B, ...)``: the mean of the
        per-sample loss (a scalar)."""
        return self.loss(outputs, self.targets).mean()


def token_cross_entropy(outputs: Tensor, targets: Tensor) -> Tensor:
    """Logits ``(n, L, V)``, token ids ``(n, L)`` -> ``(n,)``: cross-entropy averaged over
    the ``L`` positions of each sample."""
    n, length, vocab = outputs.shape
    flat = functional.cross_entropy(
        outputs.reshape(n * length, vocab), targets.reshape(n * length), reduction="none"
    )
    return flat.view(n, length).mean(dim=1)


def class_cross_entropy(outputs: Tensor, targets: Tensor) -> Tensor:
    """Logits ``(n, C)``, labels ``(n,)`` -> ``(n,)``: each sample's cross-entropy."""
    return functional.cross_entropy(outputs, targets, reduction="none")


def mean_square(outputs: Tensor, targets: Tensor) -> Tensor:
    """Outputs ``(n, ...)`` -> ``(n,)``: the mean of the squares of each sample's output
    (``targets``, ``(n, 0)``, are not used)."""
    return outputs.reshape(outputs.shape[0], -1).square().mean(dim=1)


def make_task(
    model: Model, batch_size: int, seed: int, device: torch.device, dtype: torch.dtype
) -> Task:
    """The batch of ``batch_size`` samples a run of ``model`` trains on, from ``seed``.

    ``gpt``: random token ids ``(B, seq_len)`` in, random next tokens as targets, the
    loss is each sample's cross-entropy averaged over positions. ``vgg16``: random images
    ``(B, 3, H, H)`` in ``dtype``, random labels, each sample's cross-entropy. Any other
    model (``module:attribute``): random inputs ``(B, *input_shape)`` (floats in ``dtype``,
    or token ids below ``vocab`` when the model has one), no targets (``(B, 0)``), and the
    loss is the mean of the squares of each sample's output.
    """
    generator = torch.Generator().manual_seed(seed)
    config = model.config

    def floats(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)

    def integers(high: int, *shape: int) -> Tensor:
        return torch.randint(0, high, shape, generator=generator)

    loss: Loss
    if model.name == "gpt":
        shape = (batch_size, config["seq_len"])
        inputs, targets = integers(config["vocab"], *shape), integers(config["vocab"], *shape)
        loss = token_cross_entropy
    elif model.name == "vgg16":
        size = config["image_size"]
        inputs = floats(batch_size, 3, size, size)
        targets, loss = integers(config["classes"], batch_size), class_cross_entropy
    else:
        shape = (batch_size, *config["input_shape"])
        vocab = config.get("vocab")
        inputs = floats(*shape) if vocab is None else integers(vocab, *shape)
        targets, loss = torch.empty(batch_size, 0), mean_square
    return Task(inputs.to(device), targets.to(device), loss)
