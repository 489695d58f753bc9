"""The baselines people run today: GPipe(m), 1F1B(m), asynchronous PipeDream, best of each.

All use one equal partition of the batch on every stage, in both directions
(``docs/model.md``, Baselines).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tidgap.model.errors import InputError
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.model.timefn import TimeFunction
from tidgap.schedules.flush import evaluate
from tidgap.schedules.ir import one_f_one_b_order
from tidgap.schedules.simulate import evaluate_order

#: The baselines in the row order of the compiled table (:func:`baseline_times`).
BASELINE_ROWS = ("gpipe", "1f1b", "pipedream")
#: Most recurrence steps :func:`best_baselines` takes on (about 20 s on 2 cores).
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
    if not 1 <= m <= problem.num_units:
        raise InputError(f"{m} is outside 1..{problem.num_units}", source="m")
    return [size * problem.unit for size in equal_sizes(problem.num_units, m)]


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
    return list(range(least_feasible_count(problem), problem.num_units + 1))


def require_feasible(problem: Problem, m: int) -> None:
    """Raise :class:`InputError` (on ``--microbatches``) if ``m`` is not a feasible count."""
    if not 1 <= m <= problem.num_units:
        raise InputError(
            f"{m} is outside 1..{problem.num_units} (batch_size {problem.batch_size}, "
            f"unit {problem.unit})",
            source="--microbatches",
        )
    largest = largest_microbatch(problem, m)
    if largest > problem.common_cap():
        raise InputError(
            f"{m} microbatches of up to {largest} samples break a cap "
            f"(every stage accepts at most {problem.common_cap()})",
            source="--microbatches",
        )


def gpipe_plan(problem: Problem, m: int) -> Plan:
    """GPipe(m) written as a UMPIPE plan: the same equal partition everywhere."""
    sizes = equal_partition(problem, m)
    return Plan.of([sizes] * problem.num_stages, [sizes] * problem.num_stages)


def gpipe(problem: Problem, m: int) -> float:
    """Iteration time of GPipe(m): the flush recurrences on the equal partition."""
    return evaluate(problem, gpipe_plan(problem, m)).iteration_time


def one_f_one_b_plan(problem: Problem, m: int) -> Plan:
    """1F1B(m) written as an ordered plan: the equal partition everywhere, each stage in
    its 1F1B order (:func:`tidgap.schedules.ir.one_f_one_b_order`)."""
    sizes = equal_partition(problem, m)
    S = problem.num_stages
    return Plan.of([sizes] * S, [sizes] * S, order=list(one_f_one_b_order(S, m).stages))


def one_f_one_b(problem: Problem, m: int) -> float:
    """Iteration time of 1F1B(m): the event simulator on the 1F1B order."""
    plan = one_f_one_b_plan(problem, m)
    return evaluate_order(problem, plan.forward, plan.backward, plan.stage_order()).iteration_time


def pipedream(problem: Problem, m: int) -> float:
    """Time per mini-batch of asynchronous PipeDream in steady state: the busiest resource."""
    sizes = equal_partition(problem, m)
    busiest = max(
        sum(stage.forward(b) + stage.backward(b) for b in sizes) + stage.tail
        for stage in problem.stages
    )
    for link in problem.links:
        busiest = max(busiest, sum(link.forward(b) for b in sizes))
        busiest = max(busiest, sum(link.backward(b) for b in sizes))
    return busiest


def baseline_times(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Every feasible count ``ms`` (``(M,)``, ascending) and the iteration time of each
    baseline of :data:`BASELINE_ROWS` with each count, ``(3, M)`` float64 in the problem's unit.

    Compiled and batched over ``m``, equal bit for bit to the baselines' own functions
    (:func:`gpipe`, :func:`one_f_one_b`, :func:`pipedream`).
    """
    from tidgap.fallback_cpu.setup_loops import baseline_times as compiled

    U, unit = problem.num_units, problem.unit
    ms = np.asarray(feasible_microbatch_counts(problem), dtype=np.int64)
    sizes = np.stack([largest_microbatch(problem, ms), U // ms * unit])  # (2, M)

    def times(functions: list[TimeFunction]) -> np.ndarray:
        """``(2, len(functions), M)``: each function of the large and the small size."""
        return np.array([[f.at(row) for f in functions] for row in sizes]).reshape(
            2, len(functions), len(ms)
        )

    stages, links = problem.stages, problem.links
    table = compiled(
        ms,
        times([stage.forward for stage in stages]),
        times([stage.backward for stage in stages]),
        times([link.forward for link in links]),
        times([link.backward for link in links]),
        np.asarray([stage.tail for stage in stages], dtype=np.float64),
        U,
    )
    return ms, table


def baseline_steps(problem: Problem) -> int:
    """Recurrence steps of :func:`baseline_times`: ``S`` times the sum of every feasible
    count (each count ``m`` costs ``m`` steps per stage)."""
    first = least_feasible_count(problem)
    last = problem.num_units
    return problem.num_stages * (last * (last + 1) - first * (first - 1)) // 2


def require_tractable(problem: Problem) -> None:
    """Raise :class:`InputError` on ``batch_size`` if the best baselines over every feasible
    count would take more than :data:`MAX_BASELINE_STEPS` steps (tens of seconds)."""
    steps = baseline_steps(problem)
    if steps > MAX_BASELINE_STEPS:
        raise InputError(
            f"{problem.num_units} units on {problem.num_stages} stage(s): the best baselines "
            f"over every microbatch count need about {steps:.2g} steps, more than the "
            f"{MAX_BASELINE_STEPS:.0g} tidgap runs; use a coarser unit",
            ("batch_size",),
        )


def best_baselines(problem: Problem) -> dict[str, BaselineResult]:
    """For each schedule, the feasible ``m`` with the least iteration time (ties: smallest m).

    Refuses (:func:`require_tractable`) problems with too many units to try every ``m``.
    """
    require_tractable(problem)
    ms, table = baseline_times(problem)
    best: dict[str, BaselineResult] = {}
    for schedule, row in zip(BASELINE_ROWS, table, strict=True):
        i = int(np.argmin(row))
        best[schedule] = BaselineResult(schedule, int(ms[i]), float(row[i]))
    return best
