"""Integer ticks: every time function tabulated per size, in a tick chosen from the problem.

Fast backends compute in int64 ticks, so max and + are exact and every evaluation
order (NumPy, Numba, CUDA) gives the same answer. The tick is a power of two in the
problem's time unit, chosen so that no iteration time exceeds ``2**50`` ticks.

An entry larger than :data:`CEILING_FACTOR` times the fastest serial equal plan (every op
of ``m`` equal microbatches one after another, the best ``m``, then every tail; a bound on
that plan's time), or times the time of a plan the caller names (one a memory limit
admits, where it rules that equal plan out), is clamped to that ceiling,
so that one absurd entry (``1e14`` ms marking a size unusable) does not make the tick
coarser than the ops: a plan holding such an op is slower than that plan either way,
and searches report times from the reference simulator, not from ticks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tidgap.model.problem import Problem
from tidgap.model.timefn import TimeFunction

#: No iteration time may exceed this many ticks (far from int64's 2**63, exact as float64).
TICK_BUDGET = 2**50

#: Entries above this many times :func:`serial_bound` plus the tails are clamped to it
#: (module docstring).
CEILING_FACTOR = 64

#: How plans are priced. ``"model"``: model.md, every op at its stage's ``Tf_s`` / ``Tb_s``.
#: ``"run"``: as ``tidgap run`` runs them (:mod:`tidgap.runtime.pricing`): a stage whose
#: backward boundaries are all forward boundaries runs each backward over the stored graphs
#: of the forward chunks it covers (the sum of their ``Tb_s``), and where the problem was
#: calibrated with order tables (:attr:`~tidgap.model.problem.Problem.order_times`) a
#: forward right after a backward, and the last stage's backward right after its own
#: forward, at those tables' times; any other stage recomputes (its ops priced by
#: :meth:`~tidgap.model.problem.Problem.recomputing_costs`).
MODEL_PRICING, RUN_PRICING = "model", "run"
PRICINGS = (MODEL_PRICING, RUN_PRICING)


@dataclass(frozen=True)
class TickedProblem:
    """A problem tabulated in ticks, indexed by microbatch size in units (``0..U``).

    Every table has entry 0 equal to 0 (an empty microbatch is free); entries above a
    stage's cap are 0 too and are never used by feasible individuals.

    - ``forward_compute``, ``backward_compute``: ``(S, U+1)`` int64, ``Tf_s``, ``Tb_s``;
    - ``forward_transfer``, ``backward_transfer``: ``(S-1, U+1)`` int64, ``Cf_s``, ``Cb_s``
      (``Cb_s`` indexed by the sender's size, stage ``s+1``);
    - ``tails``: ``(S,)`` int64; ``forward_caps``, ``backward_caps``: ``(S,)`` int64 in units;
    - ``recompute_forward``, ``recompute_backward``: ``(S, U+1)`` int64, a recomputing
      stage's ops (:meth:`~tidgap.model.problem.Problem.recomputing_costs`), when the
      problem is priced as ``tidgap run`` runs it (:data:`RUN_PRICING`); else ``None``;
    - ``forward_after_backward``, ``backward_after_forward``: ``(S, U+1)`` int64, a
      stored-graph stage's forward right after one of its backwards, and the last stage's
      backward right after the forward of the same samples, when run-priced and the
      problem has order tables (:attr:`~tidgap.model.problem.Problem.order_times`); else
      ``None`` (those ops cost ``Tf_s`` / ``Tb_s``: :meth:`run_tables`).
    """

    tick: float
    num_units: int
    unit: int
    forward_compute: np.ndarray
    backward_compute: np.ndarray
    forward_transfer: np.ndarray
    backward_transfer: np.ndarray
    tails: np.ndarray
    forward_caps: np.ndarray
    backward_caps: np.ndarray
    recompute_forward: np.ndarray | None = None
    recompute_backward: np.ndarray | None = None
    forward_after_backward: np.ndarray | None = None
    backward_after_forward: np.ndarray | None = None

    @property
    def run_priced(self) -> bool:
        """Whether plans are priced as ``tidgap run`` runs them (:data:`RUN_PRICING`)."""
        return self.recompute_forward is not None

    def run_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The four ``(S, U+1)`` int64 tables a run-priced evaluator reads:
        ``recompute_forward``, ``recompute_backward``, ``forward_after_backward`` and
        ``backward_after_forward``, each contiguous; ``forward_compute`` or
        ``backward_compute`` in place of one that is ``None`` (the order tables of a problem
        without any: the same ticks; the recompute tables under model pricing: unread)."""
        fallback = (self.forward_compute, self.backward_compute) * 2
        tables = (
            self.recompute_forward,
            self.recompute_backward,
            self.forward_after_backward,
            self.backward_after_forward,
        )
        return tuple(  # type: ignore[return-value]
            np.ascontiguousarray(default if table is None else table, dtype=np.int64)
            for table, default in zip(tables, fallback, strict=True)
        )

    @property
    def num_stages(self) -> int:
        """``S``."""
        return len(self.tails)

    def to_time(self, ticks: np.ndarray | int) -> np.ndarray | float:
        """Ticks back to the problem's time unit (exact: the tick is a power of two)."""
        return ticks * self.tick


def _tabulate(function: TimeFunction, unit: int, cap_units: int, num_units: int) -> np.ndarray:
    """``[0, t(unit), t(2 unit), ..., t(cap)]`` padded with zeros to ``U + 1`` entries."""
    values = np.zeros(num_units + 1)
    values[1 : cap_units + 1] = function.at(unit * np.arange(1, cap_units + 1, dtype=np.int64))
    return values


def choose_tick(upper_bound: float) -> float:
    """The smallest power of two ``tick`` with ``upper_bound / tick <= TICK_BUDGET``."""
    if upper_bound <= 0:
        return 1.0
    return 2.0 ** math.ceil(math.log2(upper_bound / TICK_BUDGET))


def serial_bound(rows: np.ndarray, cap: int) -> float:
    """The least time over ``m = 1..U`` of the ops of ``m`` equal microbatches (sizes
    ``ceil(U/m)`` and ``floor(U/m)`` units, none over ``cap`` units) run one after another:
    ``rows`` ``(R, U+1)`` are every table a plan reads once per microbatch (each stage's
    ``Tf_s`` and ``Tb_s``, each link's ``Cf_s`` and ``Cb_s``), tails not counted. Infinite
    where no ``m`` fits ``cap``."""
    U = rows.shape[1] - 1
    per_size = rows.sum(axis=0)
    m = np.arange(1, U + 1)
    small, large = U // m, U % m
    fits = small + (large > 0) <= cap
    if not fits.any():
        return math.inf
    totals = (m - large) * per_size[small] + large * per_size[np.minimum(small + 1, U)]
    return float(totals[fits].min())


def tick_problem(
    problem: Problem, pricing: str = MODEL_PRICING, admitted: float | None = None
) -> TickedProblem:
    """Tabulate ``problem`` in integer ticks (see the module docstring), its ops priced by
    ``pricing`` (:data:`PRICINGS`). ``admitted``: the time (in the problem's time unit, so
    priced) of a plan that every plan the caller compares may be compared with (within
    every memory limit it searches under), which then sets the ceiling of the entries
    instead of the serial equal plan (``inf``: no ceiling)."""
    if pricing not in PRICINGS:
        raise ValueError(f"pricing must be one of {PRICINGS}, not {pricing!r}")
    S, U, unit = problem.num_stages, problem.num_units, problem.unit
    fcaps = [problem.forward_cap(s) // unit for s in range(S)]
    bcaps = [problem.backward_cap(s) // unit for s in range(S)]
    tables = {
        "forward_compute": [
            _tabulate(st.forward, unit, fcaps[s], U) for s, st in enumerate(problem.stages)
        ],
        "backward_compute": [
            _tabulate(st.backward, unit, bcaps[s], U) for s, st in enumerate(problem.stages)
        ],
        "forward_transfer": [
            _tabulate(ln.forward, unit, fcaps[s], U) for s, ln in enumerate(problem.links)
        ],
        "backward_transfer": [
            _tabulate(ln.backward, unit, bcaps[s + 1], U) for s, ln in enumerate(problem.links)
        ],
    }
    if pricing == RUN_PRICING:
        costs = [problem.recomputing_costs(s, (fcaps[s] * unit, bcaps[s] * unit)) for s in range(S)]
        tables["recompute_forward"] = [
            sum(_tabulate(f, unit, fcaps[s], U) for f in forward)
            for s, (forward, _) in enumerate(costs)
        ]
        tables["recompute_backward"] = [
            sum(_tabulate(f, unit, bcaps[s], U) for f in backward)
            for s, (_, backward) in enumerate(costs)
        ]
        if problem.order_times is not None:
            measured = problem.order_times
            tables["forward_after_backward"] = [
                _tabulate(m.forward_after_backward, unit, fcaps[s], U)
                for s, m in enumerate(measured)
            ]
            tables["backward_after_forward"] = [
                _tabulate(m.backward_after_forward, unit, bcaps[s], U)
                for s, m in enumerate(measured)
            ]
    tails = [stage.tail for stage in problem.stages]
    if admitted is None:
        once = ("forward_compute", "backward_compute", "forward_transfer", "backward_transfer")
        per_microbatch = np.concatenate([np.reshape(tables[name], (-1, U + 1)) for name in once])
        admitted = serial_bound(per_microbatch, min(fcaps + bcaps)) + sum(tails)
    ceiling = CEILING_FACTOR * admitted
    if ceiling > 0:  # else every plan of the best m takes no time: nothing to clamp to
        tables = {name: [np.minimum(row, ceiling) for row in rows] for name, rows in tables.items()}
    # Any plan's iteration time is at most the sum of every operation and transfer it
    # can contain (each has at most U microbatches per stage and direction).
    bound = sum(tails) + sum(U * float(row.max()) for rows in tables.values() for row in rows)
    tick = choose_tick(bound)

    def in_ticks(rows: list[np.ndarray]) -> np.ndarray:
        array = np.rint(np.asarray(rows, dtype=np.float64).reshape(len(rows), U + 1) / tick)
        return array.astype(np.int64)

    return TickedProblem(
        tick=tick,
        num_units=U,
        unit=unit,
        tails=np.rint(np.asarray(tails) / tick).astype(np.int64),
        forward_caps=np.asarray(fcaps, dtype=np.int64),
        backward_caps=np.asarray(bcaps, dtype=np.int64),
        **{name: in_ticks(rows) for name, rows in tables.items()},
    )


def stage_link_ticks(ticked: TickedProblem) -> tuple[np.ndarray, np.ndarray]:
    """``(S, U+1)`` int64 link ticks of each stage's forwards (to ``s+1``) and backwards (to
    ``s-1``): a zero row for the last stage's forwards and the first stage's backwards,
    which cross no link."""
    none = np.zeros((1, ticked.num_units + 1), dtype=np.int64)
    forward = np.asarray(ticked.forward_transfer, dtype=np.int64).reshape(-1, none.shape[1])
    backward = np.asarray(ticked.backward_transfer, dtype=np.int64).reshape(-1, none.shape[1])
    return np.concatenate((forward, none)), np.concatenate((none, backward))
