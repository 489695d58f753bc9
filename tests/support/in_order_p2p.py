"""Point-to-point with NCCL's ordering, in one process: a stand-in for ``dist.isend`` and
``dist.irecv`` under which each rank's calls in a group complete strictly in the order
they were posted, and a send completes only together with its receive (a rendezvous, as
NCCL's kernels for messages larger than its buffers). So a rank whose first call in a group
is a receive cannot send in that group until the receive is matched: what deadlocks a
transport that posts receives ahead in a group it also sends in. Optionally a group
connects on first use, both ranks blocking until the other comes, as NCCL makes its
point-to-point communicators. ``tests/runtime/
test_dist_transport.py`` runs :class:`~tidgap.runtime.dist_transport.DistTransport` under
it, one thread per rank.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Call:
    """One posted call: rank ``rank`` sends ``tensor`` to ``peer`` (``send``) or receives
    into it from ``peer``; ``done`` once matched."""

    send: bool
    rank: int
    peer: int
    tensor: torch.Tensor
    network: InOrderNetwork
    done: bool = False

    def is_completed(self) -> bool:
        with self.network.changed:
            return self.done

    def wait(self) -> None:
        """Block until matched; ``TimeoutError`` after the network's timeout (a deadlock)."""
        with self.network.changed:
            if not self.network.changed.wait_for(lambda: self.done, self.network.timeout):
                what = "send to" if self.send else "receive from"
                raise TimeoutError(f"rank {self.rank}'s {what} rank {self.peer} never matched")


@dataclass
class InOrderNetwork:
    """Per group and rank, the calls posted and not yet matched, oldest first. With
    ``lazy``, a group of two ranks connects on first use, as NCCL makes a point-to-point
    communicator: a rank's first call in a group blocks until the other rank's first call
    there (``connected``: who has come to each group)."""

    timeout: float
    lazy: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)
    queues: dict[tuple[Any, int], deque[Call]] = field(default_factory=lambda: defaultdict(deque))
    connected: dict[Any, set[int]] = field(default_factory=lambda: defaultdict(set))

    def isend(self, tensor: torch.Tensor, dst: int, group: Any = None) -> Call:
        return self._post(True, tensor, dst, group)

    def irecv(self, tensor: torch.Tensor, src: int, group: Any = None) -> Call:
        return self._post(False, tensor, src, group)

    def _post(self, send: bool, tensor: torch.Tensor, peer: int, group: Any) -> Call:
        rank = _rank_of_thread()
        call = Call(send, rank, peer, tensor, self)
        with self.changed:
            if self.lazy and rank not in self.connected[group]:
                self._connect(group, rank)
            self.queues[(group, rank)].append(call)
            self._match(group)
            self.changed.notify_all()
        return call

    def _connect(self, group: Any, rank: int) -> None:
        """Wait (holding :attr:`changed`) until both ranks of ``group`` have come to it."""
        here = self.connected[group]
        here.add(rank)
        self.changed.notify_all()
        if not self.changed.wait_for(lambda: len(here) == 2, self.timeout):
            raise TimeoutError(f"rank {rank} waited for its peer to connect {group!r}")

    def _match(self, group: Any) -> None:
        """Complete every pair of calls at the heads of two ranks' queues in ``group`` that
        answer each other, until none does."""
        progress = True
        while progress:
            progress = False
            for (where, rank), calls in list(self.queues.items()):
                if where != group or not calls or not calls[0].send:
                    continue
                head = calls[0]
                other = self.queues[(group, head.peer)]
                if other and not other[0].send and other[0].peer == rank:
                    other[0].tensor.copy_(head.tensor)
                    head.done = other[0].done = True
                    calls.popleft()
                    other.popleft()
                    progress = True


_threads = threading.local()


def act_as_rank(rank: int) -> None:
    """The calls this thread posts are rank ``rank``'s."""
    _threads.rank = rank


def _rank_of_thread() -> int:
    return _threads.rank
