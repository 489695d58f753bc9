"""A :class:`~tidgap.runtime.handlers.Transport` on torch.distributed point-to-point.

Sends are ``dist.isend`` of the payload (detached, contiguous), kept (request and tensor)
until :meth:`DistTransport.wait`; receives are a blocking ``dist.recv`` into a
tensor allocated from the compute's spec ``(shape, dtype)``. Messages between two ranks
keep their order (one tag), so receives need no tags (:mod:`tidgap.runtime.lowering`).
Tested on gloo (CPU) only; nothing device-specific is assumed beyond the spec's tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch import distributed as dist

#: ``(shape, dtype)`` of a chunk to receive, shape with the samples first.
Spec = tuple[tuple[int, ...], torch.dtype]


class DistTransport:
    """Rank-local point-to-point over the default process group; receives land on
    ``device``."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device or torch.device("cpu")
        self._pending: list[tuple[dist.Work, Tensor]] = []

    def send(self, payload: Tensor, peer: int) -> None:
        """Start sending ``payload`` (detached, made contiguous) to rank ``peer``."""
        tensor = payload.detach().contiguous()
        self._pending = [(work, kept) for work, kept in self._pending if not work.is_completed()]
        self._pending.append((dist.isend(tensor, peer), tensor))

    def recv(self, spec: Spec, peer: int) -> Tensor:
        """The next chunk from rank ``peer``: a new tensor of ``spec``'s shape and dtype."""
        shape, dtype = spec
        tensor = torch.empty(shape, dtype=dtype, device=self.device)
        dist.recv(tensor, peer)
        return tensor

    def wait(self) -> None:
        """Block until every started send has completed, then drop them."""
        for work, _ in self._pending:
            work.wait()
        self._pending.clear()
