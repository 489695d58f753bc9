"""Time functions: how long a compute step or a transfer takes for a microbatch of ``b`` samples."""

from __future__ import annotations

import copy
import math
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, Any, ClassVar, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tidgap.model.errors import InputError
from tidgap.model.fileio import input_error_from
from tidgap.model.numbers import copied_list, plain

#: A duration in the problem's time unit: finite and non-negative.
Duration = Annotated[float, Field(ge=0, allow_inf_nan=False)]
#: A byte count (finite, non-negative; may be fractional, as a profile's mean).
Bytes = Annotated[float, Field(ge=0, allow_inf_nan=False)]
#: A memory limit in bytes: finite and positive.
PositiveBytes = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: A positive sample count (a JSON integer; ``12.0`` and booleans are rejected).
Samples = Annotated[int, Field(gt=0)]


class _OneLineErrors(type(BaseModel)):  # type: ignore[misc]  # pydantic's metaclass
    """Building a model by calling its class (``Stage(...)``, Python's way in) raises
    :class:`InputError` on the class's name, the first problem with its field, as a file's
    bad value does; validating a file's document or a nested model is not a call and
    raises pydantic's ``ValidationError`` for :func:`~tidgap.model.fileio.parse_model`
    (not overriding ``__init__``, which would make pydantic validate nested models twice)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as error:
            raise input_error_from(error).within(cls.__name__) from None


class StrictModel(BaseModel, metaclass=_OneLineErrors):
    """Base of every file schema: strict types, unknown keys rejected, immutable; NumPy's
    integers, numbers and arrays given in Python taken as Python's (input-rules.md), where
    :attr:`numpy_input` (a model built in hot loops converts its input itself). A bad value
    given to the class raises :class:`InputError` (:class:`_OneLineErrors`)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    numpy_input: ClassVar[bool] = True

    @model_validator(mode="before")
    @classmethod
    def _python_numbers(cls, data: Any) -> Any:
        return plain(data) if cls.numpy_input else data

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy (``deep``: of every value too); with ``update``, built from this model's
        set fields and the update as a new model is, so validated (:class:`InputError` on
        the class's name): pydantic's copy skips validation, and a problem copied with
        another ``batch_size`` failed deep inside a search."""
        if not update:
            return super().model_copy(deep=deep)
        given = {name: getattr(self, name) for name in self.model_fields_set} | dict(update)
        if deep:
            given = copy.deepcopy(given)
        known = type(self).model_fields  # None for a field whose default is None: left out,
        kept = {  # as a file leaves it out (a plan's explicit "order": null is refused)
            name: value
            for name, value in given.items()
            if not (value is None and name in known and known[name].default is None)
        }
        return type(self)(**kept)


class Affine(StrictModel):
    """``t(b) = base + per_sample * b``."""

    base: Duration
    per_sample: Duration


class Table(StrictModel):
    """Profiled ``(size, time)`` points, linearly interpolated; no extrapolation."""

    sizes: Annotated[list[Samples], Field(min_length=1)]
    times: Annotated[list[Duration], Field(min_length=1)]

    @model_validator(mode="after")
    def _points_are_consistent(self) -> Table:
        if len(self.times) != len(self.sizes):
            raise InputError(
                f"has {len(self.times)} entries, sizes has {len(self.sizes)}", ("times",)
            )
        for i in range(1, len(self.sizes)):
            if self.sizes[i] <= self.sizes[i - 1]:
                raise InputError(
                    f"sizes must be strictly increasing ({self.sizes[i]} follows "
                    f"{self.sizes[i - 1]})",
                    ("sizes", i),
                )
        return self


class TimeFunction(StrictModel):
    """Exactly one of ``affine`` or ``table``; call it with a size in samples."""

    affine: Affine | None = None
    table: Table | None = None

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> TimeFunction:
        if (self.affine is None) == (self.table is None):
            raise InputError("needs exactly one of 'affine' or 'table'")
        return self

    @property
    def domain(self) -> tuple[float, float]:
        """The closed range of sizes (samples) this function can be asked for."""
        if self.table is None:
            return (0.0, math.inf)
        return (float(self.table.sizes[0]), float(self.table.sizes[-1]))

    def covers(self, smallest: int, largest: int) -> bool:
        """Whether every size in ``[smallest, largest]`` lies inside the domain."""
        low, high = self.domain
        return low <= smallest and largest <= high

    def __call__(self, size: int) -> float:
        """Time for a microbatch of ``size`` samples, in the problem's time unit."""
        if self.affine is not None:
            return self.affine.base + self.affine.per_sample * size
        sizes, times = self.table.sizes, self.table.times
        i = bisect_left(sizes, size)
        if i < len(sizes) and sizes[i] == size:
            return times[i]
        if i == 0 or i == len(sizes):
            raise ValueError(f"size {size} lies outside the table {sizes[0]}..{sizes[-1]}")
        s0, s1, t0, t1 = sizes[i - 1], sizes[i], times[i - 1], times[i]
        return t0 + (t1 - t0) * (size - s0) / (s1 - s0)

    def at(self, sizes: np.ndarray) -> np.ndarray:
        """``self(b)`` for every integer size ``b`` of ``sizes`` (samples, any shape): float64
        of the same shape, bit-identical to calling it per size (the same formula, in the same
        order); raises ``ValueError`` like :meth:`__call__` if a size lies outside a table."""
        sizes = np.asarray(sizes, dtype=np.int64)
        if self.affine is not None:
            return self.affine.base + self.affine.per_sample * sizes.astype(np.float64)
        knots = np.asarray(self.table.sizes, dtype=np.int64)
        times = np.asarray(self.table.times, dtype=np.float64)
        outside = (sizes < knots[0]) | (sizes > knots[-1])
        if outside.any():
            self(int(sizes[outside].flat[0]))  # raises with __call__'s message
        i = np.searchsorted(knots, sizes, side="left")
        exact = knots[i] == sizes
        below = np.maximum(i - 1, 0)
        s0, t0 = knots[below], times[below]
        s1, t1 = knots[i], times[i]
        with np.errstate(invalid="ignore", divide="ignore"):  # exact hits: below == i
            between = t0 + (t1 - t0) * (sizes - s0) / (s1 - s0)
        return np.where(exact, times[i], between)


def affine(base: float, per_sample: float) -> TimeFunction:
    """Shorthand for an affine time function; :class:`InputError` on ``affine`` naming the
    first bad field."""
    with one_line("affine"):
        return TimeFunction(affine=Affine(base=base, per_sample=per_sample))


def table(sizes: list[int], times: list[float]) -> TimeFunction:
    """Shorthand for a tabulated time function; :class:`InputError` on ``table`` naming the
    first bad field."""
    with one_line("table"):
        return TimeFunction(table=Table(sizes=copied_list(sizes), times=copied_list(times)))


@contextmanager
def one_line(source: str) -> Iterator[None]:
    """A bad value of a time function built from Python values as an :class:`InputError`
    on ``source`` (its first problem, with its field), not on the class's name."""
    try:
        yield
    except InputError as error:
        raise error.on(source) from None
