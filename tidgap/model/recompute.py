"""Recomputing stages' op times as ``tidgap calibrate`` measured them
(``source.calibration.recompute``).

A stage whose backward boundaries are not all forward boundaries recomputes
(:func:`tidgap.runtime.lowering.recomputes`): its forwards run without autograd's graph and
each backward re-runs its chunk's forward with the graph first. Neither costs what the
stage's ``forward`` and ``backward`` say (those are timed storing graphs), so a calibrated
problem may carry, per stage, the two measured: a list of ``{"forward": F, "backward":
B}``, one per stage, ``F`` and ``B`` time functions in the problem's unit, ``F`` asked for
the stage's forward sizes, ``B`` for its backward sizes. ``tidgap run`` prices recomputing
stages with them (:mod:`tidgap.runtime.pricing`); the search does not.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tidgap.model.errors import InputError, JsonPath
from tidgap.model.fileio import input_error_from
from tidgap.model.timefn import StrictModel, TimeFunction

#: Where a problem file holds them.
RECOMPUTE_PATH: JsonPath = ("source", "calibration", "recompute")


class RecomputeTimes(StrictModel):
    """One stage's recomputing op times: ``forward``, a forward without autograd's graph;
    ``backward``, a backward that first re-runs its chunk's forward with the graph; each
    of a microbatch of ``b`` samples, in the problem's time unit."""

    forward: TimeFunction
    backward: TimeFunction


def recompute_times(source: Any, num_stages: int) -> list[RecomputeTimes] | None:
    """The per-stage :class:`RecomputeTimes` a problem's ``source`` carries (``None`` when
    it has none); :class:`InputError` naming the field when they are malformed (not a list
    of ``num_stages`` objects, each with a ``forward`` and a ``backward`` time function)."""
    calibration = source.get("calibration") if isinstance(source, dict) else None
    if not isinstance(calibration, dict) or "recompute" not in calibration:
        return None
    entries = calibration["recompute"]
    if not isinstance(entries, list) or len(entries) != num_stages:
        raise InputError(f"must be a list of {num_stages} entries, one per stage", RECOMPUTE_PATH)
    parsed = []
    for s, entry in enumerate(entries):
        try:
            parsed.append(RecomputeTimes.model_validate(entry))
        except ValidationError as error:
            inner = input_error_from(error)
            raise InputError(inner.message, (*RECOMPUTE_PATH, s, *inner.path)) from None
    return parsed
