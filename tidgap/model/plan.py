"""A plan (``tidgap.plan/1``): per stage, the forward and backward microbatch sizes in order."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from tidgap.model.errors import InputError
from tidgap.model.fileio import parse_model, read_json
from tidgap.model.problem import Problem
from tidgap.model.timefn import Samples, StrictModel

PLAN_FORMAT = "tidgap.plan/1"

Partition = Annotated[list[Samples], Field(min_length=1)]


class Plan(StrictModel):
    """``forward[s]`` / ``backward[s]``: stage ``s``'s microbatch sizes in samples, in order.

    ``predicted``, ``baselines`` and ``search`` are written by ``tidgap search`` and
    ignored on input.
    """

    format: Literal["tidgap.plan/1"] = PLAN_FORMAT
    problem: str | None = None
    forward: list[Partition]
    backward: list[Partition]
    predicted: Any = None
    baselines: Any = None
    search: Any = None
    order: Any = None
    windows: Any = None

    @model_validator(mode="after")
    def _flush_only(self) -> Plan:
        """Ordered plans (formats.md: ``order`` / ``windows``) are part of the contract but
        not evaluated yet: refused as bad input naming the field, never taken as flush."""
        for key in ("order", "windows"):
            if getattr(self, key) is not None:
                raise InputError(
                    "ordered plans are not supported yet: tidgap evaluates flush plans only",
                    (key,),
                )
        return self

    @classmethod
    def from_dict(cls, data: Any) -> Plan:
        """Validate the shape of a decoded ``tidgap.plan/1`` document."""
        return parse_model(cls, data, PLAN_FORMAT)

    @classmethod
    def of(cls, forward: list[list[int]], backward: list[list[int]]) -> Plan:
        """A plan from per-stage size lists (shape only; see :func:`check_plan`)."""
        return cls(forward=[list(p) for p in forward], backward=[list(p) for p in backward])


def check_plan(plan: Plan, problem: Problem) -> None:
    """Raise :class:`InputError` unless ``plan`` is feasible for ``problem`` (model.md, A plan)."""
    stages = problem.num_stages
    for direction in ("forward", "backward"):
        partitions = getattr(plan, direction)
        if len(partitions) != stages:
            raise InputError(
                f"has {len(partitions)} stage(s), the problem has {stages}", (direction,)
            )
        for s, sizes in enumerate(partitions):
            cap = problem.forward_cap(s) if direction == "forward" else problem.backward_cap(s)
            for k, size in enumerate(sizes):
                if size % problem.unit:
                    raise InputError(
                        f"size {size} is not a multiple of unit {problem.unit}",
                        (direction, s, k),
                    )
                if size > cap:
                    raise InputError(
                        f"size {size} exceeds stage {s}'s {direction} cap {cap}",
                        (direction, s, k),
                    )
            total = sum(sizes)
            if total != problem.batch_size:
                raise InputError(
                    f"sizes sum to {total}, batch_size is {problem.batch_size}", (direction, s)
                )


def load_plan(path: str | os.PathLike[str], problem: Problem) -> Plan:
    """Load and check a plan file against ``problem``; warn on stderr if it names another."""
    try:
        plan = Plan.from_dict(read_json(path))
        check_plan(plan, problem)
    except InputError as error:
        raise error.within(str(path)) from None
    if plan.problem is not None and problem.name is not None and plan.problem != problem.name:
        print(
            f"tidgap: warning: {Path(path)}: problem: plan is for {plan.problem!r}, "
            f"evaluating it on {problem.name!r}",
            file=sys.stderr,
        )
    return plan
