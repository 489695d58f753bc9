"""CuPy launchers: compile the kernels with NVRTC on first use, then evaluate and breed.

Each module's text is its ``.cu`` file with the local headers inlined
(:func:`tidgap.kernels.source.kernel_source`); CuPy caches the compiled binary per source
and options, in memory and in ``~/.cupy/kernel_cache``. Importing this module imports
CuPy: the ``cuda`` record of :data:`tidgap.backends.BACKENDS` names its evaluator and breeder,
loaded when that backend is chosen.
"""

from __future__ import annotations

import functools
import statistics
import time
import warnings
from collections.abc import Callable

import cupy
import numpy as np

from tidgap.backends.evaluator import OrderedEvaluator, SeparableEvaluator
from tidgap.backends.ticks import TickedProblem
from tidgap.kernels.source import (
    KERNEL_CHOICES,
    ORDERED_KERNELS,
    WARP,
    kernel_source,
    lane_group,
    lane_scratch_bytes,
    operation_defines,
    scratch_refusal,
    scratch_width,
)
from tidgap.optimize.joint_operators import JointGenes, mutation_table
from tidgap.optimize.operators import BREED_DRAWS, MUTATE_DRAWS, MUTATIONS
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.run_memory import FINE, RunMemory

THREADS_PER_BLOCK = 128


@functools.cache
def _kernel(
    source: str, function: str, max_width: int, max_stages: int = 0, group: int = 0
) -> cupy.RawKernel:
    """``function`` of ``kernels/source``, compiled with ``TIDGAP_MAX_K = max_width`` (and
    ``TIDGAP_MAX_S = max_stages``, ``TIDGAP_GROUP = group`` when given)."""
    sizes = (f"-DTIDGAP_MAX_S={max_stages}",) if max_stages else ()
    sizes += (f"-DTIDGAP_GROUP={group}",) if group else ()
    module = cupy.RawModule(
        code=kernel_source(source),
        options=("-std=c++17", f"-DTIDGAP_MAX_K={max_width}", *sizes, *operation_defines()),
    )
    return module.get_function(function)


def _grid(count: int, per_block: int = THREADS_PER_BLOCK) -> tuple[int]:
    """Blocks for ``count`` work items, ``per_block`` to a block (the kernels loop if there
    are more)."""
    return (max(1, min(-(-count // per_block), 65535 * 32)),)


class CudaEvaluator(SeparableEvaluator):
    """The flush on the GPU: scores ``(P, S, K)`` int32 device chromosomes; results are
    ``(P,)`` int64 device ticks.

    The tables of both directions are uploaded once, in chain order.
    """

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
        kernel = _kernel("flush_evaluate.cu", "tidgap_evaluate", scratch_width(width))
        kernel(
            _grid(population),
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


#: Shared memory a block may use without opting in (bytes), on every CUDA GPU.
DEFAULT_SHARED_BYTES = 48 * 1024
#: ``CudaOrderedEnds(kernel="auto")`` times the kernels on the first population of each
#: shape and size class with at least this many individuals (a search scores each
#: generation's children, about 512 per island, and its annealing's 128 chains per island,
#: all islands in one call), the median of this many launches each.
TRIAL_POPULATION = 512
TRIAL_REPEATS = 3


class CudaOrderedEnds:
    """``ordered_ends`` on the GPU for :class:`tidgap.backends.evaluator.OrderedEvaluator`.
    Takes ``(P, S, K)`` int32 forward and backward sizes and ``(P, S, L)`` int8 order genes
    (device or host) and returns ``(P,)`` int64 iteration ticks and ``(P, S)`` int64 peak
    held samples, on the device. Sizes are not checked (the CPU twins refuse
    non-partitions); the tables are uploaded once.

    ``kernel="thread"``: one thread per individual runs ``windowed_sim.cuh``'s event loop
    with its scratch in local memory (``windowed_evaluate.cu``, blocks of 128 threads);
    ``"thread-warp"``: the same in blocks of one warp. ``kernel="lanes"``: one lane of a
    warp per stage, the scratch in shared memory (``windowed_lanes.cu``, blocks of one
    warp); where ``S > 32`` or a warp's scratch exceeds the device's shared memory per
    block, the thread kernel runs instead. All give the same ticks, so the choice changes
    the time only. ``kernel="auto"``: the first call with at least
    :data:`TRIAL_POPULATION` individuals of a shape ``(S, K)`` and size class (``P``'s
    power of two: which kernel fills the device depends on ``P``) times the kernels that
    fit on them (:data:`TRIAL_REPEATS` launches each, after an untimed one that compiles)
    and every later call of that shape and class runs the fastest (:attr:`chosen`) of
    those whose results equal the thread kernel's (:meth:`_trial`); smaller populations
    run the thread kernel. ``max_blocks`` caps the grid (threads then loop over several
    individuals; ``bench/bench_gpu.py`` sweeps it for the thread kernel: on an H200 at
    ``P = 2**20`` 8 blocks per multiprocessor were 6% faster than no cap)."""

    def __init__(self, ticked: TickedProblem, max_blocks: int | None = None, kernel: str = "auto"):
        if kernel not in KERNEL_CHOICES:
            names = ", ".join(map(repr, KERNEL_CHOICES))
            raise ValueError(f"kernel must be one of {names}, not {kernel!r}")
        self.max_blocks = max_blocks
        self.kernel = kernel
        #: ``(S, K, P.bit_length())`` -> the kernel ``"auto"`` timed fastest there.
        self.chosen: dict[tuple[int, int, int], str] = {}
        tables = (
            ticked.forward_compute,
            ticked.backward_compute,
            ticked.forward_transfer,
            ticked.backward_transfer,
            ticked.tails,
        )
        self.tables = tuple(cupy.asarray(np.ascontiguousarray(table)) for table in tables)
        # Run pricing's recompute and order tables (unread under model pricing).
        self.run_tables = tuple(cupy.asarray(table) for table in ticked.run_tables())

    def __call__(
        self,
        forward: cupy.ndarray,
        backward: cupy.ndarray,
        order: cupy.ndarray,
        ticked: TickedProblem,
    ) -> tuple[cupy.ndarray, cupy.ndarray]:
        forward = cupy.ascontiguousarray(cupy.asarray(forward), dtype=cupy.int32)
        backward = cupy.ascontiguousarray(cupy.asarray(backward), dtype=cupy.int32)
        order = cupy.ascontiguousarray(cupy.asarray(order), dtype=cupy.int8)
        population, stages, width = forward.shape
        refusal = scratch_refusal(stages, width)
        if refusal is not None:
            raise ValueError(refusal)
        fitness = cupy.empty(population, dtype=cupy.int64)
        held = cupy.zeros((population, stages), dtype=cupy.int64)
        if population == 0:
            return fitness, held
        arguments = (
            forward,
            backward,
            order,
            fitness,
            held,
            np.int64(population),
            np.int32(stages),
            np.int32(width),
            np.int32(order.shape[2]),
            *self.tables,
            np.int32(self.tables[0].shape[1]),
            *self.run_tables,
            np.int32(ticked.run_priced),
        )
        key = (stages, width, population.bit_length())
        if self.kernel == "auto" and population >= TRIAL_POPULATION and key not in self.chosen:
            self.chosen[key] = self._trial(arguments, (fitness, held), population, stages, width)
        self._launch(self.kernel_for(*forward.shape), arguments, population, stages, width)
        return fitness, held * ticked.unit

    def _trial(
        self, arguments: tuple, outputs: tuple, population: int, stages: int, width: int
    ) -> str:
        """The fastest of the kernels that fit, on ``arguments`` (``outputs``: its fitness
        and held arrays, which each launch overwrites), among those whose results equal the
        thread kernel's (the one checked on a GPU, 2026-12-04); a warning names any
        other."""
        names = [n for n in ORDERED_KERNELS if n != "lanes" or self.lanes_fit(stages, width)]
        seconds, results = {}, {}
        for name in names:
            launch = functools.partial(self._launch, name, arguments, population, stages, width)
            seconds[name] = _median_seconds(launch)
            results[name] = tuple(output.copy() for output in outputs)
        thread = results["thread"]
        agree = [
            name
            for name in names
            if all(bool((a == b).all()) for a, b in zip(results[name], thread, strict=True))
        ]
        for name in (name for name in names if name not in agree):
            warnings.warn(
                f"the {name} kernel's ticks differ from the thread kernel's on this device: "
                "not running it (please report this)",
                RuntimeWarning,
                stacklevel=3,
            )
        return min(agree, key=seconds.__getitem__)

    def lanes_fit(self, stages: int, width: int) -> bool:
        """Whether a warp of the lane kernel holds ``(P, stages, width)`` chromosomes
        (``stages <= 32``, its scratch within the device's shared memory per block)."""
        return lane_group(stages) <= WARP and lane_scratch_bytes(stages, width) <= _shared_limit()

    def kernel_for(self, population: int, stages: int, width: int) -> str:
        """The kernel ``(population, stages, width)`` chromosomes run on (``"auto"``
        without a trial for their shape and class: ``"thread"``)."""
        if self.kernel == "auto":
            return self.chosen.get((stages, width, population.bit_length()), "thread")
        if self.kernel == "lanes" and not self.lanes_fit(stages, width):
            return "thread"
        return self.kernel

    def _launch(
        self, name: str, arguments: tuple, population: int, stages: int, width: int
    ) -> None:
        """Launch kernel ``name`` of :data:`ORDERED_KERNELS` on ``arguments``."""
        if name == "lanes":
            group, shared = lane_group(stages), lane_scratch_bytes(stages, width)
            kernel = _lane_kernel(scratch_width(width), group)
            blocks, threads = self._capped(population, WARP // group), WARP
        else:
            kernel = _kernel(
                "windowed_evaluate.cu",
                "tidgap_windowed_evaluate",
                scratch_width(width),
                scratch_width(stages),
            )
            threads, shared = WARP if name == "thread-warp" else THREADS_PER_BLOCK, 0
            blocks = self._capped(population, threads)
        kernel((blocks,), (threads,), arguments, shared_mem=shared)

    def _capped(self, count: int, per_block: int = THREADS_PER_BLOCK) -> int:
        """Blocks for ``count`` individuals, ``per_block`` to a block, at most
        ``max_blocks``."""
        blocks = _grid(count, per_block)[0]
        return min(blocks, self.max_blocks or blocks)


@functools.cache
def _lane_kernel(max_width: int, group: int) -> cupy.RawKernel:
    """``windowed_lanes.cu`` for lane groups of ``group``, allowed once, when compiled, all
    the dynamic shared memory a block of this device may opt in to (so no launch has to
    raise the limit)."""
    kernel = _kernel("windowed_lanes.cu", "tidgap_windowed_lanes", max_width, group=group)
    if _shared_limit() > DEFAULT_SHARED_BYTES:
        kernel.max_dynamic_shared_size_bytes = _shared_limit()
    return kernel


@functools.cache
def _shared_limit() -> int:
    """The most shared memory a block of this device may opt in to (bytes; 48 KiB where
    CuPy does not say)."""
    attributes = cupy.cuda.Device().attributes
    return int(attributes.get("MaxSharedMemoryPerBlockOptin", DEFAULT_SHARED_BYTES))


def _median_seconds(launch: Callable[[], None]) -> float:
    """The median wall time of :data:`TRIAL_REPEATS` calls of ``launch`` (seconds, the
    device synchronised around each), after one untimed call (the compile, or the kernel
    cache's load)."""
    launch()
    seconds = []
    for _ in range(TRIAL_REPEATS):
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        launch()
        cupy.cuda.Device().synchronize()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def windowed_cuda(ticked: TickedProblem) -> OrderedEvaluator:
    """Ordered plans on the GPU (:class:`CudaOrderedEnds`, the faster kernel on this
    device)."""
    return OrderedEvaluator(ticked, CudaOrderedEnds(ticked))


def _streams(rng: CounterRng, draws: int) -> cupy.ndarray:
    """The keys of ``rng``'s next ``draws`` draws, ``(draws,)`` uint64 on the device."""
    return cupy.asarray(rng.streams(draws))


def _joint_rows(genes: JointGenes) -> tuple[cupy.ndarray, cupy.ndarray, cupy.ndarray]:
    """``genes``' forward, backward and lead rows as contiguous int32 device arrays."""
    forward, backward, lead = (cupy.ascontiguousarray(r, dtype=cupy.int32) for r in genes.rows())
    return forward, backward, lead


def cuda_breed(
    genes: cupy.ndarray,
    fitness: cupy.ndarray,
    caps: cupy.ndarray,
    rng: CounterRng,
    children: int,
    crossover_rate: float,
    mutation_rate: float,
    tournament_size: int,
) -> cupy.ndarray:
    """:func:`tidgap.optimize.operators.breed` in one kernel launch: the same draws, the same
    children.

    ``genes`` ``(P, S, K)`` int32, ``fitness`` ``(P,)`` int64, ``caps`` ``(S,)``; returns
    ``(children, S, K)`` int32 on the device.
    """
    genes = cupy.ascontiguousarray(genes, dtype=cupy.int32)
    population, stages, width = genes.shape
    streams = _streams(rng, BREED_DRAWS)
    offspring = cupy.empty((children, stages, width), dtype=cupy.int32)
    if children == 0:
        return offspring
    kernel = _kernel("breed.cu", "tidgap_breed", scratch_width(width))
    kernel(
        _grid(children),
        (THREADS_PER_BLOCK,),
        (
            genes,
            cupy.ascontiguousarray(fitness, dtype=cupy.int64),
            np.int64(population),
            np.int32(stages),
            np.int32(width),
            cupy.ascontiguousarray(caps, dtype=cupy.int64),
            np.int32(tournament_size),
            np.float64(crossover_rate),
            np.float64(mutation_rate),
            np.int32(len(MUTATIONS)),
            streams,
            np.int64(children),
            offspring,
        ),
    )
    return offspring


def cuda_joint_breed(
    genes: JointGenes,
    fitness: cupy.ndarray,
    forward_caps: cupy.ndarray,
    backward_caps: cupy.ndarray,
    rng: CounterRng,
    children: int,
    crossover_rate: float,
    mutation_rate: float,
    tournament_size: int,
    mirrored: bool = False,
    out: JointGenes | None = None,
) -> JointGenes:
    """:func:`tidgap.optimize.joint_operators.joint_breed` in one kernel launch: the same
    draws, the same repaired children (``mirrored`` or not).

    ``genes``' ``(P, S, K)`` int32 rows (codes unused), ``fitness`` ``(P,)`` int64, caps
    ``(S,)`` units; returns ``children`` individuals on the device, ``(children, S, K)`` int32
    rows and ``(children, S, 2K)`` int8 codes: ``out`` (C-contiguous device arrays) where
    given.
    """
    forward, backward, lead = _joint_rows(genes)
    population, stages, width = forward.shape
    streams = _streams(rng, BREED_DRAWS)
    offspring = JointGenes.empty(children, stages, width, cupy) if out is None else out
    if children == 0:
        return offspring
    kernel = _kernel("joint_breed.cu", "tidgap_joint_breed", scratch_width(width))
    kernel(
        _grid(children),
        (THREADS_PER_BLOCK,),
        (
            forward,
            backward,
            lead,
            cupy.ascontiguousarray(fitness, dtype=cupy.int64),
            np.int64(population),
            np.int32(stages),
            np.int32(width),
            cupy.ascontiguousarray(forward_caps, dtype=cupy.int64),
            cupy.ascontiguousarray(backward_caps, dtype=cupy.int64),
            np.int32(tournament_size),
            np.float64(crossover_rate),
            np.float64(mutation_rate),
            np.int32(len(mutation_table(mirrored))),
            np.int32(mirrored),
            streams,
            np.int64(children),
            offspring.forward,
            offspring.backward,
            offspring.lead,
            offspring.codes,
        ),
    )
    return offspring


def cuda_joint_mutate(
    genes: JointGenes,
    forward_caps: cupy.ndarray,
    backward_caps: cupy.ndarray,
    rng: CounterRng,
    rate: float,
    mirrored: bool = False,
) -> JointGenes:
    """:func:`tidgap.optimize.joint_operators.mutate_repaired` in one kernel launch (the
    annealing's step): the same three draws, the same repaired individuals (``mirrored`` or
    not), new arrays on the device (``genes`` is left as it is)."""
    forward, backward, lead = _joint_rows(genes)
    population, stages, width = forward.shape
    streams = _streams(rng, MUTATE_DRAWS)
    mutated = JointGenes.empty(population, stages, width, cupy)
    if population == 0:
        return mutated
    kernel = _kernel("joint_breed.cu", "tidgap_joint_mutate", scratch_width(width))
    kernel(
        _grid(population),
        (THREADS_PER_BLOCK,),
        (
            forward,
            backward,
            lead,
            np.int64(population),
            np.int32(stages),
            np.int32(width),
            cupy.ascontiguousarray(forward_caps, dtype=cupy.int64),
            cupy.ascontiguousarray(backward_caps, dtype=cupy.int64),
            np.float64(rate),
            np.int32(len(mutation_table(mirrored))),
            np.int32(mirrored),
            streams,
            *mutated.arrays(),
        ),
    )
    return mutated


def cuda_run_memory(
    peaks: cupy.ndarray,
    forward: cupy.ndarray,
    backward: cupy.ndarray,
    lead: cupy.ndarray,
    memory: RunMemory,
) -> cupy.ndarray:
    """:meth:`~tidgap.optimize.run_memory.RunMemory.held` in one kernel launch
    (``run_memory.cu``, the Numba twin's loops): ``(P, S)`` int64 :data:`FINE` units for
    ``(P, S, K)`` sizes in units, canonical leads and the model's ``(P, S)`` ``peaks``."""
    population, stages, width = forward.shape
    held = cupy.empty((population, stages), dtype=cupy.int64)
    if population == 0:
        return held
    kernel = _kernel("run_memory.cu", "tidgap_run_memory", scratch_width(width))
    kernel(
        _grid(population * stages),
        (THREADS_PER_BLOCK,),
        (
            *_joint_rows(JointGenes(forward, backward, lead)),
            cupy.ascontiguousarray(cupy.asarray(peaks), dtype=cupy.int64),
            cupy.ascontiguousarray(cupy.asarray(memory.figures), dtype=cupy.float64),
            cupy.ascontiguousarray(cupy.asarray(memory.activation), dtype=cupy.float64),
            held,
            np.int64(population),
            np.int32(stages),
            np.int32(width),
            np.float64(memory.unit),
            np.float64(FINE),
        ),
    )
    return held
