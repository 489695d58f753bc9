"""A :class:`~tidgap.runtime.handlers.Transport` on torch.distributed point-to-point.

Sends are ``dist.isend`` of the payload (detached, contiguous), kept (request and tensor)
until :meth:`DistTransport.wait`. Receives land in a tensor allocated from the compute's
spec ``(shape, dtype)``. Given the rank's receives in order (:meth:`DistTransport.expect`,
before an iteration's barrier: posting them takes 0.2-5 ms on the 2-core development
machine), every one is posted at once (``dist.irecv``), so each chunk
travels as soon as it is sent, as the model has it, instead of when the rank asks for it:
on the 2-core development machine gloo moved a chunk only once its receive was posted, up
to 10 ms after the send when the rank was computing (and keeping just the next receive
posted did not help a stage that takes several chunks for one forward). The cost: buffers
for every chunk of the iteration the rank receives (its boundary inputs and gradients,
small beside the activations a stage keeps). Messages between two ranks keep their order
(one tag), and receives from a peer are matched in the order they were posted, so they
need no tags
(:mod:`tidgap.runtime.lowering`).
Tensors travel in host memory (:data:`WIRE`, for gloo, which sends and receives host
tensors only): a stage computing on a GPU copies each payload to host memory to send it
and each received chunk to its device (2 processes sharing one GPU cannot use NCCL, which
refuses two ranks on one device). Tested on gloo with CPU stages; the copies to and from a
GPU only where one is lent (``bench/gpu_check.sh``).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence

import torch
from torch import Tensor
from torch import distributed as dist

#: ``(shape, dtype)`` of a chunk to receive, shape with the samples first.
Spec = tuple[tuple[int, ...], torch.dtype]
#: Where chunks travel: gloo sends and receives host tensors.
WIRE = torch.device("cpu")


class DistTransport:
    """Rank-local point-to-point over the default process group (gloo); chunks travel in
    host memory (:data:`WIRE`) and are handed to the stage on ``device``."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device or WIRE
        self._pending: list[tuple[dist.Work, Tensor]] = []
        #: Per peer: its posted receives (request and tensor), in order.
        self._posted: dict[int, deque[tuple[dist.Work, Tensor]]] = {}

    def expect(self, receives: Sequence[tuple[Spec, int]]) -> None:
        """This rank's receives in order, ``(spec, peer)``: posts them all."""
        self._posted = defaultdict(deque)
        for (shape, dtype), peer in receives:
            tensor = torch.empty(shape, dtype=dtype, device=WIRE)
            self._posted[peer].append((dist.irecv(tensor, peer), tensor))

    def send(self, payload: Tensor, peer: int) -> None:
        """Start sending ``payload`` (detached, on the wire, made contiguous) to rank
        ``peer``."""
        tensor = payload.detach().to(WIRE).contiguous()
        self._pending = [(work, kept) for work, kept in self._pending if not work.is_completed()]
        self._pending.append((dist.isend(tensor, peer), tensor))

    def recv(self, spec: Spec, peer: int) -> Tensor:
        """The next chunk from rank ``peer``: a new tensor of ``spec``'s shape and dtype
        (the posted receive's, which must be ``spec``'s: receives run as expected)."""
        shape, dtype = spec
        if not self._posted.get(peer):
            raise RuntimeError(f"a receive from rank {peer} that was not expected")
        work, tensor = self._posted[peer].popleft()
        if tuple(tensor.shape) != tuple(shape) or tensor.dtype != dtype:
            raise RuntimeError(
                f"receive from rank {peer} of {tuple(shape)} {dtype} where "
                f"{tuple(tensor.shape)} {tensor.dtype} was expected"
            )
        work.wait()
        return tensor.to(self.device)

    def wait(self) -> None:
        """Block until every started send has completed, then drop them."""
        for work, _ in self._pending:
            work.wait()
        self._pending.clear()
