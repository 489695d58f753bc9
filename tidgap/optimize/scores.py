"""What an :class:`~tidgap.Optimizer` is told: the scores of a population, and fitness
functions of a user's own.

Inside, the GA selects on integer ticks (exact, the same on every backend). At the API
the scores are in the problem's time unit: :class:`Scores` carries both, and a fitness a
user computes (floats, lower is better, ``inf`` for an individual to reject) is turned
into ticks by :func:`to_ticks` (rounded; exact for times the evaluators computed, as the
tick is a power of two).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tidgap.backends.evaluator import INVALID
from tidgap.backends.xp import namespace, to_host
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem, require_problem
from tidgap.optimize.genome import Population, decode_plan


@dataclass(frozen=True)
class Scores:
    """The scores of a population of ``P``: ``ticks`` ``(P,)`` int64 (lower is better,
    :data:`~tidgap.backends.evaluator.INVALID` for an individual that is no plan or breaks
    a constraint), for a separable family also ``halves`` (forward end and backward span,
    ``(P,)`` ticks each, whose sum is ``ticks``), and for an ordered family ``peaks``
    ``(P, S)``, the samples each stage holds at most, and ``units``, the same as the
    memory levels count them where that differs (a search counting memory as ``tidgap
    run`` holds it: :data:`~tidgap.optimize.run_memory.FINE` units; ``peaks`` are then
    those rounded up to samples, at most the batch). All on the optimizer's ``xp``;
    ``tick`` converts to the problem's time unit; ``asked`` numbers the ask() of the
    population :meth:`tidgap.Optimizer.evaluate` scored (``None`` for scores made
    otherwise), so that its ``tell`` refuses an earlier generation's."""

    ticks: Any
    tick: float
    halves: tuple[Any, Any] | None = None
    peaks: Any = None
    units: Any = None
    asked: int | None = None

    @property
    def time(self) -> Any:
        """``(P,)`` float64 in the problem's time unit, ``inf`` where :data:`INVALID`."""
        xp = namespace(self.ticks)
        return xp.where(self.ticks >= INVALID, xp.inf, self.ticks * self.tick)

    def masked(self, valid: Any) -> Scores:
        """These scores with the individuals where ``valid`` ``(P,)`` is false rejected
        (:data:`INVALID`, in both halves)."""
        xp = namespace(self.ticks)
        keep = xp.asarray(valid, dtype=bool)
        if keep.shape != self.ticks.shape:
            raise ValueError(f"valid has shape {keep.shape}, the population {self.ticks.shape}")
        halves = None
        if self.halves is not None:
            halves = tuple(xp.where(keep, half, INVALID) for half in self.halves)
        return replace(self, ticks=xp.where(keep, self.ticks, INVALID), halves=halves)

    @property
    def valid(self) -> Any:
        """``(P,)`` bool: the individuals that are plans within every constraint."""
        return self.ticks < INVALID


#: The most samples (or units) a caller's peak may say a stage holds: far beyond any batch,
#: and exactly an int64 (a larger one wrapped to a negative peak, within every limit).
MOST_HELD = 2**53


def whole_samples(peaks: Any, xp: Any, name: str = "peaks") -> Any:
    """``peaks`` a caller gave (samples held per individual and stage) as int64 on ``xp``;
    ``ValueError`` (naming ``name``) unless every one is a whole number of samples from 0
    to :data:`MOST_HELD` (NaN, a negative or a fractional peak would let a plan past a
    memory level, and so would one that wraps)."""
    try:
        found = xp.asarray(peaks, dtype=xp.float64)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(
            f"{name} must be samples held, numbers up to 2**53 (got {type(peaks).__name__})"
        ) from None
    whole = xp.isfinite(found) & (found >= 0) & (found == xp.floor(found))
    if not bool(xp.all(whole & (found <= MOST_HELD))):
        raise ValueError(
            f"{name} must be whole numbers of samples from 0 to 2**53 (NaN, negative, "
            "fractional or larger found)"
        )
    return found.astype(xp.int64)


def whole_ticks(ticks: Any, xp: Any, name: str) -> Any:
    """``ticks`` a caller gave in :class:`Scores` as int64 on ``xp``; ``ValueError`` naming
    ``name`` unless each is an integer within ``+-INVALID`` (``INVALID`` rejects one)."""
    found = xp.asarray(ticks)
    if found.dtype.kind in "iu" and found.dtype.itemsize <= 8:
        # compared before the cast and without abs(): 2**64-5 (uint64) and int64's least
        # both wrapped to negative ticks that passed
        within = (
            found <= INVALID
            if found.dtype.kind == "u"
            else (found >= -INVALID) & (found <= INVALID)
        )
        if bool(xp.all(within)):
            return found.astype(xp.int64)
    raise ValueError(
        f"Scores' {name} must be integers within +-{INVALID} ticks (got {found.dtype}"
        + (")" if found.dtype.kind not in "iu" else ", some out of range)")
    )


def checked_scores(scores: Scores, tick: float, xp: Any) -> Scores:
    """``scores`` a caller built as an optimizer of ``tick`` takes them: :func:`whole_ticks`
    (and halves), :func:`whole_samples` peaks and units, on this tick (``ValueError``
    otherwise: scores of another problem, or values that would wrap or pass a limit)."""
    if scores.tick != tick:
        raise ValueError(
            f"Scores' tick is {scores.tick!r}, this optimizer's {tick!r}: scores of another problem"
        )
    halves = scores.halves
    return Scores(
        whole_ticks(scores.ticks, xp, "ticks"),
        tick,
        None
        if halves is None
        else (whole_ticks(halves[0], xp, "halves"), whole_ticks(halves[1], xp, "halves")),
        None if scores.peaks is None else whole_samples(scores.peaks, xp),
        None if scores.units is None else whole_samples(scores.units, xp, "units"),
    )


def holds_none(values: Any) -> bool:
    """Whether ``values`` (a sequence or an array of Python objects; not a numeric array)
    holds ``None``."""
    dtype = getattr(values, "dtype", None)
    if dtype is not None and getattr(dtype, "kind", None) != "O":  # torch's dtypes have none
        return False
    try:
        return any(value is None for value in np.asarray(values, dtype=object).ravel())
    except ValueError:  # ragged: refused when converted
        return False


def to_ticks(values: Any, tick: float, valid: Any = None, xp: Any = None) -> Any:
    """``(P,)`` fitness in the problem's time unit (any real dtype; on ``xp``, default the
    array module of ``values``) -> int64 ticks, rounded; ``nan``, ``+-inf`` and individuals
    where ``valid`` ``(P,)`` is false become :data:`INVALID`. ``ValueError`` for values that
    are not numbers, finite values past ``INVALID`` ticks either way (they would wrap or
    reject silently) or a ``valid`` of another shape."""
    xp = namespace(values) if xp is None else xp
    beyond = ValueError(
        f"fitness values must lie within +-{INVALID * tick:.6g} in the time unit on this "
        "problem (its ticks' range; reject an individual with inf or a valid mask)"
    )
    kind = getattr(values, "dtype", type(values).__name__)
    if holds_none(values):  # NumPy reads None as nan, which would reject it silently
        raise ValueError(
            "fitness values must be numbers in the time unit (got None; reject an individual "
            "with inf or a valid mask)"
        )
    if xp.iscomplexobj(values):
        raise ValueError(f"fitness values must be real numbers in the time unit (got {kind})")
    try:
        values = xp.asarray(values, dtype=xp.float64)
    except OverflowError:  # Python integers beyond any float
        raise beyond from None
    except (TypeError, ValueError):
        raise ValueError(f"fitness values must be numbers in the time unit (got {kind})") from None
    scaled = values / tick
    finite = xp.isfinite(scaled)
    if bool(xp.any(finite & (xp.abs(scaled) >= INVALID))):
        raise beyond
    ok = finite
    if valid is not None:
        valid = xp.asarray(valid, dtype=bool)
        if valid.shape != values.shape:
            raise ValueError(f"valid has shape {valid.shape}, the fitness {values.shape}")
        ok &= valid
    return xp.where(ok, xp.rint(xp.where(ok, scaled, 0.0)).astype(xp.int64), INVALID)


def require_some_valid(ticks: Any) -> None:
    """``ValueError`` where every one of the fitness ``ticks`` (an int or an array, on
    any array module) is :data:`INVALID`: only a fitness of the caller's own rejects every
    individual (the built-in one scores its seeds), and no plan is then the best."""
    if bool(np.all(to_host(ticks) >= INVALID)):
        raise ValueError(
            "no individual has a finite fitness: the fitness told rejected every one (inf or "
            "nan, or valid false), so there is no best plan"
        )


#: A fitness of the user's own: ``fitness(population, scores) -> values`` where
#: ``scores`` are the built-in :class:`Scores` of the same population and ``values`` is
#: ``(P,)`` in the problem's time unit (lower is better), or ``(values, valid)`` with a
#: ``(P,)`` bool mask of the individuals that meet the user's constraints; for a separable
#: family, ``values`` may be a pair ``(forward, backward)`` so the dual GA keeps selecting
#: each half on its own term.
Fitness = Callable[[Population, Scores], Any]


def per_plan(objective: Callable[[Plan, Problem], float], problem: Problem) -> Fitness:
    """A :data:`Fitness` (of ordered, windowed optimizers: one value per individual) from a
    function of one decoded plan (in the time unit; ``inf`` to reject): each individual is
    decoded on the host and scored in turn, so it is much slower than a batched fitness
    (use it for prototypes and small populations). ``TypeError`` unless ``objective`` is
    callable and ``problem`` a :class:`~tidgap.model.problem.Problem`."""
    if not callable(objective):
        raise TypeError(f"per_plan's objective must be a function (got {objective!r})")
    require_problem(problem)

    def fitness(population: Population, scores: Scores) -> Any:
        xp = namespace(scores.ticks)
        forward, backward = to_host(population.forward), to_host(population.backward)
        order = None if population.order is None else to_host(population.order)
        valid = to_host(scores.valid)
        values = np.empty(population.size)
        for p in range(population.size):
            if not valid[p]:
                values[p] = np.inf
                continue
            plan = decode_plan(
                forward[p], backward[p], problem, None if order is None else order[p]
            )
            value = objective(plan, problem)
            try:  # None became NaN: every individual rejected, silently
                values[p] = float(value)
            except (TypeError, ValueError):
                raise ValueError(
                    f"per_plan's objective must return a number in the time unit (got {value!r})"
                ) from None
        return xp.asarray(values)

    return fitness


def custom_scores(fitness: Fitness, population: Population, built_in: Scores) -> Scores:
    """``built_in`` with its ticks replaced by ``fitness``'s values (in ticks), still
    :data:`INVALID` wherever the built-in scores were (no plan, or a search constraint)."""
    xp = namespace(built_in.ticks)
    result = fitness(population, built_in)
    mask = xp.ones(built_in.ticks.shape, dtype=bool)
    if isinstance(result, tuple) and len(result) == 2 and _is_mask(result[1]):
        result, mask = result[0], xp.asarray(result[1], dtype=bool)
    if isinstance(result, tuple):
        size = built_in.ticks.shape[0]
        if len(result) != 2:
            raise ValueError(
                f"fitness returned a tuple of {len(result)}: return values, (values, mask) or, "
                "for a flush optimizer, (forward, backward)"
            )
        if built_in.halves is None:
            kind = getattr(result[1], "dtype", type(result[1]).__name__)
            raise ValueError(
                "fitness returned two halves, but the family is not separable (a constraint "
                f"mask is a bool array, not {kind})"
            )
        shapes = [xp.asarray(half).shape for half in result]
        if any(shape != (size,) for shape in shapes):
            raise ValueError(
                f"fitness returned halves of shapes {shapes} for a population of {size}"
            )
        # Each half stays valid on its own (the two sides are separate populations).
        halves = tuple(
            to_ticks(xp.asarray(half), built_in.tick, mask & (own < INVALID))
            for half, own in zip(result, built_in.halves, strict=True)
        )
        ticks = namespace(built_in.ticks).minimum(halves[0] + halves[1], INVALID)
        return replace(built_in, ticks=ticks, halves=(halves[0], halves[1]))
    if built_in.halves is not None:
        raise ValueError(
            "the flush family is separable: its fitness returns (forward, backward) values"
        )
    ticks = to_ticks(result, built_in.tick, xp=xp)
    if ticks.shape != built_in.ticks.shape or mask.shape != ticks.shape:
        raise ValueError(
            f"fitness returned shape {ticks.shape} (mask {mask.shape}) for a population of "
            f"{built_in.ticks.shape[0]}"
        )
    return replace(built_in, ticks=xp.where(mask & built_in.valid, ticks, INVALID))


def _is_mask(value: Any) -> bool:
    """Whether ``value`` is a boolean array (a constraint mask, not a fitness half)."""
    return str(getattr(value, "dtype", "")) == "bool"
