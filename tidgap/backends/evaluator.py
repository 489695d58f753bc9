"""The evaluator seam: ``score(population) -> (P,) int64 ticks`` for a schedule family on a
backend, and the CPU evaluators (NumPy, Numba) of the flush and of ordered plans.

Every backend computes the same thing, exactly, in integer ticks. A separable family (the
flush) also offers both halves of the iteration time, each from one chromosome:
``forward_end`` and ``backward_span``, with ``score = forward_end + backward_span``
(model.md, separability); the dual GA selects on each half. CPU backends take and return
NumPy arrays, the CUDA backend CuPy arrays.

An ordered family (``windowed``) is scored on explicit orders (``Population.order``, any
order gene lowered to them first): :class:`OrderedEvaluator` gives ``score`` and
``peak_held``; an individual whose order cannot finish scores :data:`INVALID`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tidgap.backends import BACKENDS, get_backend, load, require_usable
from tidgap.backends.ticks import TickedProblem
from tidgap.optimize.genome import Population

#: ``chain_ends(sizes (P, S, K), compute (S, U+1), transfer (S-1, U+1)) -> (P, S)`` ticks.
ChainEnds = Callable[[Any, Any, Any], Any]

#: Genes (individuals x stages x microbatches) per call of a CPU ``chain_ends``: bounds
#: the NumPy form's temporaries (a few int64 arrays of this many entries).
CHUNK_GENES = 1 << 22

#: The score of an individual whose order cannot finish (it breaks rule ``count``, 1 or 2:
#: model.md, Ordered plans); far above any iteration time (at most ``2**50`` ticks).
INVALID = np.iinfo(np.int64).max // 4

#: ``ordered_ends(forward (P, S, K), backward (P, S, K), order (P, S, L), ticked) ->
#: (iteration (P,) ticks, peak_held (P, S) samples)``, :data:`INVALID` / 0 where the order
#: cannot finish.
OrderedEnds = Callable[[np.ndarray, np.ndarray, np.ndarray, TickedProblem], Any]


class Evaluator(Protocol):
    """What a search needs of a backend for one schedule family: each plan's time."""

    ticked: TickedProblem

    def score(self, population: Population) -> Any:
        """``(P,)`` int64 iteration times in ticks, in the population's array module."""


class SeparableEvaluator(Evaluator, Protocol):
    """An evaluator of a separable family: both halves, each from its own chromosome."""

    def forward_end(self, genes: Any) -> Any:
        """``(P, S, K)`` forward chromosomes -> ``(P,)`` end of the last stage's forwards."""

    def backward_span(self, genes: Any) -> Any:
        """``(P, S, K)`` backward chromosomes -> ``(P,)`` ``max_s(G[s][N_s] + tail_s)``."""

    def score(self, population: Population) -> Any:
        """``(P,)`` ticks: ``forward_end(forward) + backward_span(backward)``."""
        return self.forward_end(population.forward) + self.backward_span(population.backward)


@dataclass(frozen=True)
class ChainEvaluator(SeparableEvaluator):
    """The flush on the CPU, built on one ``chain_ends`` (NumPy matrix form or Numba loops)."""

    ticked: TickedProblem
    chain_ends: ChainEnds

    def _ends(self, sizes: np.ndarray, compute: np.ndarray, transfer: np.ndarray) -> np.ndarray:
        """``chain_ends`` over chunks of at most :data:`CHUNK_GENES` genes (one individual
        at least)."""
        chunk = max(1, CHUNK_GENES // max(sizes.shape[1] * sizes.shape[2], 1))
        if len(sizes) <= chunk:
            return self.chain_ends(sizes, compute, transfer)
        parts = [
            self.chain_ends(sizes[i : i + chunk], compute, transfer)
            for i in range(0, len(sizes), chunk)
        ]
        return np.concatenate(parts)

    def forward_end(self, genes: np.ndarray) -> np.ndarray:
        """``(P, S, K)`` forward chromosomes -> ``(P,)`` end of the last stage's forwards."""
        t = self.ticked
        return self._ends(genes, t.forward_compute, t.forward_transfer)[:, -1]

    def backward_span(self, genes: np.ndarray) -> np.ndarray:
        """``(P, S, K)`` backward chromosomes -> ``(P,)`` ``max_s(G[s][N_s] + tail_s)`` from 0.

        Gradients flow from the last stage to the first, so the chain is the stages reversed.
        """
        t = self.ticked
        reversed_sizes = np.ascontiguousarray(genes[:, ::-1, :])
        ends = self._ends(
            reversed_sizes, t.backward_compute[::-1].copy(), t.backward_transfer[::-1].copy()
        )
        return (ends[:, ::-1] + t.tails).max(axis=1)


def flush_numpy(ticked: TickedProblem) -> ChainEvaluator:
    """The flush in TiDGAP's matrix form (:mod:`tidgap.fallback_cpu.flush_numpy`)."""
    from tidgap.fallback_cpu.flush_numpy import chain_ends

    return ChainEvaluator(ticked, chain_ends)


def flush_numba(ticked: TickedProblem) -> ChainEvaluator:
    """The flush as parallel compiled loops (:mod:`tidgap.fallback_cpu.flush_numba`)."""
    from tidgap.fallback_cpu.flush_numba import chain_ends

    return ChainEvaluator(ticked, chain_ends)


def not_partitions(individual: int, num_units: int) -> str:
    """The ``ValueError`` text for an individual whose sizes are not partitions of ``U``."""
    return (
        f"individual {individual} is not a plan: sizes must lie in 0..{num_units}, zeros only "
        f"after a row's microbatches, and every row must sum to {num_units} units"
    )


@dataclass(frozen=True)
class OrderedEvaluator(Evaluator):
    """Ordered plans on the CPU, built on one ``ordered_ends`` (Numba loops or NumPy rounds).

    ``population.order`` must be given; sizes that are not partitions of ``U`` raise
    ``ValueError`` (:func:`not_partitions`), orders that cannot finish score :data:`INVALID`.
    """

    ticked: TickedProblem
    ordered_ends: OrderedEnds

    def evaluate(self, population: Population) -> tuple[np.ndarray, np.ndarray]:
        """``(P,)`` int64 iteration ticks ``max_s(EB[s][N_s] + tail_s)`` and ``(P, S)``
        int64 ``peak_held`` in samples."""
        if population.order is None:
            raise ValueError("an ordered evaluator needs the population's order genes")
        return self.ordered_ends(
            population.forward, population.backward, population.order, self.ticked
        )

    def score(self, population: Population) -> np.ndarray:
        """``(P,)`` int64 iteration ticks, :data:`INVALID` where the order cannot finish."""
        return self.evaluate(population)[0]

    def peak_held(self, population: Population) -> np.ndarray:
        """``(P, S)`` int64 samples held at most per stage (model.md, Memory); 0 where the
        order cannot finish."""
        return self.evaluate(population)[1]


def windowed_numpy(ticked: TickedProblem) -> OrderedEvaluator:
    """Ordered plans in vectorised rounds (:mod:`tidgap.fallback_cpu.windowed_numpy`)."""
    from tidgap.fallback_cpu.windowed_numpy import ordered_ends

    return OrderedEvaluator(ticked, ordered_ends)


def windowed_numba(ticked: TickedProblem) -> OrderedEvaluator:
    """Ordered plans as one compiled event loop per individual
    (:mod:`tidgap.fallback_cpu.windowed_numba`)."""
    from tidgap.fallback_cpu.windowed_numba import ordered_ends

    return OrderedEvaluator(ticked, ordered_ends)


def missing_evaluator(family: str, backend: str) -> str:
    """One line: ``family`` has no evaluator on ``backend``, and which pairs exist."""
    families: dict[str, list[str]] = {}
    for record in BACKENDS.values():
        for name in record.evaluators:
            families.setdefault(name, []).append(record.name)
    pairs = "; ".join(f"{name} ({', '.join(names)})" for name, names in families.items())
    return f"{family} has no {backend} evaluator; evaluators exist for: {pairs}"


def create_evaluator(ticked: TickedProblem, family: str, backend: str) -> Evaluator:
    """The evaluator of schedule ``family`` for ``ticked`` on ``backend``.

    ``ValueError`` for an unknown backend or a missing (family, backend) pair,
    :class:`tidgap.backends.UnusableBackend` for a backend that cannot run here.
    """
    record = get_backend(backend)
    if family not in record.evaluators:
        raise ValueError(missing_evaluator(family, backend))
    require_usable(record)
    return load(record.evaluators[family])(ticked)
