"""``tidgap profile --recompute``: each backward time includes the forward of the same
samples, so a plan that recomputes is predicted with what ``tidgap run`` does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.profiling.test_profile import MLP, run


@pytest.fixture
def fixed_timings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every module measures ``size`` ms forward and ``2 * size + 1`` ms backward."""
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    from tidgap.profiling import run as profiling
    from tidgap.profiling.measure import Measurement

    def measure(modules: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        return [
            [Measurement(float(x.shape[0]), 2.0 * x.shape[0] + 1, 4) for _ in modules]
            for x in inputs
        ]

    monkeypatch.setattr(profiling, "measure", measure)


@pytest.mark.parametrize("recompute", [False, True])
def test_backward_tables_add_the_forward_with_recompute(
    fixed_timings: None, tmp_path: Path, recompute: bool
) -> None:
    out = tmp_path / "p.json"
    flags = ["--recompute"] if recompute else []
    args = [*MLP, "--stages", "2", "--batch-size", "8", "--split", "3", "--out", str(out)]
    result = run("profile", *args, *flags, "-q")
    assert result.exit_code == 0, result.stderr
    document = json.loads(out.read_text())
    for stage in document["stages"]:
        sizes, forward = stage["forward"]["table"]["sizes"], stage["forward"]["table"]["times"]
        backward = stage["backward"]["table"]["times"]
        assert forward == [float(b) for b in sizes]
        assert backward == [(3.0 if recompute else 2.0) * b + 1 for b in sizes]
    assert document["source"]["timing"]["recompute"] is recompute
    assert ("recomputed" in document["source"]["timing"]["backward"]) is recompute
