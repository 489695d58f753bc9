"""A :class:`~tidgap.runtime.handlers.Transport` on torch.distributed point-to-point.

Chunks travel in process groups of their own, one per link and direction
(:class:`LinkGroups`): in each, one rank only sends and the other only receives, in the
order the plan makes them. Over gloo the chunks travel in host memory (:data:`WIRE`: gloo
sends and receives host tensors only; a stage computing on a GPU copies each payload to
host memory to send it and each received chunk to its device); over NCCL they stay on the
stages' GPUs (each rank needs a GPU of its own: NCCL refuses two ranks on one device). A
group per link and direction is what makes NCCL safe: NCCL runs a communicator's sends and
receives in the order they were posted, and a send waits for its receive, so with one
group a rank's posted receives would sit ahead of its sends (and a send ahead of a
receive its peer needs first: 1F1B's sends of forwards and receives of gradients
deadlock).

Sends are ``dist.isend`` of the payload (detached, on the wire, contiguous), kept (request
and tensor) until :meth:`DistTransport.wait`. Receives land in a tensor allocated from the
compute's spec ``(shape, dtype)``. Given the rank's receives in order
(:meth:`DistTransport.expect`, before an iteration's barrier: posting them takes 0.2-5 ms
on the 2-core development machine), every one is posted at once (``dist.irecv``), so each
chunk travels as soon as it is sent, as the model has it, instead of when the rank asks for
it: on the 2-core development machine gloo moved a chunk only once its receive was posted,
up to 10 ms after the send when the rank was computing (and keeping just the next receive
posted did not help a stage that takes several chunks for one forward). The cost: buffers
for every chunk of the iteration the rank receives (its boundary inputs and gradients,
small beside the activations a stage keeps). Receives from a peer are matched in the order
they were posted, so they need no tags (:mod:`tidgap.runtime.lowering`). A receive returns
once its chunk is there (on NCCL the host waits for the GPU), as over gloo, so an op's
recorded start is when its input arrived.

Tested on gloo with CPU stages, and under a stand-in with NCCL's ordering
(``tests/support/in_order_p2p.py``); the copies to and from a GPU and NCCL itself only
where GPUs are lent (``bench/gpu_check.sh``; NCCL needs two GPUs, never lent yet).
"""

from __future__ import annotations

import datetime
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch import distributed as dist

from tidgap.profiling.measure import synchronize_stream

#: The longest wait a process group takes, in seconds: torch.distributed keeps it in
#: milliseconds in a 32-bit int (longer ones overflow); the runs' own watchdogs enforce
#: longer timeouts.
LONGEST_WAIT = 2_000_000.0


def dist_timeout(seconds: float) -> datetime.timedelta:
    """``seconds`` as a process group's timeout, at most :data:`LONGEST_WAIT`."""
    return datetime.timedelta(seconds=min(seconds, LONGEST_WAIT))


#: ``(shape, dtype)`` of a chunk to receive, shape with the samples first.
Spec = tuple[tuple[int, ...], torch.dtype]
#: Where chunks travel over gloo: it sends and receives host tensors.
WIRE = torch.device("cpu")


@dataclass(frozen=True)
class LinkGroups:
    """The process groups chunks travel in over ``backend`` (``gloo`` or ``nccl``):
    ``forward[s]`` carries link ``s``'s activations (rank ``s`` to ``s + 1``),
    ``backward[s]`` its gradients (rank ``s + 1`` to ``s``)."""

    backend: str
    forward: list[dist.ProcessGroup]
    backward: list[dist.ProcessGroup]

    def wire(self, device: torch.device) -> torch.device:
        """Where chunks travel for a stage on ``device``: on it over NCCL, else in host
        memory (:data:`WIRE`)."""
        return device if self.backend == "nccl" else WIRE

    def sending(self, rank: int, peer: int) -> dist.ProcessGroup:
        """The group of rank ``rank``'s sends to its neighbour ``peer``."""
        return self.forward[rank] if peer == rank + 1 else self.backward[peer]

    def receiving(self, rank: int, peer: int) -> dist.ProcessGroup:
        """The group of rank ``rank``'s receives from its neighbour ``peer``."""
        return self.forward[peer] if peer == rank - 1 else self.backward[rank]


def link_groups(world_size: int, backend: str, timeout: datetime.timedelta) -> LinkGroups:
    """Two new groups per link of a ``world_size``-stage pipeline, each waiting at most
    ``timeout`` (a collective: every rank of the default group calls it, in the same
    order)."""
    pairs = [[s, s + 1] for s in range(world_size - 1)]
    forward = [dist.new_group(pair, timeout=timeout, backend=backend) for pair in pairs]
    backward = [dist.new_group(pair, timeout=timeout, backend=backend) for pair in pairs]
    return LinkGroups(backend, forward, backward)


def handshake(groups: LinkGroups, rank: int, device: torch.device) -> None:
    """Pass one one-element message over each of rank ``rank``'s groups (its stage on
    ``device``), link by link, forward before backward (a collective in effect: every rank
    goes in the same order, so no rank waits on one that waits on it). A backend that
    connects a pair on its first message (NCCL makes a point-to-point communicator then,
    both ranks blocking until the other is there) connects here, not under an iteration's
    receives posted ahead, where a rank connecting for a receive would wait for a peer
    connecting for another."""
    wire = groups.wire(device)
    token = torch.zeros(1, device=wire)
    for link in range(len(groups.forward)):
        for group, sender, receiver in (
            (groups.forward[link], link, link + 1),
            (groups.backward[link], link + 1, link),
        ):
            if rank == sender:
                dist.isend(token, receiver, group=group).wait()
            elif rank == receiver:
                dist.irecv(token, sender, group=group).wait()
    synchronize_stream(wire)


class DistTransport:
    """Rank ``rank``'s point-to-point in ``groups``; chunks travel on the wire (host
    memory over gloo, :data:`WIRE`; ``device`` over NCCL) and are handed to the stage on
    ``device``."""

    def __init__(self, rank: int, groups: LinkGroups, device: torch.device | None = None) -> None:
        self.rank, self.groups = rank, groups
        self.device = device or WIRE
        self.wire = groups.wire(self.device)
        self._pending: list[tuple[dist.Work, Tensor]] = []
        #: Per peer: its posted receives (request and tensor), in order.
        self._posted: dict[int, deque[tuple[dist.Work, Tensor]]] = {}

    def expect(self, receives: Sequence[tuple[Spec, int]]) -> None:
        """This rank's receives in order, ``(spec, peer)``: posts them all."""
        self._posted = defaultdict(deque)
        for (shape, dtype), peer in receives:
            tensor = torch.empty(shape, dtype=dtype, device=self.wire)
            group = self.groups.receiving(self.rank, peer)
            self._posted[peer].append((dist.irecv(tensor, peer, group=group), tensor))

    def send(self, payload: Tensor, peer: int) -> None:
        """Start sending ``payload`` (detached, on the wire, made contiguous) to rank
        ``peer``."""
        tensor = payload.detach().to(self.wire).contiguous()
        self._pending = [(work, kept) for work, kept in self._pending if not work.is_completed()]
        group = self.groups.sending(self.rank, peer)
        self._pending.append((dist.isend(tensor, peer, group=group), tensor))

    def recv(self, spec: Spec, peer: int) -> Tensor:
        """The next chunk from rank ``peer``: a new tensor of ``spec``'s shape and dtype
        (the posted receive's, which must be ``spec``'s: receives run as expected), once it
        has arrived."""
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
        synchronize_stream(self.wire)  # NCCL's wait only orders the current stream
        return tensor.to(self.device)

    def wait(self) -> None:
        """Block until every started send has completed, then drop them."""
        for work, _ in self._pending:
            work.wait()
        synchronize_stream(self.wire)
        self._pending.clear()
