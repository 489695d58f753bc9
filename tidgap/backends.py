"""The registry of batched evaluators, imported lazily so ``import tidgap`` stays light.

Every backend computes the same thing, exactly, in integer ticks: for a population,
each individual's ``forward_end`` (from its forward chromosome) and ``backward_span``
(from its backward chromosome); ``iteration_time = forward_end + backward_span``
(model.md, separability).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tidgap.encoding import Population
from tidgap.ticks import TickedProblem

#: ``chain_ends(sizes (P, S, K), compute (S, U+1), transfer (S-1, U+1)) -> (P, S)`` ticks.
ChainEnds = Callable[[Any, Any, Any], Any]

#: Backend name -> ``module:function`` of its ``chain_ends``; modules load on first use.
CHAIN_ENDS = {
    "numpy": "tidgap.fallback_cpu.matrix_form:chain_ends",
    "numba": "tidgap.fallback_cpu.numba_loops:chain_ends",
}
CPU_BACKENDS = ("numba", "numpy")


def load_chain_ends(backend: str) -> ChainEnds:
    """Import and return the ``chain_ends`` of ``backend``."""
    if backend not in CHAIN_ENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(CHAIN_ENDS)}")
    module, function = CHAIN_ENDS[backend].split(":")
    return getattr(importlib.import_module(module), function)


@dataclass(frozen=True)
class Evaluator:
    """Scores populations of one ticked problem with one backend (all results in ticks)."""

    ticked: TickedProblem
    backend: str
    chain_ends: ChainEnds

    @classmethod
    def create(cls, ticked: TickedProblem, backend: str) -> Evaluator:
        """An evaluator for ``ticked`` on ``backend`` (``numpy`` or ``numba``)."""
        return cls(ticked, backend, load_chain_ends(backend))

    def forward_end(self, forward: Any) -> Any:
        """``(P, S, K)`` forward chromosomes -> ``(P,)`` end of the last stage's forwards."""
        t = self.ticked
        return self.chain_ends(forward, t.forward_compute, t.forward_transfer)[:, -1]

    def backward_span(self, backward: Any) -> Any:
        """``(P, S, K)`` backward chromosomes -> ``(P,)`` ``max_s(G[s][N_s] + tail_s)`` from 0.

        Gradients flow from the last stage to the first, so the chain is the stages reversed.
        """
        t = self.ticked
        reversed_sizes = np.ascontiguousarray(backward[:, ::-1, :])
        ends = self.chain_ends(
            reversed_sizes, t.backward_compute[::-1].copy(), t.backward_transfer[::-1].copy()
        )
        return (ends[:, ::-1] + t.tails).max(axis=1)

    def iteration_time(self, population: Population) -> Any:
        """``(P,)`` iteration times in ticks."""
        return self.forward_end(population.forward) + self.backward_span(population.backward)
