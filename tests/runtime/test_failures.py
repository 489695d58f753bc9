"""Where a run failed: the instruction, and the top-level layer whose code raised."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from tidgap.runtime.executor import execute  # noqa: E402
from tidgap.runtime.failures import (  # noqa: E402
    InstructionFailed,
    failure_line,
    handler_error,
)
from tidgap.runtime.lowering import Instruction  # noqa: E402


class Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("bad shape\nsecond line")


class Handlers:
    """Runs ``module`` on every forward; any other kind is a no-op."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def forward(self, microbatch: int, samples: tuple[int, int]) -> None:
        self.module(torch.zeros(samples[1] - samples[0], 2))

    def __getattr__(self, kind: str):
        return lambda *arguments: None


def _failed(module: nn.Module) -> InstructionFailed:
    steps = [Instruction("recv_forward", 0, (0, 4)), Instruction("forward", 1, (4, 10))]
    with pytest.raises(InstructionFailed) as caught:
        execute(steps, Handlers(module))
    return caught.value


def test_a_layer_that_raises_is_named_the_outermost_layer_of_its_stage() -> None:
    nested = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Identity(), Raises()))
    failed = _failed(nested)
    assert failed.step == Instruction("forward", 1, (4, 10))
    assert isinstance(handler_error(failed), ValueError)
    line = failure_line(failed, 3, nested, ["embed", "block7"])
    assert line == (
        "stage 3 forward of samples 4..9 in layer 'block7' (Sequential): ValueError: bad shape"
    )


def test_an_error_outside_the_layers_names_none() -> None:
    class Outside(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("connection closed")

    stage = nn.Sequential(nn.Identity())
    failed = _failed(Outside())  # not a child of ``stage``
    line = failure_line(failed, 0, stage, ["only"])
    assert line == "stage 0 forward of samples 4..9: RuntimeError: connection closed"
