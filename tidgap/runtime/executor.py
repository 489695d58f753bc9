"""Run one rank's instructions through handlers, recording when each ran.

Handlers have one method per instruction kind (:data:`tidgap.runtime.lowering.Kind`), each
called as ``handler(microbatch, samples)``, and ``finish()`` (wait for outstanding sends).
The same executor drives the in-process fakes of the tests and the torch.distributed
handlers of real runs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tidgap.runtime.failures import InstructionFailed
from tidgap.runtime.lowering import Instruction, Kind


class Handlers(Protocol):
    """What :func:`execute` calls; ``samples`` are ``(lo, hi)``, 0-based, ``hi`` excluded."""

    def recv_forward(self, microbatch: int, samples: tuple[int, int]) -> None: ...
    def forward(self, microbatch: int, samples: tuple[int, int]) -> None: ...
    def send_forward(self, microbatch: int, samples: tuple[int, int]) -> None: ...
    def recv_backward(self, microbatch: int, samples: tuple[int, int]) -> None: ...
    def backward(self, microbatch: int, samples: tuple[int, int]) -> None: ...
    def send_backward(self, microbatch: int, samples: tuple[int, int]) -> None: ...
    def finish(self) -> None: ...


@dataclass(frozen=True)
class Record:
    """One instruction as it ran: ``start`` / ``end`` in seconds of ``time.perf_counter``."""

    kind: Kind
    microbatch: int
    samples: tuple[int, int]
    start: float
    end: float


def execute(instructions: Sequence[Instruction], handlers: Handlers) -> list[Record]:
    """Dispatch every instruction in order, then ``handlers.finish()``; the records, in
    order (``finish`` is not recorded). :class:`InstructionFailed` from what a handler
    raised (an :class:`Exception`), naming its instruction."""
    records = []
    for step in instructions:
        start = time.perf_counter()
        try:
            getattr(handlers, step.kind)(step.microbatch, step.samples)
        except Exception as error:
            raise InstructionFailed(step) from error
        records.append(Record(step.kind, step.microbatch, step.samples, start, time.perf_counter()))
    handlers.finish()
    return records
