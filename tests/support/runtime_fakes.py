"""In-process stand-ins for tests: queues between threads instead of torch.distributed, and
a stage that computes on sample ids, so a test can check what every op received.

:func:`run_ranks` runs every rank's instructions in its own thread over a
:class:`QueueNetwork` and returns the records; a rank that waits longer than ``timeout``
seconds (a deadlock) or raises makes it raise.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tidgap.runtime.executor import Record, execute
from tidgap.runtime.failures import handler_error
from tidgap.runtime.handlers import PipelineHandlers, StageCompute, Transport
from tidgap.runtime.lowering import Instruction


class QueueNetwork:
    """One FIFO queue per ordered pair of ranks; :meth:`transport` is rank ``r``'s end."""

    def __init__(self, ranks: int, timeout: float) -> None:
        self.timeout = timeout
        self.queues = {(a, b): queue.Queue() for a in range(ranks) for b in range(ranks)}

    def transport(self, rank: int) -> Transport:
        """Rank ``rank``'s :class:`~tidgap.runtime.handlers.Transport`."""
        return _QueueTransport(self, rank)


class _QueueTransport:
    """Queues hold every chunk sent, so nothing is posted early; the expected receives are
    checked against the ones made (same specs and peers, in order)."""

    def __init__(self, network: QueueNetwork, rank: int) -> None:
        self.network, self.rank = network, rank
        self.expected: list[tuple[Any, int]] = []  # in reverse, the next one last

    def send(self, payload: Any, peer: int) -> None:
        """A tensor arrives as torch.distributed delivers it: a contiguous copy, detached."""
        if hasattr(payload, "contiguous"):
            payload = payload.detach().clone(memory_format=_contiguous_format())
        self.network.queues[(self.rank, peer)].put(payload)

    def expect(self, receives: Sequence[tuple[Any, int]]) -> None:
        self.expected = list(reversed(receives))

    def recv(self, spec: Any, peer: int) -> Any:
        wanted = self.expected.pop() if self.expected else None
        if wanted != (spec, peer):
            raise RuntimeError(f"rank {self.rank} received {(spec, peer)}, expected {wanted}")
        try:
            return self.network.queues[(peer, self.rank)].get(timeout=self.network.timeout)
        except queue.Empty:
            waited = f"rank {self.rank} waited {self.network.timeout} s for rank {peer}"
            raise TimeoutError(waited) from None

    def wait(self) -> None:
        return None


def _contiguous_format() -> Any:
    """``torch.contiguous_format`` (torch is imported only where tensors are sent)."""
    import torch

    return torch.contiguous_format


class SampleStage:
    """A :class:`~tidgap.runtime.handlers.StageCompute` whose payloads are lists of sample
    ids: it checks that each forward (backward) has every sample it covers from upstream
    (downstream), and logs ``(kind, samples)`` per op in ``log``."""

    def __init__(self, first: bool, last: bool, log: list[tuple[str, tuple[int, int]]]) -> None:
        self.first, self.last, self.log = first, last, log
        self.inputs: set[int] = set()
        self.forwarded: set[int] = set()
        self.gradients: set[int] = set()

    def input_spec(self, samples: tuple[int, int]) -> int:
        return samples[1] - samples[0]

    gradient_spec = input_spec

    def receive_input(self, samples: tuple[int, int], payload: list[int]) -> None:
        assert payload == list(range(*samples)), (samples, payload)
        self.inputs.update(payload)

    def forward(self, samples: tuple[int, int]) -> list[int]:
        wanted = set(range(*samples))
        if not self.first and not wanted <= self.inputs:
            raise AssertionError(f"forward {samples} before its inputs arrived")
        self.forwarded |= wanted
        self.log.append(("F", samples))
        return list(range(*samples))

    def receive_gradient(self, samples: tuple[int, int], payload: list[int]) -> None:
        assert payload == list(range(*samples)), (samples, payload)
        self.gradients.update(payload)

    def backward(self, samples: tuple[int, int]) -> list[int]:
        wanted = set(range(*samples))
        if not wanted <= self.forwarded:
            raise AssertionError(f"backward {samples} before its own forwards")
        if not self.last and not wanted <= self.gradients:
            raise AssertionError(f"backward {samples} before its gradients arrived")
        self.log.append(("B", samples))
        return list(range(*samples))


def run_ranks(
    lowered: Sequence[Sequence[Instruction]],
    stage: Callable[[int], StageCompute],
    timeout: float = 10.0,
) -> list[list[Record]]:
    """Run rank ``r``'s instructions with ``stage(r)`` over queues, each rank in a thread;
    per rank its records. Raises the first rank's error, or ``TimeoutError`` on a
    deadlock."""
    network = QueueNetwork(len(lowered), timeout)
    records: list[list[Record]] = [[] for _ in lowered]
    errors: list[BaseException] = []

    def work(rank: int) -> None:
        try:
            handlers = PipelineHandlers(rank, stage(rank), network.transport(rank))
            handlers.expect(lowered[rank])
            records[rank] = execute(lowered[rank], handlers)
        except BaseException as error:  # reported to the caller below
            errors.append(handler_error(error))

    threads = [threading.Thread(target=work, args=(r,), daemon=True) for r in range(len(lowered))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout * (len(lowered) + 1))
        if thread.is_alive():
            raise TimeoutError("a rank did not finish")
    if errors:
        raise errors[0]
    return records
