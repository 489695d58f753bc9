"""Tiny PyTorch models for the profiling tests, importable as ``tests.support.tiny_models:NAME``.

Importing this module needs PyTorch; the tests import it only after ``importorskip``.
"""

from __future__ import annotations

import torch
from torch import nn

torch.manual_seed(0)

#: Six layers on ``(b, 16)`` float inputs; the boundaries carry 32, 32, 32, 16, 16 floats.
MLP = nn.Sequential(
    nn.Linear(16, 32),
    nn.ReLU(),
    nn.Linear(32, 32),
    nn.Linear(32, 16),
    nn.ReLU(),
    nn.Linear(16, 4),
)

#: The MLP's shape with one ReLU placed twice (layers 1 and 4).
_RELU = nn.ReLU()
REUSED = nn.Sequential(
    nn.Linear(16, 32), _RELU, nn.Linear(32, 32), nn.Linear(32, 16), _RELU, nn.Linear(16, 4)
)
#: In-place activations, as torchvision writes them (one behind an ``Identity``): profiled
#: alone (or beginning a stage), each would write the leaf its input is.
IN_PLACE = nn.Sequential(
    nn.Linear(16, 16),
    nn.ReLU(inplace=True),
    nn.Linear(16, 16),
    nn.Sequential(nn.Identity(), nn.ReLU(inplace=True), nn.Dropout(0.0, inplace=True)),
    nn.Linear(16, 4),
)
#: One Linear placed twice (layers 0 and 2): its weights tied.
_SQUARE = nn.Linear(16, 16)
TIED = nn.Sequential(_SQUARE, nn.ReLU(), _SQUARE, nn.Linear(16, 4))

#: Not a Sequential: ``tidgap profile`` must refuse it.
NOT_SEQUENTIAL = nn.Linear(4, 4)

#: A Sequential whose output is not batched along dimension 0.
UNBATCHED = nn.Sequential(nn.Linear(16, 8), nn.Flatten(0))

#: A Sequential whose second layer does not take the first one's output.
MISMATCHED = nn.Sequential(nn.Linear(16, 8), nn.Linear(4, 2))


class Refusing(nn.Module):
    """A layer that raises its own (non-PyTorch) error on every input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("this layer takes no input\nsecond line")


#: A Sequential whose second layer raises a ValueError.
RAISING = nn.Sequential(nn.Linear(16, 8), Refusing())


class Chatty(nn.Module):
    """A layer that prints on every forward, as debugging code does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print("forward of", tuple(x.shape))
        return x


#: The MLP with a printing layer in the middle.
CHATTY = nn.Sequential(nn.Linear(16, 8), Chatty(), nn.Linear(8, 4))


class RefusesSavedTensorHooks(nn.Module):
    """The identity, but it raises while a saved-tensors hook is active, as the forwards
    that measure what a stage holds run it (a custom kernel might refuse them)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch._C._autograd._top_saved_tensors_default_hooks(False) is not None:
            raise ValueError("saved-tensors hooks are not supported")
        return x * 2


#: Layer 1 times well and fails in the memory forwards.
REFUSES_HOOKS = nn.Sequential(nn.Linear(16, 16), RefusesSavedTensorHooks(), nn.Linear(16, 4))
