"""``source.calibration`` entries for tests, as ``tidgap calibrate`` writes them."""

from __future__ import annotations

from typing import Any


def scaled(function: dict[str, Any], by: float, plus: float = 0.0) -> dict[str, Any]:
    """A ``tidgap.problem/1`` time function ``t`` as ``by * t + plus``."""
    if "affine" in function:
        affine = function["affine"]
        base, per_sample = by * affine["base"] + plus, by * affine["per_sample"]
        return {"affine": {"base": base, "per_sample": per_sample}}
    table = function["table"]
    return {"table": {"sizes": table["sizes"], "times": [by * t + plus for t in table["times"]]}}


def order_tables(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``source.calibration.order`` for a problem's ``stages``: a forward right after a
    backward at 70% of the stage's forward plus 0.1, and the backward right after its own
    forward at 80% of the stage's backward."""
    return [
        {
            "forward_after_backward": scaled(stage["forward"], 0.7, 0.1),
            "backward_after_forward": scaled(stage["backward"], 0.8),
        }
        for stage in stages
    ]
