"""Tiny models for the ``tidgap run`` tests, importable as ``tests.runtime.pipeline_models:NAME``
(workers import them again in their own processes).

With ``TIDGAP_TEST_RANK1`` set to ``raise`` (``hang``) in the environment the workers
inherit, importing this module on worker rank 1 raises (sleeps past any test timeout);
with ``blow``, :data:`FUSED` raises in rank 1's first forward, after the process group is
up, with ``probe`` already while rank 1 probes the stages' output shapes; with ``stall``
it sleeps in that forward. ``RANK`` is set
in workers only, so the test process imports it normally.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn

#: What rank 1 does when it imports this module: ``raise`` or ``hang`` (set by the tests
#: through the environment the workers inherit).
BEHAVIOUR = os.environ.get("TIDGAP_TEST_RANK1", "") if os.environ.get("RANK") == "1" else ""
if BEHAVIOUR == "raise":
    raise RuntimeError("pipeline_models refuses to load on rank 1")
if BEHAVIOUR == "hang":
    time.sleep(600)


class Fuse(nn.Module):
    """The identity, except on worker rank 1 with ``TIDGAP_TEST_RANK1=blow``, where a
    forward of more than one sample (a real chunk, not the one-sample probe) raises (with
    ``stall``, sleeps past any test timeout), and with ``probe``, any forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if BEHAVIOUR == "stall" and x.shape[0] > 1:
            time.sleep(600)
        if BEHAVIOUR == "probe" or (BEHAVIOUR == "blow" and x.shape[0] > 1):
            raise RuntimeError("Fuse blew on rank 1")
        return x


#: Five layers on ``(b, 6)`` float inputs; a split at 2 sends 12 floats per sample.
MLP = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 3))
#: The MLP in float64: a worker casts it to the run's dtype.
DOUBLE = nn.Sequential(
    nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 3)
).double()
#: The MLP's first layers with a :class:`Fuse` on stage 1 (split at 2).
FUSED = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), Fuse(), nn.Linear(12, 3))


class Centre(nn.Module):
    """Subtracts the mean over the samples it is given: a pipelined run (each microbatch's
    own mean) and one process (the whole batch's) compute different functions."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=0, keepdim=True)


#: The MLP's first layers with :class:`Centre` on stage 1: its gradient check must fail.
COUPLED = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), Centre(), nn.Linear(12, 3))


class FeatureNoise(nn.Module):
    """In train mode, adds noise drawn per feature and shared by the samples: a
    recomputing stage cannot replay it per sample."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(x.shape[1]) if self.training else x


#: Split at 3: dropout on stage 0 (replayed per sample when it recomputes), feature noise
#: on stage 1 (drawn anew).
DRAWING = nn.Sequential(
    nn.Linear(6, 12), nn.Dropout(0.5), nn.Tanh(), nn.Linear(12, 8), FeatureNoise(), nn.Linear(8, 3)
)
#: Split at 3: dropout on both stages, replayed per sample (a gradient check in train mode).
DROPOUT = nn.Sequential(
    nn.Linear(6, 12), nn.Dropout(0.5), nn.Tanh(), nn.Linear(12, 8), nn.Dropout(0.3), nn.Linear(8, 3)
)
#: Split at 2: batch norm on stage 0 (a gradient check in eval mode).
BATCH_NORM = nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.Tanh(), nn.Linear(12, 3))
#: Batch statistics in eval mode too: fails on one sample, runs on the unit of 2 (the split
#: at layer 2 puts it first in stage 1).
UNTRACKED_NORM = nn.Sequential(
    nn.Linear(6, 12), nn.Tanh(), nn.BatchNorm1d(12, track_running_stats=False), nn.Linear(12, 3)
)
#: Split at 2: a frozen first stage (a pretrained layer), nothing to train before stage 1.
FROZEN_FIRST = nn.Sequential(
    nn.Linear(6, 12).requires_grad_(False), nn.Tanh(), nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 3)
)
#: Split at 2: stage 1 begins with an in-place ReLU on a view of the leaf it receives.
#: In place at both stages' start (split at 3), where applying it twice changes the result:
#: stage 0 writes the model's input, stage 1 a view of what it receives.
LEAKY_IN_PLACE = nn.Sequential(
    nn.LeakyReLU(0.1, inplace=True),
    nn.Linear(6, 12),
    nn.Linear(12, 12),
    nn.Unflatten(1, (3, 4)),
    nn.LeakyReLU(0.1, inplace=True),
    nn.Flatten(),
    nn.Linear(12, 3),
)
IN_PLACE = nn.Sequential(
    nn.Linear(6, 12),
    nn.Linear(12, 12),
    nn.Unflatten(1, (3, 4)),
    nn.ReLU(inplace=True),
    nn.Flatten(),
    nn.Linear(12, 3),
)
#: One Linear placed twice, on stage 0 and (split at 2) stage 1: tied weights across stages.
_SQUARE = nn.Linear(6, 6)
TIED = nn.Sequential(_SQUARE, nn.Tanh(), _SQUARE, nn.Linear(6, 3))


class MeanOverPositions(nn.Module):
    """``(b, positions, features)`` to ``(b, features)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)


class ReentrantCheckpoint(nn.Module):
    """A Linear and Tanh under ``torch.utils.checkpoint`` with ``use_reentrant=True``, which
    ``torch.autograd.grad`` (the gradient check's reference) refuses."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(12, 12), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.inner, x, use_reentrant=True)


#: The MLP with a reentrant checkpoint on stage 1 (split at 2).
REENTRANT = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), ReentrantCheckpoint(), nn.Linear(12, 3))


class CheckpointedDropout(nn.Module):
    """A Linear and ``nn.Dropout`` under a non-reentrant ``torch.utils.checkpoint``, whose
    own re-run of the forward draws outside tidgap's replay of the stage's draws."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(12, 12), nn.Dropout(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.inner, x, use_reentrant=False)


#: The MLP with a checkpointed dropout on stage 1 (split at 2), in train mode.
CHECKPOINTED = nn.Sequential(
    nn.Linear(6, 12), nn.Tanh(), CheckpointedDropout(), nn.Linear(12, 3)
).train()
