"""GPU throughput (skipped without a usable GPU): the evaluation kernel at several
population sizes, one whole generation at ``P = 2**16``, and Numba beside them; the
ordered-plan kernels (``windowed_evaluate.cu``, a thread per individual, in blocks of 128
or of one warp, and ``windowed_lanes.cu``, a lane per stage; and the one ``"auto"`` times
fastest) at several sizes on ``bench_windowed``'s
population (issue 11's target: >= 2e8 evaluations/s at ``P >= 2**20`` on an H200), and one
generation of the joint GA (``bench_windowed.Generation``) at ``P = 2**16`` with each
(target: at most 2 ms), one annealing step of ``2**16`` chains (four islands of ``2**14``: the
mutation kernel, the repair in it, the ordered-plan kernel and the acceptance), and the
run-priced search's memory count at ``P = 2**16``.

Workload as in ``bench_evaluate.py``: ``S = 8``, ``B = 256``, unit 1, 12..20 microbatches
per stage and direction, ``K = 32``; one evaluation is ``forward_end + backward_span``.
Large populations repeat a 4096-individual base (the kernel's cost does not depend on
which partitions it reads). Bandwidth share: the bytes an evaluation must read (its two
chromosomes, ``2 * S * K * 4``) and write (two int64 results) per second, against the
H200's 4.8 TB/s.

Run on a GPU machine: ``pytest bench/bench_gpu.py --benchmark-only``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from bench_evaluate import POPULATION, STAGES, WIDTH, random_chromosomes, synthetic_problem
from bench_windowed import ISLAND, Generation, ordered_population, run_memory

from tidgap.analysis.throughput import peak_bandwidth
from tidgap.analysis.workload import ORDERED_SEED
from tidgap.backends.evaluator import OrderedEvaluator, create_evaluator
from tidgap.backends.gpu import gpu_unusable_reason
from tidgap.backends.ticks import MODEL_PRICING, RUN_PRICING, tick_problem
from tidgap.backends.xp import to_host
from tidgap.kernels.source import KERNEL_CHOICES, ORDERED_KERNELS
from tidgap.optimize.anneal import Annealing, anneal
from tidgap.optimize.genome import Population

REASON = gpu_unusable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no usable GPU: {REASON}")

SIZES = [2**16, 2**18, 2**20, 2**22]
BYTES_PER_EVALUATION = 2 * STAGES * WIDTH * 4 + 2 * 8


@pytest.fixture(scope="module")
def base() -> tuple[Any, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(20240601)
    ticked = tick_problem(synthetic_problem())
    return ticked, random_chromosomes(rng, POPULATION), random_chromosomes(rng, POPULATION)


@pytest.mark.parametrize("size", SIZES)
def test_cuda_evaluation(benchmark: Any, throughput: Any, base: Any, size: int) -> None:
    import cupy

    ticked, forward, backward = base
    repeat = size // POPULATION
    forward_dev = cupy.asarray(np.tile(forward, (repeat, 1, 1)))
    backward_dev = cupy.asarray(np.tile(backward, (repeat, 1, 1)))
    evaluator = create_evaluator(ticked, "flush", "cuda")

    def run() -> tuple[Any, Any]:
        result = evaluator.forward_end(forward_dev), evaluator.backward_span(backward_dev)
        cupy.cuda.Device().synchronize()
        return result

    run()  # compile (or load the kernel cache)
    benchmark.group = "cuda evaluate S=8 B=256"
    got_forward, got_backward = benchmark(run)
    numba = create_evaluator(ticked, "flush", "numba")
    assert np.array_equal(to_host(got_forward)[:POPULATION], numba.forward_end(forward))
    assert np.array_equal(to_host(got_backward)[:POPULATION], numba.backward_span(backward))
    throughput(f"cuda P=2^{size.bit_length() - 1}", benchmark, size)
    rate = size / benchmark.stats.stats.median if benchmark.stats else 0.0
    peak = peak_bandwidth(cupy)  # this device's (an H100's is not an H200's)
    if peak is not None:
        benchmark.extra_info["bandwidth_share"] = rate * BYTES_PER_EVALUATION / peak


def test_numba_on_this_machine(benchmark: Any, throughput: Any, base: Any) -> None:
    ticked, forward, backward = base
    numba = create_evaluator(ticked, "flush", "numba")
    numba.forward_end(forward)  # compile
    benchmark.group = "cuda evaluate S=8 B=256"
    benchmark(lambda: (numba.forward_end(forward), numba.backward_span(backward)))
    throughput("numba", benchmark, POPULATION)


def test_one_generation_at_65536(benchmark: Any, throughput: Any, base: Any) -> None:
    """Selection to evaluation, both directions, on the device: ``Chromosomes.step`` x 2."""
    import cupy

    from tidgap.kernels.launcher import cuda_breed
    from tidgap.optimize.ga import Chromosomes, GeneticSettings
    from tidgap.optimize.rng import CounterRng

    ticked, forward, backward = base
    size = 2**16
    evaluator = create_evaluator(ticked, "flush", "cuda")
    settings = GeneticSettings(population=size)
    sides = []
    for genes, caps, score in (
        (forward, ticked.forward_caps, evaluator.forward_end),
        (backward, ticked.backward_caps, evaluator.backward_span),
    ):
        device_genes = cupy.asarray(np.tile(genes, (size // POPULATION, 1, 1)))
        sides.append(
            Chromosomes(device_genes, score(device_genes), cupy.asarray(caps), score, cuda_breed)
        )
    rng = CounterRng(0, cupy)

    def generation() -> None:
        for side in sides:
            side.step(settings, rng)
        cupy.cuda.Device().synchronize()

    generation()
    benchmark.group = "cuda generation P=2^16"
    benchmark(generation)
    throughput("cuda generation P=2^16", benchmark, size - settings.elites)


def lane_or_thread_evaluator(ticked: Any, **options: Any) -> OrderedEvaluator:
    """The ``cuda`` windowed evaluator with ``CudaOrderedEnds(ticked, **options)``."""
    from tidgap.kernels.launcher import CudaOrderedEnds

    return OrderedEvaluator(ticked, CudaOrderedEnds(ticked, **options))


def on_kernel(generation: Generation, kernel: str) -> Generation:
    """``generation`` with its space scoring through ``CudaOrderedEnds(kernel=kernel)``."""
    evaluator = lane_or_thread_evaluator(generation.space.evaluator.ticked, kernel=kernel)
    generation.space = replace(generation.space, evaluator=evaluator)
    return generation


def time_ordered(benchmark: Any, size: int, pricing: str = MODEL_PRICING, **options: Any) -> None:
    """Time the ``cuda`` windowed evaluator's ``score`` (``CudaOrderedEnds(**options)``) on
    ``size`` ordered plans on the device (``bench_windowed``'s base population repeated),
    priced by ``pricing``, and assert it equals Numba on the base population."""
    import cupy

    problem = synthetic_problem()
    ticked = tick_problem(problem, pricing)
    base = ordered_population(np.random.default_rng(ORDERED_SEED), problem)
    repeat = size // POPULATION
    population = Population(
        *(cupy.asarray(np.tile(genes, (repeat, 1, 1))) for genes in (base.forward, base.backward)),
        order=cupy.asarray(np.tile(base.order, (repeat, 1, 1))),
    )
    evaluator = lane_or_thread_evaluator(ticked, **options)

    def run() -> Any:
        result = evaluator.score(population)
        cupy.cuda.Device().synchronize()
        return result

    run()  # compile (or load the kernel cache); "auto" times the kernels here
    got = benchmark(run)
    chosen = evaluator.ordered_ends.kernel_for(*population.forward.shape)
    benchmark.extra_info["kernel"] = chosen
    numba = create_evaluator(ticked, "windowed", "numba")
    assert np.array_equal(to_host(got)[:POPULATION], numba.score(base))


@pytest.mark.parametrize("kernel", KERNEL_CHOICES)
@pytest.mark.parametrize("size", SIZES[:3])
def test_cuda_ordered_evaluation(benchmark: Any, throughput: Any, size: int, kernel: str) -> None:
    """Ordered plans: ``score`` of every individual, equal to Numba on the base population,
    by a thread per individual (blocks of 128 or of a warp), by a lane per stage
    (``windowed_lanes.cu``) or by the one ``"auto"`` timed fastest (the backend's default;
    the row's ``kernel`` says which)."""
    benchmark.group = f"cuda ordered evaluate S=8 B=256, {kernel}"
    time_ordered(benchmark, size, kernel=kernel)
    throughput(f"cuda windowed {kernel} P=2^{size.bit_length() - 1}", benchmark, size)


@pytest.mark.parametrize("kernel", ORDERED_KERNELS)
def test_cuda_ordered_run_priced(benchmark: Any, throughput: Any, kernel: str) -> None:
    """The same at ``P = 2**16``, priced as ``tidgap run`` runs the plans (``tidgap search
    --pricing run``)."""
    benchmark.group = f"cuda ordered evaluate S=8 B=256, {kernel}, run-priced"
    time_ordered(benchmark, 2**16, RUN_PRICING, kernel=kernel)
    throughput(f"cuda windowed {kernel} run-priced P=2^16", benchmark, 2**16)


@pytest.mark.parametrize("blocks_per_sm", [1, 2, 4, 8, 16])
def test_cuda_ordered_grid(benchmark: Any, throughput: Any, blocks_per_sm: int) -> None:
    """The thread-per-individual kernel at ``P = 2**20`` with its grid capped at
    ``blocks_per_sm`` blocks of 128 threads per multiprocessor (each thread then scores
    several individuals)."""
    import cupy

    processors = cupy.cuda.Device().attributes["MultiProcessorCount"]
    benchmark.group = "cuda ordered evaluate S=8 B=256, grid capped, P=2^20"
    time_ordered(benchmark, 2**20, max_blocks=blocks_per_sm * processors, kernel="thread")
    throughput(f"cuda windowed P=2^20, {blocks_per_sm} blocks/SM", benchmark, 2**20)


@pytest.mark.parametrize("kernel", KERNEL_CHOICES)
def test_cuda_joint_generation_at_65536(benchmark: Any, throughput: Any, kernel: str) -> None:
    """``Island.step`` on the device: breeding, the repair and the ordered-plan kernel
    (``kernel``: ``CudaOrderedEnds``'s)."""
    import cupy

    generation = on_kernel(Generation.on("cuda", 2**16), kernel)

    def run() -> int:
        children = generation.step()
        cupy.cuda.Device().synchronize()
        return children

    children = run()  # compile (or load the kernel cache)
    benchmark.group = f"cuda joint generation P=2^16, {kernel}"
    benchmark(run)
    generation.check("numba")
    ends = generation.space.evaluator.ordered_ends
    benchmark.extra_info["kernel"] = ends.kernel_for(
        children, *generation.island.genes.forward.shape[1:]
    )
    throughput(f"cuda joint generation {kernel} P=2^16", benchmark, children)
    if benchmark.stats is not None:
        benchmark.extra_info["generations_per_second"] = 1 / benchmark.stats.stats.median


@pytest.mark.parametrize("kernel", ORDERED_KERNELS)
def test_cuda_anneal_step_at_65536(benchmark: Any, throughput: Any, kernel: str) -> None:
    """One annealing step of every individual of four islands of ``2**14`` (``kernel``:
    ``CudaOrderedEnds``'s)."""
    import cupy

    generations = [Generation.on("cuda", 2**14, seed) for seed in range(4)]
    islands, first = [g.island for g in generations], on_kernel(generations[0], kernel)

    def step() -> int:
        evaluations = anneal(islands, first.space, first.rng, Annealing(steps=1))[1]
        cupy.cuda.Device().synchronize()
        return evaluations

    evaluations = step()  # compile (or load the kernel cache)
    assert evaluations == 2**16
    benchmark.group = f"cuda annealing step 4x2^14 chains, {kernel}"
    benchmark(step)
    throughput(f"cuda anneal {kernel} 4x2^14", benchmark, evaluations)
    if benchmark.stats is not None:
        benchmark.extra_info["steps_per_second"] = 1 / benchmark.stats.stats.median


@pytest.mark.parametrize("counted_by", ["kernel", "array passes"])
def test_cuda_run_memory_count(benchmark: Any, throughput: Any, counted_by: str) -> None:
    """What ``2**16`` plans' stages hold as ``tidgap run`` runs them (``RunMemory.held``,
    a run-priced search's memory count: the backend's kernel, ``run_memory.cu``, or the
    array passes it replaced on CuPy), an island of ``bench_windowed``'s repeated, equal to
    Numba's loops on the island."""
    import cupy

    island = Generation.on("numba", ISLAND).island
    host = (island.genes.forward, island.genes.backward, island.genes.lead, island.peaks)
    repeat = 2**16 // ISLAND
    forward, backward, lead, peaks = (
        cupy.asarray(np.tile(a, (repeat,) + (1,) * (a.ndim - 1))) for a in host
    )
    memory = run_memory("cuda")
    if counted_by == "array passes":
        memory = replace(memory, compiled=None)

    def count() -> Any:
        held = memory.held(peaks, forward, backward, lead)
        cupy.cuda.Device().synchronize()
        return held

    got = count()
    benchmark.group = "cuda run memory count S=8 B=256 P=2^16"
    benchmark(count)
    expected = run_memory("numba").held(host[3], *host[:3])
    assert np.array_equal(to_host(got)[:ISLAND], expected)
    throughput(f"cuda run-memory ({counted_by}) P=2^16", benchmark, 2**16)
