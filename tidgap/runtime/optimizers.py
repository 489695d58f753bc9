"""The optimizer step a stage runs as its tail (model.md: a stage's ``tail``), by name.

One place for ``tidgap run`` (each rank steps its own stage's parameters after its last
backward) and ``tidgap profile --optimizer`` (which times that step into the stage's
``tail``): the same optimizer, built the same way, stepped the same way. PyTorch is
imported only when an optimizer is built.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor
    from torch.optim import Optimizer

#: Optimizer names (``--optimizer``), with the ``torch.optim`` class each builds.
OPTIMIZERS = {"sgd": "SGD", "adam": "Adam"}
#: The learning rate when ``--lr`` is not given (PyTorch's default for both).
DEFAULT_LR = 1e-3
#: The largest learning rate taken: far above any that trains; PyTorch's optimizers fail
#: on one past float32's range (about 3.4e38).
MAX_LR = 1e6


def describe(name: str, lr: float) -> str:
    """``torch.optim.Adam(lr=0.001)``: what the tail runs, for text and ``source``."""
    return f"torch.optim.{OPTIMIZERS[name]}(lr={lr:g})"


def build_optimizer(name: str, parameters: Iterable[Tensor], lr: float) -> Optimizer | None:
    """``torch.optim.SGD`` or ``Adam`` (``name`` a key of :data:`OPTIMIZERS`) over those of
    ``parameters`` that need gradients, learning rate ``lr``, the other settings PyTorch's
    defaults; ``None`` when none needs one (a stage without weights: nothing to step)."""
    from torch import optim

    trainable = [p for p in parameters if p.requires_grad]
    return getattr(optim, OPTIMIZERS[name])(trainable, lr=lr) if trainable else None


def step(optimizer: Optimizer | None) -> None:
    """The tail: ``optimizer.step()`` then ``zero_grad(set_to_none=True)`` (nothing for
    ``None``, a stage without weights)."""
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
