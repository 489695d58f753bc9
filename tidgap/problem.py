"""The problem: stages, links, batch size and caps (``tidgap.problem/1``), validated on load."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from tidgap.errors import InputError
from tidgap.fileio import parse_model, read_json
from tidgap.timefn import Duration, Samples, StrictModel, TimeFunction

PROBLEM_FORMAT = "tidgap.problem/1"


class Stage(StrictModel):
    """One pipeline stage: compute times per microbatch size, caps in samples, tail time."""

    name: str | None = None
    forward: TimeFunction
    backward: TimeFunction
    max_microbatch: Samples | None = None
    max_microbatch_backward: Samples | None = None
    tail: Duration = 0.0


class Link(StrictModel):
    """The link ``s -> s+1``: activation transfer (forward) and gradient transfer (backward)."""

    forward: TimeFunction
    backward: TimeFunction


class Problem(StrictModel):
    """A pipeline to plan. Build it with :func:`load_problem` or :meth:`Problem.from_dict`."""

    format: Literal["tidgap.problem/1"] = PROBLEM_FORMAT
    name: str | None = None
    batch_size: Samples
    unit: Samples = 1
    time_unit: str = "ms"
    stages: Annotated[list[Stage], Field(min_length=1)]
    links: list[Link] = []
    source: Any = None

    @classmethod
    def from_dict(cls, data: Any, default_name: str | None = None) -> Problem:
        """Validate a decoded ``tidgap.problem/1`` document; raise :class:`InputError`."""
        problem = parse_model(cls, data, PROBLEM_FORMAT)
        if problem.name is None and default_name is not None:
            problem = problem.model_copy(update={"name": default_name})
        return problem

    @property
    def num_stages(self) -> int:
        """``S``."""
        return len(self.stages)

    @property
    def num_units(self) -> int:
        """``U = batch_size / unit``, the number of partition units."""
        return self.batch_size // self.unit

    def stage_name(self, s: int) -> str:
        """Display name of stage ``s``."""
        return self.stages[s].name or f"s{s}"

    def forward_cap(self, s: int) -> int:
        """``fcap_s``: the largest forward microbatch of stage ``s``, in samples."""
        cap = self.stages[s].max_microbatch
        return self.batch_size if cap is None else min(cap, self.batch_size)

    def backward_cap(self, s: int) -> int:
        """``bcap_s``: the largest backward microbatch of stage ``s``, in samples."""
        cap = self.stages[s].max_microbatch_backward
        return self.forward_cap(s) if cap is None else min(cap, self.batch_size)

    def common_cap(self) -> int:
        """The largest microbatch that every stage accepts in both directions, in samples."""
        return min(min(self.forward_cap(s), self.backward_cap(s)) for s in range(self.num_stages))

    @model_validator(mode="after")
    def _consistent(self) -> Problem:
        if self.batch_size % self.unit:
            raise InputError(
                f"{self.batch_size} is not a multiple of unit {self.unit}", ("batch_size",)
            )
        for s, stage in enumerate(self.stages):
            for key in ("max_microbatch", "max_microbatch_backward"):
                cap = getattr(stage, key)
                if cap is not None and cap % self.unit:
                    raise InputError(
                        f"{cap} is not a multiple of unit {self.unit}", ("stages", s, key)
                    )
        expected_links = self.num_stages - 1
        if len(self.links) != expected_links:
            raise InputError(
                f"{self.num_stages} stage(s) need {expected_links} link(s), "
                f"found {len(self.links)}",
                ("links",),
            )
        self._check_coverage()
        return self

    def _check_coverage(self) -> None:
        """Every table covers the sizes its function can be asked for (model.md, Inputs)."""
        wanted: list[tuple[tuple[str | int, ...], TimeFunction, int]] = []
        for s, stage in enumerate(self.stages):
            wanted.append((("stages", s, "forward"), stage.forward, self.forward_cap(s)))
            wanted.append((("stages", s, "backward"), stage.backward, self.backward_cap(s)))
        for s, link in enumerate(self.links):
            wanted.append((("links", s, "forward"), link.forward, self.forward_cap(s)))
            wanted.append((("links", s, "backward"), link.backward, self.backward_cap(s + 1)))
        for path, function, largest in wanted:
            if not function.covers(self.unit, largest):
                low, high = function.domain
                raise InputError(
                    f"table covers sizes {low:g}..{high:g} but sizes {self.unit}..{largest} "
                    "can be asked for",
                    (*path, "table", "sizes"),
                )


def load_problem(spec: str | os.PathLike[str]) -> Problem:
    """Load a problem from a file path, or a built-in one named ``example:NAME``."""
    from tidgap.examples import EXAMPLE_PREFIX, example_path

    shown = str(spec)
    try:
        if shown.startswith(EXAMPLE_PREFIX):
            path = example_path(shown[len(EXAMPLE_PREFIX) :])
        else:
            path = Path(spec)
        return Problem.from_dict(read_json(path), default_name=path.stem)
    except InputError as error:
        raise error.within(shown) from None
