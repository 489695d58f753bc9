"""The problem: stages, links, batch size and caps (``tidgap.problem/1``), validated on load."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from tidgap.model.calibration_tables import (
    OrderTimes,
    RecomputeTimes,
    StageTimes,
    path_of,
    stage_times,
)
from tidgap.model.errors import InputError
from tidgap.model.fileio import parse_model, read_json, refuse_null_keys, require_file_name
from tidgap.model.numbers import MAX_COUNT
from tidgap.model.text import printable, without_surrogates
from tidgap.model.timefn import Bytes, Duration, PositiveBytes, Samples, StrictModel, TimeFunction

PROBLEM_FORMAT = "tidgap.problem/1"
#: The largest sample count in a problem (``batch_size``, caps, table sizes): sizes are
#: int32 or int64 in the array code.
MAX_SAMPLES = MAX_COUNT
#: Every time value, and the longest iteration any plan could take (the sum over every
#: stage and link of ``U`` times the largest value of each time function, plus the tails),
#: must be below this, in the problem's time unit: sums and ratios stay finite.
MAX_TIME = 1e300
#: The shortest iteration a problem file may allow, in its time unit (see
#: :func:`check_takes_time`): throughputs and speedups stay finite.
MIN_ITERATION = 1e-6
#: The most bytes a stage may hold, ``batch_size * activation_bytes``: memory figures and
#: their sums stay finite.
MAX_BYTES = 1e300

JsonPath = tuple[str | int, ...]


class Stage(StrictModel):
    """One pipeline stage: compute times per microbatch size, caps in samples, tail time;
    optionally the bytes it holds per sample between forward and backward, and a limit on
    them (bytes)."""

    name: str | None = None
    forward: TimeFunction
    backward: TimeFunction
    max_microbatch: Samples | None = None
    max_microbatch_backward: Samples | None = None
    tail: Duration = 0.0
    activation_bytes: Bytes | None = None
    memory_limit: PositiveBytes | None = None


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
    #: The usable per-stage entries of ``source.calibration``, by key.
    _calibration: dict[str, list[Any]] = PrivateAttr(default_factory=dict)
    _unused_calibration: list[str] = PrivateAttr(default_factory=list)

    @property
    def recompute_times(self) -> list[RecomputeTimes] | None:
        """Per stage, its op times when it recomputes, as ``tidgap calibrate`` measured
        them (``source.calibration.recompute``, :mod:`tidgap.model.calibration_tables`);
        ``None`` when the problem has none usable."""
        return self._calibration.get(RecomputeTimes.KEY)

    @property
    def order_times(self) -> list[OrderTimes] | None:
        """Per stage, its op times that depend on the op before them, as ``tidgap
        calibrate`` measured them (``source.calibration.order``,
        :mod:`tidgap.model.calibration_tables`); ``None`` when the problem has none usable."""
        return self._calibration.get(OrderTimes.KEY)

    @property
    def profiled_with_recompute(self) -> bool:
        """Whether ``tidgap profile --recompute`` timed the backwards (``source.timing.
        recompute``): then every backward time already includes its forward."""
        timing = self.source_fields.get("timing")
        return isinstance(timing, dict) and timing.get("recompute") is True

    def recomputing_costs(
        self, s: int, largest: tuple[int, int] | None = None
    ) -> tuple[list[TimeFunction], list[TimeFunction]]:
        """The time functions whose sums price stage ``s``'s forward and backward ops when
        it recomputes (samples -> the problem's time unit): as ``tidgap calibrate``
        measured them where the problem has them; else the stage's ``forward``, and its
        ``forward`` plus ``backward`` for a backward (only its ``backward`` when profiled
        with ``--recompute``: the forward is in it). With ``largest`` (the largest forward
        and backward, samples, they will be asked for), :class:`InputError` on stage ``s``
        unless they cover those sizes (a backward runs the forward again on its samples: a
        backward cap above the forward's table asks that table for sizes it lacks)."""
        stage = self.stages[s]
        if self.recompute_times is not None:
            measured = self.recompute_times[s]
            costs = [measured.forward], [measured.backward]
        elif self.profiled_with_recompute:
            costs = [stage.forward], [stage.backward]
        else:
            costs = [stage.forward], [stage.forward, stage.backward]
        if largest is not None:
            self._require_covering(s, largest, costs)
        return costs

    def _require_covering(
        self, s: int, largest: tuple[int, int], costs: tuple[list[TimeFunction], ...]
    ) -> None:
        """:class:`InputError` on stage ``s`` unless the recomputing forwards' and backwards'
        ``costs`` cover sizes up to ``largest`` (samples)."""
        for op, asked, functions in zip(("forwards", "backwards"), largest, costs, strict=True):
            for function in functions:
                if not function.covers(min(self.unit, asked), asked):
                    low, high = function.domain
                    raise InputError(
                        f"priced as tidgap run runs it, its recomputing {op} take a table of "
                        f"sizes {low:g}..{high:g} at up to {asked} samples (a recomputing "
                        "backward runs the forward again on its samples): extend the table, "
                        "calibrate (tidgap calibrate), or keep the backward within the "
                        "forward's sizes (max_microbatch_backward)",
                        ("stages", s),
                    )

    @property
    def unused_calibration(self) -> list[str]:
        """Why a ``source.calibration`` entry the problem carries is not used, a line each
        naming the field: ``source`` is free-form (formats.md), so a malformed entry is
        kept as it is and left out, not refused."""
        return list(self._unused_calibration)

    @property
    def batch_statistics_layers(self) -> list[str]:
        """The model's layers that normalise by their batch's statistics in train mode
        (a ``BatchNorm``), as ``tidgap profile`` records them (``source.batch_statistics.
        layers``: ``name (kind)``, escaped here): a search recomputes on no stage of such a
        problem (:func:`tidgap.optimize.backward_rules.admitted_rule`). Empty where none is
        recorded, or the record is not a list of names (``source`` is free-form)."""
        record = self.source_fields.get("batch_statistics")
        layers = record.get("layers") if isinstance(record, dict) else None
        if not isinstance(layers, list) or not all(isinstance(name, str) for name in layers):
            return []
        return [printable(name) for name in layers]

    @property
    def source_fields(self) -> dict[str, Any]:
        """``source`` when it is an object (as ``tidgap profile`` records it), else ``{}``."""
        return self.source if isinstance(self.source, dict) else {}

    @classmethod
    def from_dict(cls, data: Any, default_name: str | None = None) -> Problem:
        """Validate a decoded ``tidgap.problem/1`` document; raise :class:`InputError`."""
        refuse_null_keys(data, frozenset({"source"}))
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
        """Display name of stage ``s``, non-printable characters escaped
        (:func:`tidgap.model.text.printable`)."""
        return printable(self.stages[s].name or f"s{s}")

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

    def time_functions(self) -> list[tuple[JsonPath, TimeFunction, int]]:
        """Every time function with its JSON path and the largest size it can be asked for
        (model.md, Inputs): ``Tf_s``, ``Tb_s`` per stage, then ``Cf_s``, ``Cb_s`` per link."""
        functions: list[tuple[JsonPath, TimeFunction, int]] = []
        for s, stage in enumerate(self.stages):
            functions.append((("stages", s, "forward"), stage.forward, self.forward_cap(s)))
            functions.append((("stages", s, "backward"), stage.backward, self.backward_cap(s)))
        for s, link in enumerate(self.links):
            functions.append((("links", s, "forward"), link.forward, self.forward_cap(s)))
            functions.append((("links", s, "backward"), link.backward, self.backward_cap(s + 1)))
        return functions

    def _entry_functions(
        self, kind: type[StageTimes], entries: list[StageTimes]
    ) -> list[tuple[JsonPath, TimeFunction, int]]:
        """The time functions of ``kind``'s per-stage ``entries``, as
        :meth:`time_functions` gives the stages'."""
        functions = []
        for s, entry in enumerate(entries):
            for name, function, way in entry.functions():
                cap = self.forward_cap(s) if way == "forward" else self.backward_cap(s)
                functions.append(((*path_of(kind), s, name), function, cap))
        return functions

    def _load_calibration(self) -> None:
        """Keep each kind of ``source.calibration`` entry that is usable: well formed
        (:func:`~tidgap.model.calibration_tables.stage_times`) and passing the checks every
        time function passes (table sizes, coverage, time scale); note why the others
        are left out (:attr:`unused_calibration`)."""
        for kind in (RecomputeTimes, OrderTimes):
            try:
                entries = stage_times(self.source, kind, self.num_stages)
                if entries is None:
                    continue
                functions = self._entry_functions(kind, entries)
                self._check_table_sizes([(path, function) for path, function, _ in functions])
                self._check_coverage(functions)
                self._check_time_scale(functions)
            except InputError as error:
                self._unused_calibration.append(f"{error}: not used")
                continue
            self._calibration[kind.KEY] = entries

    def longest_iteration_parts(
        self, extra: Sequence[tuple[JsonPath, TimeFunction, int]] = ()
    ) -> list[tuple[JsonPath, float]]:
        """An upper bound on the iteration time of every plan and baseline, as its parts
        with their JSON paths: each stage's tail, and ``U`` times the largest value of each
        time function (a stage or link runs at most ``U`` microbatches per direction), and
        of each of ``extra`` (:meth:`time_functions`' items ops may take instead)."""
        parts: list[tuple[JsonPath, float]] = [
            (("stages", s, "tail"), stage.tail) for s, stage in enumerate(self.stages)
        ]
        parts += [
            (path, self.num_units * time_range(function, self.unit, largest)[1])
            for path, function, largest in [*self.time_functions(), *extra]
        ]
        return parts

    def least_iteration(self) -> float:
        """A lower bound on the iteration time of every plan and baseline.

        Any schedule runs on each stage at least one forward, one backward and the tail,
        and sends at least one microbatch each way over each link, so its iteration takes
        at least the largest of ``tail_s + least Tf_s + least Tb_s`` and of each link's
        least ``Cf_s`` and least ``Cb_s`` (least over the sizes each can be asked for).
        """
        least = {
            path: time_range(function, self.unit, largest)[0]
            for path, function, largest in self.time_functions()
        }
        stages = [
            stage.tail + least[("stages", s, "forward")] + least[("stages", s, "backward")]
            for s, stage in enumerate(self.stages)
        ]
        return max(stages + [time for path, time in least.items() if path[0] == "links"])

    @model_validator(mode="after")
    def _consistent(self) -> Problem:
        self._check_sample_counts()
        if not self.time_unit.isprintable():
            raise InputError(f"must be printable text (got {self.time_unit!r})", ("time_unit",))
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
        self._check_memory_fields()
        self._check_coverage(self.time_functions())
        self._check_time_scale()
        self._load_calibration()
        return self

    def _check_memory_fields(self) -> None:
        """``activation_bytes`` on every stage or on none; ``memory_limit`` only with it."""
        given = [stage.activation_bytes is not None for stage in self.stages]
        for s, stage in enumerate(self.stages):
            if any(given) and not given[s]:
                first = given.index(True)
                raise InputError(
                    f"missing: activation_bytes goes on every stage or on none "
                    f"(stage {first} has it)",
                    ("stages", s, "activation_bytes"),
                )
            if stage.memory_limit is not None and not given[s]:
                raise InputError(
                    "needs activation_bytes (on every stage)", ("stages", s, "memory_limit")
                )
            if given[s] and stage.activation_bytes * self.batch_size > MAX_BYTES:
                raise InputError(
                    f"{stage.activation_bytes:g} bytes per sample times batch_size "
                    f"{self.batch_size} exceeds {MAX_BYTES:g} bytes",
                    ("stages", s, "activation_bytes"),
                )

    @property
    def has_memory(self) -> bool:
        """Whether the stages give ``activation_bytes`` (then peak memory is in bytes)."""
        return self.stages[0].activation_bytes is not None

    def _check_sample_counts(self) -> None:
        """``batch_size``, the caps and the table sizes are at most :data:`MAX_SAMPLES`."""
        counts: list[tuple[JsonPath, int | None]] = [(("batch_size",), self.batch_size)]
        for s, stage in enumerate(self.stages):
            for key in ("max_microbatch", "max_microbatch_backward"):
                counts.append((("stages", s, key), getattr(stage, key)))
        functions: list[tuple[JsonPath, TimeFunction]] = [
            (("stages", s, key), getattr(stage, key))
            for s, stage in enumerate(self.stages)
            for key in ("forward", "backward")
        ]
        functions += [
            (("links", s, key), getattr(link, key))
            for s, link in enumerate(self.links)
            for key in ("forward", "backward")
        ]
        for path, count in counts:
            if count is not None and count > MAX_SAMPLES:
                raise InputError(f"must be <= {MAX_SAMPLES} (got {count})", path)
        self._check_table_sizes(functions)

    @staticmethod
    def _check_table_sizes(functions: list[tuple[JsonPath, TimeFunction]]) -> None:
        """The table sizes of ``functions`` (with their JSON paths) are at most
        :data:`MAX_SAMPLES`."""
        for path, function in functions:
            for i, size in enumerate(function.table.sizes if function.table else []):
                if size > MAX_SAMPLES:
                    raise InputError(
                        f"must be <= {MAX_SAMPLES} (got {size})", (*path, "table", "sizes", i)
                    )

    def _check_coverage(self, functions: list[tuple[JsonPath, TimeFunction, int]]) -> None:
        """Every table of ``functions`` (:meth:`time_functions`' items) covers the sizes its
        function can be asked for (model.md, Inputs)."""
        for path, function, largest in functions:
            if not function.covers(self.unit, largest):
                low, high = function.domain
                raise InputError(
                    f"table covers sizes {low:g}..{high:g} but sizes {self.unit}..{largest} "
                    "can be asked for",
                    (*path, "table", "sizes"),
                )

    def _check_time_scale(self, extra: Sequence[tuple[JsonPath, TimeFunction, int]] = ()) -> None:
        """Every time value, and the longest iteration any plan could take, is below
        :data:`MAX_TIME` (then no sum, bound or tick computed from the problem overflows);
        ``extra``: more functions (:meth:`time_functions`' items) that ops may take
        instead, counted in both."""
        functions = [*self.time_functions(), *extra]
        values: list[tuple[JsonPath, float]] = [
            (("stages", s, "tail"), stage.tail) for s, stage in enumerate(self.stages)
        ]
        for path, function, _ in functions:
            if function.affine is not None:
                values += [
                    ((*path, "affine", key), getattr(function.affine, key))
                    for key in ("base", "per_sample")
                ]
            else:
                values += [
                    ((*path, "table", "times", i), t) for i, t in enumerate(function.table.times)
                ]
        for path, value in values:
            if value >= MAX_TIME:
                raise InputError(f"must be < {MAX_TIME:g} (got {value:g})", path)
        parts = self.longest_iteration_parts(extra)
        if sum(value for _, value in parts) >= MAX_TIME:
            path = max(parts, key=lambda part: part[1])[0]
            raise InputError(
                f"times too large: an iteration could take longer than {MAX_TIME:g} "
                f"{self.time_unit}",
                path,
            )


def time_range(function: TimeFunction, unit: int, largest: int) -> tuple[float, float]:
    """The least and the largest time of ``function`` over the sizes ``unit, 2 unit, ...,
    largest`` (samples; the table must cover them). Exact, in ``O(points)`` evaluations: a
    table is linear between its points, so both extremes lie at an end or at a multiple of
    ``unit`` next to a point."""
    sizes = {unit, largest}
    if function.table is not None:
        for point in function.table.sizes:
            if unit <= point <= largest:
                below = point // unit * unit
                sizes |= {below, min(below + unit, largest)}
    times = [function(size) for size in sizes]
    return min(times), max(times)


def check_takes_time(problem: Problem) -> None:
    """Raise :class:`InputError` unless every plan and baseline of ``problem`` takes at
    least :data:`MIN_ITERATION` (:meth:`Problem.least_iteration`), so that throughputs and
    speedups are finite."""
    if problem.least_iteration() < MIN_ITERATION:
        raise InputError(
            f"every plan could take less than {MIN_ITERATION:g} {problem.time_unit}: "
            "no stage or link takes that long at every size",
            ("stages",),
        )


def problem_path(spec: str | os.PathLike[str]) -> Path:
    """The file of a problem given as a path or as the text ``example:NAME`` (a built-in
    one; a ``Path`` of that name is a file); ``TypeError`` for anything else."""
    from tidgap.model.examples import EXAMPLE_PREFIX, example_path

    if isinstance(spec, str) and spec.startswith(EXAMPLE_PREFIX):
        return example_path(spec[len(EXAMPLE_PREFIX) :])
    return Path(require_path(spec, "spec"))


def load_problem(spec: str | os.PathLike[str]) -> Problem:
    """Load a problem from a file path, or a built-in one named ``example:NAME``."""
    shown = str(require_path(spec, "spec"))
    require_file_name(shown)
    try:
        path = problem_path(spec)
        problem = Problem.from_dict(read_json(path), default_name=without_surrogates(path.stem))
        check_takes_time(problem)
        return problem
    except InputError as error:
        raise error.within(shown) from None


def require_path(value: Any, name: str) -> str | os.PathLike[str]:
    """``value`` when it is a path (text or ``os.PathLike``); a ``TypeError`` naming
    ``name`` otherwise (``open(None)``'s message named no argument)."""
    if isinstance(value, (str, os.PathLike)):
        return value
    raise TypeError(f"{name} must be a file path, str or os.PathLike (got {type(value).__name__})")


def require_problem(value: Any, name: str = "problem") -> Problem:
    """``value`` when it is a :class:`Problem`; a ``TypeError`` naming ``name`` and saying
    how to get one otherwise (an API argument of the wrong kind)."""
    if not isinstance(value, Problem):
        raise TypeError(
            f"{name} must be a tidgap.Problem (tidgap.load_problem(path)), not a "
            f"{type(value).__name__}"
        )
    return value
