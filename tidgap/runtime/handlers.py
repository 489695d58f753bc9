"""The handlers a rank runs with: a stage's compute joined to a transport.

:class:`PipelineHandlers` turns instructions into calls on a :class:`StageCompute` (what a
stage computes on sample ranges) and a :class:`Transport` (how chunks travel between
neighbouring ranks). Payloads are whatever the compute produces: tensors in real runs,
lists of sample ids in the lowering tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from tidgap.runtime.lowering import Instruction


class StageCompute(Protocol):
    """One stage's work on sample ranges ``(lo, hi)`` (0-based, ``hi`` excluded)."""

    def receive_input(self, samples: tuple[int, int], payload: Any) -> None:
        """An upstream chunk's activations arrived (not called on the first stage)."""

    def forward(self, samples: tuple[int, int]) -> Any:
        """Run the forward of ``samples``; the output chunk to send (ignored on the last
        stage)."""

    def receive_gradient(self, samples: tuple[int, int], payload: Any) -> None:
        """A downstream chunk's gradients arrived (not called on the last stage)."""

    def backward(self, samples: tuple[int, int]) -> Any:
        """Run the backward of ``samples``; the input gradient to send upstream (ignored on
        the first stage)."""

    def input_spec(self, samples: tuple[int, int]) -> Any:
        """What a receive of an upstream chunk of ``samples`` needs to allocate (shape, dtype)."""

    def gradient_spec(self, samples: tuple[int, int]) -> Any:
        """What a receive of a downstream gradient chunk of ``samples`` needs to allocate."""


class Transport(Protocol):
    """Point-to-point between this rank and its neighbours (``peer`` is a rank)."""

    def send(self, payload: Any, peer: int) -> None:
        """Start sending ``payload`` to ``peer`` (asynchronous; order kept per peer)."""

    def recv(self, spec: Any, peer: int) -> Any:
        """The next payload from ``peer`` (blocks); ``spec`` from the compute's ``*_spec``."""

    def wait(self) -> None:
        """Wait until every started send has completed."""

    def expect(self, receives: Sequence[tuple[Any, int]]) -> None:
        """Every receive this rank will make, in order, as ``(spec, peer)``: a transport
        may start them before :meth:`recv` asks (a chunk then travels while the rank
        computes)."""


class PipelineHandlers:
    """:class:`~tidgap.runtime.executor.Handlers` for rank ``rank``: receives and sends go
    through ``transport`` to ``rank - 1`` / ``rank + 1``, compute through ``stage``."""

    def __init__(self, rank: int, stage: StageCompute, transport: Transport) -> None:
        self.rank, self.stage, self.transport = rank, stage, transport
        self._outputs: dict[int, Any] = {}
        self._gradients: dict[int, Any] = {}

    def expect(self, instructions: Sequence[Instruction]) -> None:
        """Tell the transport every receive of ``instructions`` (this rank's), in order."""
        receives = []
        for step in instructions:
            if step.kind == "recv_forward":
                receives.append((self.stage.input_spec(step.samples), self.rank - 1))
            elif step.kind == "recv_backward":
                receives.append((self.stage.gradient_spec(step.samples), self.rank + 1))
        self.transport.expect(receives)

    def recv_forward(self, microbatch: int, samples: tuple[int, int]) -> None:
        payload = self.transport.recv(self.stage.input_spec(samples), self.rank - 1)
        self.stage.receive_input(samples, payload)

    def forward(self, microbatch: int, samples: tuple[int, int]) -> None:
        self._outputs[microbatch] = self.stage.forward(samples)

    def send_forward(self, microbatch: int, samples: tuple[int, int]) -> None:
        self.transport.send(self._outputs.pop(microbatch), self.rank + 1)

    def recv_backward(self, microbatch: int, samples: tuple[int, int]) -> None:
        payload = self.transport.recv(self.stage.gradient_spec(samples), self.rank + 1)
        self.stage.receive_gradient(samples, payload)

    def backward(self, microbatch: int, samples: tuple[int, int]) -> None:
        self._gradients[microbatch] = self.stage.backward(samples)

    def send_backward(self, microbatch: int, samples: tuple[int, int]) -> None:
        self.transport.send(self._gradients.pop(microbatch), self.rank - 1)

    def finish(self) -> None:
        self.transport.wait()
        self._outputs.clear()
        self._gradients.clear()
