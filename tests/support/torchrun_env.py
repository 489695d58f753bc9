"""torchrun's environment for tests of commands that behave otherwise under it."""

from __future__ import annotations

import pytest

from tidgap.runtime.worker import TORCHRUN_VARIABLES


def as_torchrun(monkeypatch: pytest.MonkeyPatch, rank: str = "0", world_size: str = "2") -> None:
    """Set what torchrun sets for process ``rank`` (also its local rank) of
    ``world_size`` (:data:`~tidgap.runtime.worker.TORCHRUN_VARIABLES`)."""
    values = (rank, world_size, rank, "127.0.0.1", "29500")
    for name, value in zip(TORCHRUN_VARIABLES, values, strict=True):
        monkeypatch.setenv(name, value)
