"""A plan (``tidgap.plan/1``): per stage, the forward and backward microbatch sizes in order,
and for an ordered plan the order of its forwards and backwards (``order`` or ``windows``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from tidgap.model.errors import InputError
from tidgap.model.fileio import parse_model, read_json
from tidgap.model.numbers import copied_list, plain
from tidgap.model.problem import Problem, require_path, require_problem
from tidgap.model.text import printable
from tidgap.model.timefn import Samples, StrictModel
from tidgap.schedules.ir import Order, first_violation, flush_order, window_order

PLAN_FORMAT = "tidgap.plan/1"
#: The fields that give an ordered plan's order: at most one of them.
ORDER_FIELDS = ("order", "windows")

Partition = Annotated[list[Samples], Field(min_length=1)]


class Plan(StrictModel):
    """``forward[s]`` / ``backward[s]``: stage ``s``'s microbatch sizes in samples, in order.

    ``predicted``, ``baselines`` and ``search`` are written by ``tidgap search`` and
    ignored on input; ``source`` is free-form, kept as is (formats.md).
    """

    format: Literal["tidgap.plan/1"] = PLAN_FORMAT
    problem: str | None = None
    forward: list[Partition]
    backward: list[Partition]
    predicted: Any = None
    baselines: Any = None
    search: Any = None
    source: Any = None
    order: list[str] | None = None
    windows: list[Samples] | None = None
    #: :meth:`of` converts NumPy's values itself (plans are built in the search's loops).
    numpy_input: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _no_null_order(cls, data: Any) -> Any:
        """A flush plan leaves ``order`` and ``windows`` out: an explicit ``null`` is
        refused, not taken as a flush plan."""
        if isinstance(data, dict):
            for key in ORDER_FIELDS:
                if key in data and data[key] is None:
                    raise InputError("is null; leave it out for a flush plan", (key,))
        return data

    @property
    def order_field(self) -> str | None:
        """``"order"`` or ``"windows"``: the field that gives the plan's order, ``None`` for
        a flush plan (``order`` when both are given)."""
        return next((key for key in ORDER_FIELDS if getattr(self, key) is not None), None)

    def document(self) -> dict[str, Any]:
        """The plan as its ``tidgap.plan/1`` file's JSON object (unset fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def from_dict(cls, data: Any) -> Plan:
        """Validate the shape of a decoded ``tidgap.plan/1`` document."""
        return parse_model(cls, data, PLAN_FORMAT)

    @classmethod
    def of(
        cls,
        forward: list[list[int]],
        backward: list[list[int]],
        order: list[str] | None = None,
        windows: list[int] | None = None,
    ) -> Plan:
        """A plan from per-stage size lists and, for an ordered plan, per-stage letters or
        windows (shape only; see :func:`check_plan`). :class:`InputError` on ``plan``
        naming the first field that is not of that shape."""
        given = {"order": order, "windows": windows}
        try:
            return cls(
                forward=copied_rows(forward),
                backward=copied_rows(backward),
                **{key: copied_list(value) for key, value in given.items() if value is not None},
            )
        except InputError as error:
            raise error.on("plan") from None

    def stage_order(self) -> Order:
        """Each stage's letters: the given ``order``, the one ``windows`` stand for, or the
        flush order ``F^M B^N`` (model.md, Ordered plans)."""
        if self.order is not None:
            return Order.of(self.order)
        if self.windows is not None:
            return window_order(self.forward, self.backward, self.windows)
        return flush_order(self.forward, self.backward)

    def schedule(self) -> tuple[Any, Any, Order]:
        """What a run executes, as one comparable (hashable) value: the forward and backward
        sizes per stage (tuples of tuples) and :meth:`stage_order`; equal for two plans that
        run alike, whether their orders are given as letters, windows or left to the flush
        default."""
        forward, backward = (tuple(map(tuple, rows)) for rows in (self.forward, self.backward))
        return forward, backward, self.stage_order()


def copied_rows(rows: Any) -> Any:
    """A list of lists of ``rows`` when it is a sequence of sequences (so the plan shares
    no list with its caller; NumPy's integers and arrays as Python's); anything else as it
    is, for validation to refuse."""
    rows = plain(rows)
    if isinstance(rows, list) and all(isinstance(r, list) for r in rows):
        return [list(r) for r in rows]
    return rows


def require_plan(value: Any, name: str = "plan") -> Plan:
    """``value`` when it is a :class:`Plan`; a ``TypeError`` naming ``name`` and saying how
    to get one otherwise (an API argument of the wrong kind)."""
    if not isinstance(value, Plan):
        raise TypeError(
            f"{name} must be a tidgap.Plan (tidgap.Plan.of(...) or tidgap.load_plan(path, "
            f"problem)), not a {type(value).__name__}"
        )
    return value


def check_plan(
    plan: Plan, problem: Problem, source: str | None = None, repaired: bool = False
) -> None:
    """Raise :class:`InputError` (on ``source``, when given) unless ``plan`` is feasible for
    ``problem`` (model.md, A plan); with ``repaired``, an order that breaks rule 1 or 2
    passes (a search's seed: the repair makes it valid)."""
    require_plan(plan, source or "plan")
    require_problem(problem)
    try:
        _check_plan(plan, problem, repaired)
    except InputError as error:
        raise (error if source is None else error.within(source)) from None


def _check_plan(plan: Plan, problem: Problem, repaired: bool) -> None:
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
    check_order(plan, stages, repaired)


def check_order(plan: Plan, stages: int, repaired: bool = False) -> None:
    """Raise :class:`InputError` on ``order[s]`` / ``windows[s]`` unless the plan's order is
    valid (model.md: rules ``count``, 1 and 2, the first broken one reported; with
    ``repaired``, only ``count``)."""
    key = plan.order_field
    if key is None:
        return
    if plan.order is not None and plan.windows is not None:
        raise InputError("give order or windows, not both", ("windows",))
    given = getattr(plan, key)
    if len(given) != stages:
        raise InputError(f"has {len(given)} stage(s), the problem has {stages}", (key,))
    violation = first_violation(plan.stage_order(), plan.forward, plan.backward)
    if violation is not None and (violation.rule == "count" or not repaired):
        raise InputError(violation.message(), (key, violation.stage))


def load_plan(path: str | os.PathLike[str], problem: Problem, refuse_other: bool = False) -> Plan:
    """Load and check a plan file against ``problem``; if it names another problem, warn on
    stderr, or with ``refuse_other`` raise :class:`InputError` (a run's prediction would be
    another problem's)."""
    require_problem(problem)
    require_path(path, "path")
    try:
        plan = Plan.from_dict(read_json(path))
        named = plan.problem
        other = named is not None and problem.name is not None and named != problem.name
        if other and refuse_other:
            raise InputError(f"is a plan for {named!r}, not for {problem.name!r}", ("problem",))
        check_plan(plan, problem)
    except InputError as error:
        raise error.within(str(path)) from None
    if other:
        print(
            f"tidgap: warning: {printable(str(Path(path)))}: problem: plan is for {named!r}, "
            f"evaluating it on {problem.name!r}",
            file=sys.stderr,
        )
    return plan
