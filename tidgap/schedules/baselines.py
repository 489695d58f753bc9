"""The baselines people run today: GPipe(m), 1F1B(m), asynchronous PipeDream, best of each.

All use one equal partition of the batch on every stage, in both directions
(``docs/model.md``, Baselines).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tidgap.model.errors import InputError
from tidgap.model.numbers import copied_list, integer_at_least
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem, require_problem
from tidgap.model.timefn import TimeFunction
from tidgap.schedules.flush import evaluate
from tidgap.schedules.ir import one_f_one_b_order
from tidgap.schedules.simulate import evaluate_order

#: The baselines in the row order of the compiled table (:func:`baseline_times`).
BASELINE_ROWS = ("gpipe", "1f1b", "pipedream")
#: Most steps of the baselines over every count (:func:`baseline_steps`) a problem may
#: need: about 20 s on 2 cores if every count were timed (:func:`best_baselines` times few
#: of them).
MAX_BASELINE_STEPS = 2 * 10**10


@dataclass(frozen=True)
class BaselineResult:
    """A baseline schedule with ``microbatches`` equal microbatches and its iteration time."""

    schedule: str
    microbatches: int
    iteration_time: float


def equal_sizes(units: int, count: int) -> list[int]:
    """``count`` sizes summing to ``units``: ``units = q*count + r``; the first ``r`` are
    ``q+1``, the others ``q``."""
    q, r = divmod(units, count)
    return [q + 1] * r + [q] * (count - r)


def equal_partition(problem: Problem, m: int) -> list[int]:
    """``m`` sizes in samples: :func:`equal_sizes` of ``U`` units, times the unit;
    :class:`InputError` on ``m`` unless ``1 <= m <= U``."""
    require_problem(problem)
    integer_at_least("m", m, None)
    if not 1 <= m <= problem.num_units:
        raise InputError(f"{m} is outside 1..{problem.num_units}", source="m")
    return _unit_sizes(problem, m)


def _unit_sizes(problem: Problem, m: int) -> list[int]:
    """:func:`equal_sizes` of ``U`` units into ``m`` (checked), in samples."""
    return [size * problem.unit for size in equal_sizes(problem.num_units, int(m))]


def largest_microbatch(problem: Problem, m: int | np.ndarray) -> int | np.ndarray:
    """The largest of ``m`` equal microbatches, ``ceil(U / m) * unit`` samples (``m >= 1``;
    element-wise for an array of counts)."""
    return -(-problem.num_units // m) * problem.unit


def least_feasible_count(problem: Problem) -> int:
    """The fewest equal microbatches that respect every cap: ``ceil(U / (cap / unit))``."""
    return -(-problem.num_units // (problem.common_cap() // problem.unit))


def feasible_microbatch_counts(problem: Problem) -> list[int]:
    """Every ``m`` in ``1..U`` whose equal partition respects every cap, ascending.

    The largest microbatch only shrinks as ``m`` grows, so they form a range up to ``U``.
    """
    require_problem(problem)
    return list(range(least_feasible_count(problem), problem.num_units + 1))


def require_feasible(problem: Problem, m: int, source: str = "microbatches") -> None:
    """Raise :class:`InputError` on ``source`` (``microbatches``, the command line's
    ``--microbatches``; the Python API's ``m``) if ``m`` is not a feasible count."""
    require_problem(problem)
    integer_at_least(source, m, None)
    if not 1 <= m <= problem.num_units:
        raise InputError(
            f"{m} is outside 1..{problem.num_units} (batch_size {problem.batch_size}, "
            f"unit {problem.unit})",
            source=source,
        )
    largest = largest_microbatch(problem, m)
    if largest > problem.common_cap():
        raise InputError(
            f"{m} microbatches of up to {largest} samples break a cap "
            f"(every stage accepts at most {problem.common_cap()})",
            source=source,
        )


def feasible_partition(problem: Problem, m: int, within_caps: bool = True) -> list[int]:
    """:func:`equal_partition` of a feasible ``m`` (:func:`require_feasible`, on ``m``):
    a baseline's sizes, within every stage's caps; without ``within_caps``, of any ``m``
    in ``1..U`` (for timing sizes past a stage's cap, as ``tidgap calibrate`` does)."""
    if not within_caps:
        return equal_partition(problem, m)
    require_feasible(problem, m, "m")
    return _unit_sizes(problem, m)


def gpipe_plan(problem: Problem, m: int, within_caps: bool = True) -> Plan:
    """GPipe(m) written as a UMPIPE plan: the same equal partition everywhere
    (:func:`feasible_partition`, ``within_caps`` as there)."""
    sizes = feasible_partition(problem, m, within_caps)
    return Plan.of([sizes] * problem.num_stages, [sizes] * problem.num_stages)


def gpipe(problem: Problem, m: int) -> float:
    """Iteration time of GPipe(m): the flush recurrences on the equal partition."""
    return evaluate(problem, gpipe_plan(problem, m)).iteration_time


def one_f_one_b_plan(problem: Problem, m: int, within_caps: bool = True) -> Plan:
    """1F1B(m) written as an ordered plan: the equal partition everywhere, each stage in
    its 1F1B order (:func:`tidgap.schedules.ir.one_f_one_b_order`; :func:`feasible_partition`,
    ``within_caps`` as there)."""
    sizes = feasible_partition(problem, m, within_caps)
    S = problem.num_stages
    return Plan.of([sizes] * S, [sizes] * S, order=list(one_f_one_b_order(S, m).stages))


def one_f_one_b(problem: Problem, m: int) -> float:
    """Iteration time of 1F1B(m): the event simulator on the 1F1B order."""
    plan = one_f_one_b_plan(problem, m)
    return evaluate_order(problem, plan.forward, plan.backward, plan.stage_order()).iteration_time


def pipedream(problem: Problem, m: int) -> float:
    """Time per mini-batch of asynchronous PipeDream in steady state: the busiest resource
    (:func:`feasible_partition`)."""
    sizes = feasible_partition(problem, m)
    busiest = max(
        sum(stage.forward(b) + stage.backward(b) for b in sizes) + stage.tail
        for stage in problem.stages
    )
    for link in problem.links:
        busiest = max(busiest, sum(link.forward(b) for b in sizes))
        busiest = max(busiest, sum(link.backward(b) for b in sizes))
    return busiest


#: How far (relative) a count's lower bound must lie above the best time found for
#: :func:`best_baselines` to skip it: far above the float64 rounding of sums over the up to
#: a few 1e5 ops per stage of a tractable problem (about 1e-11), far below any real gap.
BOUND_MARGIN = 1e-9
#: Counts of least lower bound per schedule that :func:`best_baselines` times first.
FIRST_COUNTS = 8


@dataclass(frozen=True)
class CountTables:
    """Each stage's and link's times at the large and the small microbatch of every count
    of ``ms`` (``(M,)``, ascending): ``forward``/``backward`` ``(2, S, M)``,
    ``forward_transfer``/``backward_transfer`` ``(2, S-1, M)`` (the sender's sizes), row 0
    the large size; ``tails`` ``(S,)``; in the problem's unit."""

    ms: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    forward_transfer: np.ndarray
    backward_transfer: np.ndarray
    tails: np.ndarray


def count_tables(problem: Problem, ms: np.ndarray) -> CountTables:
    """:class:`CountTables` of the feasible counts ``ms`` (ascending)."""
    sizes = np.stack([largest_microbatch(problem, ms), problem.num_units // ms * problem.unit])

    def times(functions: list[TimeFunction]) -> np.ndarray:
        """``(2, len(functions), M)``: each function of the large and the small size."""
        return np.array([[f.at(row) for f in functions] for row in sizes]).reshape(
            2, len(functions), len(ms)
        )

    stages, links = problem.stages, problem.links
    return CountTables(
        ms,
        times([stage.forward for stage in stages]),
        times([stage.backward for stage in stages]),
        times([link.forward for link in links]),
        times([link.backward for link in links]),
        np.asarray([stage.tail for stage in stages], dtype=np.float64),
    )


def baseline_times(problem: Problem, ms: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The counts ``ms`` (``(M,)``, ascending; default every feasible count) and the
    iteration time of each baseline of :data:`BASELINE_ROWS` with each count, ``(3, M)``
    float64 in the problem's unit.

    Compiled and batched over ``m``, equal bit for bit to the baselines' own functions
    (:func:`gpipe`, :func:`one_f_one_b`, :func:`pipedream`).
    """
    if ms is None:
        ms = np.asarray(feasible_microbatch_counts(problem), dtype=np.int64)
    return ms, _timed(count_tables(problem, ms), problem.num_units)


def _timed(tables: CountTables, num_units: int, wanted: np.ndarray | None = None) -> np.ndarray:
    """``(3, M)``: the baselines of :data:`BASELINE_ROWS` with each count of ``tables``;
    where ``wanted`` (``(3, M)`` bool) is given, only its entries, the others ``inf``."""
    from tidgap.fallback_cpu.setup_loops import baseline_times as compiled

    if not len(tables.ms):
        return np.empty((len(BASELINE_ROWS), 0))
    return compiled(
        tables.ms,
        tables.forward,
        tables.backward,
        tables.forward_transfer,
        tables.backward_transfer,
        tables.tails,
        num_units,
        wanted,
    )


def baseline_bounds(tables: CountTables, num_units: int) -> np.ndarray:
    """``(3, M)`` lower bounds on the rows of :func:`baseline_times` for each count (up to
    float64 rounding), in ``O(S M)``.

    GPipe and 1F1B: stage ``s`` starts when the first (large) microbatch has passed the
    stages before it, runs all its ops, and after its last backward (the last, small
    microbatch) the gradient passes back to stage 0 before stage 0's tail; the bound is the
    largest such chain over stages. PipeDream: its busiest resource, as products.
    """
    ms = tables.ms
    large = num_units % ms
    small = ms - large
    f, b = tables.forward, tables.backward
    cf, cb = tables.forward_transfer, tables.backward_transfer
    work = large * (f[0] + b[0]) + small * (f[1] + b[1])  # (S, M)
    zero = np.zeros((1, len(ms)))
    head = np.concatenate([zero, np.cumsum(f[0, :-1] + cf[0], axis=0)])
    back = np.concatenate([zero, np.cumsum(b[1, :-1] + cb[1], axis=0)])
    tails = tables.tails[:, None]
    chain = (head + work + np.maximum(tails, back + tables.tails[0])).max(axis=0)
    busiest = (work + tails).max(axis=0)
    for c in (cf, cb):
        if len(c[0]):
            busiest = np.maximum(busiest, (large * c[0] + small * c[1]).max(axis=0))
    return np.stack([chain, chain, busiest])


def baseline_steps(problem: Problem) -> int:
    """Recurrence steps of :func:`baseline_times`: ``S`` times the sum of every feasible
    count (each count ``m`` costs ``m`` steps per stage)."""
    first = least_feasible_count(problem)
    last = problem.num_units
    return problem.num_stages * (last * (last + 1) - first * (first - 1)) // 2


def tractable(problem: Problem) -> bool:
    """Whether the baselines over every feasible count take at most
    :data:`MAX_BASELINE_STEPS` steps (tens of seconds)."""
    return baseline_steps(problem) <= MAX_BASELINE_STEPS


def require_tractable(problem: Problem) -> None:
    """Raise :class:`InputError` on ``batch_size`` unless :func:`tractable`."""
    if not tractable(problem):
        steps = baseline_steps(problem)
        raise InputError(
            f"{problem.num_units} units on {problem.num_stages} stage(s): the baselines over "
            f"every microbatch count could need about {steps:.2g} steps, more than the "
            f"{MAX_BASELINE_STEPS:.0g} tidgap runs; use a coarser unit",
            ("batch_size",),
        )


def best_baselines(problem: Problem, counts: np.ndarray | None = None) -> dict[str, BaselineResult]:
    """For each schedule, the feasible ``m`` with the least iteration time (ties: smallest m);
    of ``counts`` only (``(M,)`` ascending feasible counts, not empty) where given.

    Exact without timing every count: the :data:`FIRST_COUNTS` counts of least
    :func:`baseline_bounds` per schedule are timed first, then every count whose bound does
    not exceed a schedule's best time so far (by more than :data:`BOUND_MARGIN`); the others
    cannot win: each schedule times only its own such counts, each (schedule, count) once.
    Refuses (:func:`require_tractable`) problems with too many units to try every ``m``;
    :class:`InputError` on ``counts`` unless they are as said.
    """
    require_problem(problem)
    require_tractable(problem)
    U = problem.num_units
    if counts is None:
        counts = np.asarray(feasible_microbatch_counts(problem), np.int64)
    else:
        counts = _checked_counts(problem, counts)
    tables = count_tables(problem, counts)
    bounds = baseline_bounds(tables, U)
    first = np.unique(np.argsort(bounds, axis=1, kind="stable")[:, :FIRST_COUNTS])
    table = np.full(bounds.shape, np.inf)
    table[:, first] = _timed(_subset(tables, first), U)
    incumbents = table.min(axis=1)
    # Every count that can still win a schedule, less those timed already.
    wanted = bounds <= incumbents[:, None] * (1 + BOUND_MARGIN)
    wanted[:, first] = False
    rest = np.flatnonzero(wanted.any(axis=0))
    if len(rest):
        table[:, rest] = _timed(_subset(tables, rest), U, wanted[:, rest])  # others inf
    best: dict[str, BaselineResult] = {}
    for schedule, row in zip(BASELINE_ROWS, table, strict=True):
        i = int(np.argmin(row))  # the first of the least: the smallest count
        best[schedule] = BaselineResult(schedule, int(tables.ms[i]), float(row[i]))
    return best


def _checked_counts(problem: Problem, counts: Any) -> np.ndarray:
    """``counts`` as an ``(M,)`` int64 array; :class:`InputError` on ``counts`` unless
    they are feasible counts (:func:`feasible_microbatch_counts`), ascending, not empty."""
    listed = copied_list(counts)
    if not isinstance(listed, list) or not listed or any(type(m) is not int for m in listed):
        raise InputError(f"must be a non-empty list of integers (got {counts!r})", source="counts")
    least, most = least_feasible_count(problem), problem.num_units
    if any(not least <= m <= most for m in listed) or listed != sorted(set(listed)):
        raise InputError(
            f"must be ascending feasible counts, each in {least}..{most} (got {listed})",
            source="counts",
        )
    return np.asarray(listed, np.int64)


def _subset(tables: CountTables, keep: np.ndarray) -> CountTables:
    """``tables`` for the counts at the ascending positions ``keep`` only."""
    return CountTables(
        tables.ms[keep],
        tables.forward[..., keep],
        tables.backward[..., keep],
        tables.forward_transfer[..., keep],
        tables.backward_transfer[..., keep],
        tables.tails,
    )
