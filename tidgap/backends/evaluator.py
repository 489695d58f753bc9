"""The registry of batched evaluators, imported lazily so ``import tidgap`` stays light.

Every backend computes the same thing, exactly, in integer ticks: for a population,
each individual's ``forward_end`` (from its forward chromosome) and ``backward_span``
(from its backward chromosome); ``iteration_time = forward_end + backward_span``
(model.md, separability). CPU backends take and return NumPy arrays, the CUDA backend
CuPy arrays.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tidgap.backends.gpu import gpu_unusable_reason
from tidgap.backends.ticks import TickedProblem
from tidgap.optimize.genome import Population

#: ``chain_ends(sizes (P, S, K), compute (S, U+1), transfer (S-1, U+1)) -> (P, S)`` ticks.
ChainEnds = Callable[[Any, Any, Any], Any]

#: CPU backend name -> ``module:function`` of its ``chain_ends``; loaded on first use.
CHAIN_ENDS = {
    "numpy": "tidgap.fallback_cpu.flush_numpy:chain_ends",
    "numba": "tidgap.fallback_cpu.flush_numba:chain_ends",
}
CPU_BACKENDS = ("numba", "numpy")
BACKENDS = ("cuda", *CPU_BACKENDS)

#: Genes (individuals x stages x microbatches) per call of a CPU ``chain_ends``: bounds
#: the NumPy form's temporaries (a few int64 arrays of this many entries).
CHUNK_GENES = 1 << 22


class Evaluator(Protocol):
    """What the search needs of a backend: both halves of the iteration time, in ticks."""

    ticked: TickedProblem
    backend: str

    def forward_end(self, genes: Any) -> Any:
        """``(P, S, K)`` forward chromosomes -> ``(P,)`` end of the last stage's forwards."""

    def backward_span(self, genes: Any) -> Any:
        """``(P, S, K)`` backward chromosomes -> ``(P,)`` ``max_s(G[s][N_s] + tail_s)``."""


def load_chain_ends(backend: str) -> ChainEnds:
    """Import and return the ``chain_ends`` of CPU backend ``backend``."""
    module, function = CHAIN_ENDS[backend].split(":")
    return getattr(importlib.import_module(module), function)


@dataclass(frozen=True)
class ChainEvaluator:
    """A CPU evaluator built on one ``chain_ends`` (NumPy matrix form or Numba loops)."""

    ticked: TickedProblem
    backend: str
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


def create_evaluator(ticked: TickedProblem, backend: str) -> Evaluator:
    """An evaluator for ``ticked`` on ``backend`` (``cuda``, ``numba`` or ``numpy``)."""
    if backend == "cuda":
        reason = gpu_unusable_reason()
        if reason is not None:
            raise RuntimeError(f"the CUDA backend is not usable: {reason}")
        from tidgap.kernels.launcher import CudaEvaluator

        return CudaEvaluator(ticked)
    if backend not in CHAIN_ENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    return ChainEvaluator(ticked, backend, load_chain_ends(backend))


def iteration_time(evaluator: Evaluator, population: Population) -> Any:
    """``(P,)`` iteration times in ticks: ``forward_end + backward_span``."""
    return evaluator.forward_end(population.forward) + evaluator.backward_span(population.backward)


def cpu_backend() -> str:
    """Numba when it imports, else NumPy."""
    try:
        importlib.import_module("numba")
    except ImportError:
        return "numpy"
    return "numba"


def default_backend() -> str:
    """The GPU when usable, else the fastest CPU backend."""
    return "cuda" if gpu_unusable_reason() is None else cpu_backend()
