"""A :class:`~tidgap.runtime.handlers.Transport` on torch.distributed point-to-point.

Sends are ``dist.isend`` of the payload (detached, contiguous), kept (request and tensor)
until :meth:`DistTransport.wait`. Receives land in a tensor allocated from the compute's
spec ``(shape, dtype)``; given the rank's receives in order (:meth:`DistTransport.expect`),
each peer's next one is posted (``dist.irecv``) as soon as the one before it from that
peer has arrived, so a chunk travels while the rank computes instead of when it asks for
it (on a loaded 2-core machine gloo moved a GPipe(8) chunk only after its receive was
posted, up to 3 ms later); any other receive is a blocking ``dist.recv``. Messages between
two ranks keep their order (one tag), so receives need no tags
(:mod:`tidgap.runtime.lowering`).
Tested on gloo (CPU) only; nothing device-specific is assumed beyond the spec's tensor.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence

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
        #: Per peer: the specs of its receives not yet posted, in order.
        self._expected: dict[int, deque[Spec]] = {}
        #: Per peer: its posted receive (request and tensor), at most one.
        self._posted: dict[int, tuple[dist.Work, Tensor]] = {}

    def expect(self, receives: Sequence[tuple[Spec, int]]) -> None:
        """This rank's receives in order, ``(spec, peer)``; posts each peer's first."""
        self._expected = defaultdict(deque)
        for spec, peer in receives:
            self._expected[peer].append(spec)
        for peer in self._expected:
            self._post(peer)

    def _post(self, peer: int) -> None:
        """Post the next expected receive from ``peer``, if any."""
        if self._expected.get(peer):
            shape, dtype = self._expected[peer].popleft()
            tensor = torch.empty(shape, dtype=dtype, device=self.device)
            self._posted[peer] = (dist.irecv(tensor, peer), tensor)

    def send(self, payload: Tensor, peer: int) -> None:
        """Start sending ``payload`` (detached, made contiguous) to rank ``peer``."""
        tensor = payload.detach().contiguous()
        self._pending = [(work, kept) for work, kept in self._pending if not work.is_completed()]
        self._pending.append((dist.isend(tensor, peer), tensor))

    def recv(self, spec: Spec, peer: int) -> Tensor:
        """The next chunk from rank ``peer``: a new tensor of ``spec``'s shape and dtype
        (the posted receive's, which must be ``spec``'s: receives run as expected)."""
        shape, dtype = spec
        if peer not in self._posted:
            tensor = torch.empty(shape, dtype=dtype, device=self.device)
            dist.recv(tensor, peer)
            return tensor
        work, tensor = self._posted.pop(peer)
        if tuple(tensor.shape) != tuple(shape) or tensor.dtype != dtype:
            raise RuntimeError(
                f"receive from rank {peer} of {tuple(shape)} {dtype} where "
                f"{tuple(tensor.shape)} {tensor.dtype} was expected"
            )
        work.wait()
        self._post(peer)
        return tensor

    def wait(self) -> None:
        """Block until every started send has completed, then drop them."""
        for work, _ in self._pending:
            work.wait()
        self._pending.clear()
