"""CuPy launchers: compile ``evaluate.cu`` with NVRTC on first use and score populations.

The module text is ``evaluate.cu`` with ``chain.cuh`` inlined; CuPy caches the compiled
binary per source and options (in memory and in ``~/.cupy/kernel_cache``). Importing this
module imports CuPy: only :mod:`tidgap.backends` does, when the CUDA backend is chosen.
"""

from __future__ import annotations

import functools

import cupy
import numpy as np

from tidgap.kernels.source import kernel_source, scratch_width
from tidgap.ticks import TickedProblem

THREADS_PER_BLOCK = 128


@functools.cache
def evaluate_kernel(max_width: int) -> cupy.RawKernel:
    """The ``tidgap_evaluate`` kernel compiled for scratch arrays of ``max_width``."""
    module = cupy.RawModule(
        code=kernel_source(), options=("-std=c++17", f"-DTIDGAP_MAX_K={max_width}")
    )
    return module.get_function("tidgap_evaluate")


class CudaEvaluator:
    """Scores ``(P, S, K)`` int32 device chromosomes; results are ``(P,)`` int64 device ticks.

    The tables of both directions are uploaded once, in chain order.
    """

    backend = "cuda"

    def __init__(self, ticked: TickedProblem):
        self.ticked = ticked
        zeros = np.zeros(ticked.num_stages, dtype=np.int64)
        self.forward_tables = tuple(
            cupy.asarray(np.ascontiguousarray(table))
            for table in (ticked.forward_compute, ticked.forward_transfer, zeros)
        )
        self.backward_tables = tuple(
            cupy.asarray(np.ascontiguousarray(table[::-1]))
            for table in (ticked.backward_compute, ticked.backward_transfer, ticked.tails)
        )

    def forward_end(self, genes: cupy.ndarray) -> cupy.ndarray:
        """``(P,)`` end of the last stage's forwards, from time 0."""
        return self._launch(genes, self.forward_tables, reversed_chain=False)

    def backward_span(self, genes: cupy.ndarray) -> cupy.ndarray:
        """``(P,)`` ``max_s(G[s][N_s] + tail_s)`` of the backward pass, from time 0."""
        return self._launch(genes, self.backward_tables, reversed_chain=True)

    def _launch(
        self, genes: cupy.ndarray, tables: tuple[cupy.ndarray, ...], reversed_chain: bool
    ) -> cupy.ndarray:
        genes = cupy.ascontiguousarray(cupy.asarray(genes), dtype=cupy.int32)
        population, stages, width = genes.shape
        fitness = cupy.empty(population, dtype=cupy.int64)
        if population == 0:
            return fitness
        compute, transfer, tails = tables
        blocks = min(-(-population // THREADS_PER_BLOCK), 65535 * 32)
        evaluate_kernel(scratch_width(width))(
            (blocks,),
            (THREADS_PER_BLOCK,),
            (
                genes,
                fitness,
                np.int64(population),
                np.int32(stages),
                np.int32(width),
                np.int32(reversed_chain),
                compute,
                transfer,
                tails,
                np.int32(compute.shape[1]),
            ),
        )
        return fitness
