"""Op times a calibration measured beside a problem's stage tables (``source.calibration``).

``tidgap calibrate`` writes, besides each stage's ``forward`` and ``backward``, two lists
with one entry per stage, each entry time functions in the problem's unit that
``tidgap run``'s prediction uses (:mod:`tidgap.runtime.pricing`; the search does not):

- ``recompute``: ``{"forward": F, "backward": B}``, a stage's ops when it recomputes (its
  backward boundaries are not all forward boundaries,
  :func:`tidgap.runtime.lowering.recomputes`): its forwards run without autograd's graph,
  and each backward re-runs its chunk's forward with the graph first;
- ``order``: ``{"forward_after_backward": F, "backward_after_forward": B}``, ops whose
  time depends on the op before them on the stage: a forward run right after a backward,
  and the last stage's backward run right after its own forward (on the development
  machine's CPU both about 4-8% faster than in GPipe's order).

Each ``F`` is asked for the stage's forward sizes, each ``B`` for its backward sizes.
``source`` is free-form (formats.md): a malformed entry is left out, not refused
(:attr:`tidgap.model.problem.Problem.unused_calibration`).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from pydantic import ValidationError

from tidgap.model.errors import InputError, JsonPath
from tidgap.model.fileio import input_error_from
from tidgap.model.timefn import StrictModel, TimeFunction


class StageTimes(StrictModel):
    """One stage's entry: time functions, each for a direction's sizes (``DIRECTIONS``:
    field name -> ``"forward"`` or ``"backward"``)."""

    DIRECTIONS: ClassVar[dict[str, str]] = {}
    #: The entry's key under ``source.calibration``.
    KEY: ClassVar[str] = ""

    def functions(self) -> list[tuple[str, TimeFunction, str]]:
        """``(field, function, direction)`` of each of the entry's time functions."""
        return [(name, getattr(self, name), way) for name, way in self.DIRECTIONS.items()]


class RecomputeTimes(StageTimes):
    """A recomputing stage's ops: ``forward``, a forward without autograd's graph;
    ``backward``, a backward that first re-runs its chunk's forward with the graph."""

    DIRECTIONS: ClassVar[dict[str, str]] = {"forward": "forward", "backward": "backward"}
    KEY: ClassVar[str] = "recompute"
    forward: TimeFunction
    backward: TimeFunction


class OrderTimes(StageTimes):
    """Ops timed by the op before them: ``forward_after_backward``, a forward right after a
    backward of the stage; ``backward_after_forward``, the last stage's backward right
    after its own forward."""

    DIRECTIONS: ClassVar[dict[str, str]] = {
        "forward_after_backward": "forward",
        "backward_after_forward": "backward",
    }
    KEY: ClassVar[str] = "order"
    forward_after_backward: TimeFunction
    backward_after_forward: TimeFunction


Entry = TypeVar("Entry", bound=StageTimes)


def path_of(kind: type[StageTimes]) -> JsonPath:
    """Where a problem file holds ``kind``'s entries."""
    return ("source", "calibration", kind.KEY)


def stage_times(source: Any, kind: type[Entry], num_stages: int) -> list[Entry] | None:
    """The per-stage entries of ``kind`` a problem's ``source`` carries (``None`` when it
    has none); :class:`InputError` naming the field when they are malformed (not a list of
    ``num_stages`` objects, each with ``kind``'s time functions)."""
    calibration = source.get("calibration") if isinstance(source, dict) else None
    if not isinstance(calibration, dict) or kind.KEY not in calibration:
        return None
    entries, path = calibration[kind.KEY], path_of(kind)
    if not isinstance(entries, list) or len(entries) != num_stages:
        raise InputError(f"must be a list of {num_stages} entries, one per stage", path)
    parsed = []
    for s, entry in enumerate(entries):
        try:
            parsed.append(kind.model_validate(entry))
        except ValidationError as error:
            inner = input_error_from(error)
            raise InputError(inner.message, (*path, s, *inner.path)) from None
    return parsed
