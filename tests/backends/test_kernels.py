"""The CUDA code without a GPU: it compiles for sm_80 and sm_90, and its recurrence,
compiled for the host, equals the CPU backends exactly."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import case_id, golden_cases
from tests.support.host_build import build_host
from tests.support.nvcc import compile_inlined, needs_nvcc
from tests.support.populations import random_individuals, random_population, random_ticked
from tidgap import Problem, load_problem
from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.ticks import TickedProblem, tick_problem
from tidgap.kernels.source import KERNEL_DIR, operation_defines, scratch_width
from tidgap.optimize.operators import BREED_DRAWS, MUTATIONS, breed
from tidgap.optimize.rng import CounterRng, uniform_int

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("max_width", [16, 256])
@pytest.mark.parametrize("name", ["flush_evaluate.cu", "breed.cu", "run_memory.cu"])
def test_kernel_source_compiles_with_nvcc(
    name: str, arch: str, max_width: int, tmp_path: Path
) -> None:
    """The exact text NVRTC gets (headers inlined) compiles, for each scratch size."""
    result = compile_inlined(name, tmp_path, arch, f"-DTIDGAP_MAX_K={max_width}")
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr.lower(), result.stderr


@needs_nvcc
def test_every_cu_file_compiles(tmp_path: Path) -> None:
    sources = sorted(KERNEL_DIR.glob("*.cu"))
    assert sources, "no CUDA sources found"
    for source in sources:
        for arch in ("sm_80", "sm_90"):
            result = subprocess.run(
                [
                    "nvcc",
                    f"-arch={arch}",
                    "-std=c++17",
                    "-I",
                    str(KERNEL_DIR),
                    *operation_defines(),
                    "-c",
                    str(source),
                    "-o",
                    str(tmp_path / f"{source.stem}_{arch}.o"),
                ],
                capture_output=True,
                text=True,
            )
            assert result.returncode == 0, (source.name, arch, result.stderr)


@pytest.fixture(scope="module")
def host_kernel(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``tidgap_evaluate_host``: ``flush_chain.cuh``'s recurrence built for the host."""
    return build_host(tmp_path_factory, "chain_host", "tidgap_evaluate_host")


@pytest.fixture(scope="module")
def host_breed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``tidgap_breed_host``: ``breed.cuh``'s per-child breeding built for the host."""
    return build_host(tmp_path_factory, "breed_host", "tidgap_breed_host")


def pointer(array: np.ndarray) -> ctypes.c_void_p:
    """The address of a contiguous array's data, for ctypes."""
    assert array.flags.c_contiguous
    return ctypes.c_void_p(array.ctypes.data)


def host_fitness(
    kernel: Any, genes: np.ndarray, ticked: TickedProblem, backward: bool
) -> np.ndarray:
    """Call the host build like the launcher calls the GPU kernel (chain-order tables)."""
    genes = np.ascontiguousarray(genes, dtype=np.int32)
    population, stages, width = genes.shape
    if backward:
        tables = (ticked.backward_compute[::-1], ticked.backward_transfer[::-1], ticked.tails[::-1])
    else:
        tables = (ticked.forward_compute, ticked.forward_transfer, np.zeros(stages, np.int64))
    compute, transfer, tails = (np.ascontiguousarray(t, dtype=np.int64) for t in tables)
    fitness = np.empty(population, dtype=np.int64)
    kernel(
        pointer(genes),
        pointer(fitness),
        ctypes.c_longlong(population),
        ctypes.c_int(stages),
        ctypes.c_int(width),
        ctypes.c_int(int(backward)),
        pointer(compute),
        pointer(transfer),
        pointer(tails),
        ctypes.c_int(compute.shape[1]),
    )
    return fitness


def assert_kernel_matches_cpu(
    kernel: Any, ticked: TickedProblem, forward: Any, backward: Any
) -> None:
    reference = create_evaluator(ticked, "flush", "numpy")
    np.testing.assert_array_equal(
        host_fitness(kernel, forward, ticked, backward=False), reference.forward_end(forward)
    )
    np.testing.assert_array_equal(
        host_fitness(kernel, backward, ticked, backward=True), reference.backward_span(backward)
    )


@pytest.mark.parametrize("case", golden_cases(), ids=case_id)
def test_host_kernel_equals_cpu_on_golden_problems(host_kernel: Any, case: dict) -> None:
    ticked = tick_problem(Problem.from_dict(case["problem"]))
    rng = np.random.default_rng(len(case["problem"]["name"]))
    width = min(ticked.num_units, 40)
    population = random_individuals(rng, ticked, size=200, width=width)
    assert_kernel_matches_cpu(host_kernel, ticked, population.forward, population.backward)


@pytest.mark.parametrize("seed", range(6))
def test_host_kernel_equals_cpu_on_large_random_tables(host_kernel: Any, seed: int) -> None:
    rng = np.random.default_rng(seed)
    stages = int(rng.integers(1, 9))
    ticked = random_ticked(rng, stages, num_units=int(rng.integers(1, 120)), top=2**40)
    population = random_individuals(rng, ticked, size=300, width=64)
    assert_kernel_matches_cpu(host_kernel, ticked, population.forward, population.backward)


def test_golden_plans_through_the_host_kernel(host_kernel: Any) -> None:
    """Golden iteration times, end to end through the kernel code (rel 1e-6)."""
    from tidgap import Plan
    from tidgap.optimize.genome import encode_plan

    for case in golden_cases():
        problem = Problem.from_dict(case["problem"])
        ticked = tick_problem(problem)
        for entry in case["plans"]:
            plan = Plan.of(entry["forward"], entry["backward"])
            forward, backward = encode_plan(plan, problem, problem.num_units)
            ticks = (
                host_fitness(host_kernel, forward[None], ticked, False)[0]
                + host_fitness(host_kernel, backward[None], ticked, True)[0]
            )
            expected = entry["expected"]["iteration_time"]
            assert ticked.to_time(ticks) == pytest.approx(expected, rel=1e-6)


def test_scratch_width_covers_the_chromosome() -> None:
    for width in (1, 15, 16, 17, 64, 65, 1000):
        scratch = scratch_width(width)
        assert scratch >= width and scratch >= 16 and scratch & (scratch - 1) == 0


def host_breed_children(
    kernel: Any,
    genes: np.ndarray,
    fitness: np.ndarray,
    caps: np.ndarray,
    rng: CounterRng,
    children: int,
    crossover_rate: float,
    mutation_rate: float,
    tournament_size: int,
) -> np.ndarray:
    """Call the host build like :func:`tidgap.kernels.launcher.cuda_breed` calls the GPU."""
    population, stages, width = genes.shape
    streams = rng.streams(BREED_DRAWS)
    out = np.zeros((children, stages, width), dtype=np.int32)
    kernel(
        pointer(np.ascontiguousarray(genes, dtype=np.int32)),
        pointer(np.ascontiguousarray(fitness, dtype=np.int64)),
        ctypes.c_longlong(population),
        ctypes.c_int(stages),
        ctypes.c_int(width),
        pointer(np.ascontiguousarray(caps, dtype=np.int64)),
        ctypes.c_int(tournament_size),
        ctypes.c_double(crossover_rate),
        ctypes.c_double(mutation_rate),
        ctypes.c_int(len(MUTATIONS)),
        pointer(streams),
        ctypes.c_longlong(children),
        pointer(out),
    )
    return out


@pytest.mark.parametrize("seed", range(8))
def test_host_breed_equals_the_xp_operators(host_breed: Any, seed: int) -> None:
    """Selection, crossover and every mutation: the kernel's children are the operators'."""
    rng = np.random.default_rng(100 + seed)
    stages, units = int(rng.integers(1, 7)), int(rng.integers(2, 60))
    caps = rng.integers(-(-units // 12), units + 1, size=stages).astype(np.int64)
    width = 16
    genes = random_population(rng, caps, units, size=300, width=width, max_count=12)
    fitness = rng.integers(0, 50, size=300).astype(np.int64)  # ties on purpose
    settings = dict(children=290, crossover_rate=0.7, mutation_rate=0.95, tournament_size=3)
    expected = breed(genes, fitness, caps, CounterRng(seed), **settings)
    got = host_breed_children(host_breed, genes, fitness, caps, CounterRng(seed), **settings)
    np.testing.assert_array_equal(got, expected)
    assert (got != genes[:290]).any()


def test_host_breed_exercises_every_mutation(host_breed: Any) -> None:
    """With mutation certain and no crossover, each registry operator changes some children."""
    rng = np.random.default_rng(7)
    caps = np.array([8, 5, 20, 3], dtype=np.int64)
    genes = random_population(rng, caps, 20, size=400, width=12, max_count=10)
    fitness = np.arange(400, dtype=np.int64)
    settings = dict(children=400, crossover_rate=0.0, mutation_rate=1.0, tournament_size=1)
    got = host_breed_children(host_breed, genes, fitness, caps, CounterRng(3), **settings)
    np.testing.assert_array_equal(got, breed(genes, fitness, caps, CounterRng(3), **settings))
    draws = CounterRng(3)
    for _ in range(4):
        draws.stream()
    chosen = uniform_int(draws.random((400,)), 0, len(MUTATIONS))
    parents = genes[uniform_int(CounterRng(3).random((400, 1)), 0, 400)[:, 0]]
    for index in range(len(MUTATIONS)):
        members = chosen == index
        assert (got[members] != parents[members]).any(), list(MUTATIONS)[index]


@pytest.mark.usefixtures("fake_gpu")
def test_the_breeding_launcher_drives_its_kernel_with_the_right_arguments() -> None:
    """The fused breeder, through its launcher, equals the CPU operators (the CUDA
    evaluator's launcher: ``test_contract.py``)."""
    from tidgap.kernels.launcher import cuda_breed

    case = golden_cases()[4]
    ticked = tick_problem(Problem.from_dict(case["problem"]))
    rng = np.random.default_rng(9)
    population = random_individuals(rng, ticked, size=300, width=24)
    fitness = create_evaluator(ticked, "flush", "numba").forward_end(population.forward)
    settings = (290, 0.8, 0.9, 3)
    expected = breed(population.forward, fitness, ticked.forward_caps, CounterRng(2), *settings)
    got = cuda_breed(population.forward, fitness, ticked.forward_caps, CounterRng(2), *settings)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.usefixtures("fake_gpu")
@pytest.mark.parametrize("schedule", ["flush", "windowed"])
@pytest.mark.parametrize("backward", ["free", "mirrored"])
def test_gpu_search_matches_the_cpu_search(schedule: str, backward: str) -> None:
    """``search(backend="cuda")`` (launchers, device populations, fused breeding, for the
    windowed search the joint breeding kernel) finds the same plan as the CPU search with
    the same seed, under a memory limit too, and under the mirrored backward rule."""
    from tidgap.optimize.driver import search

    problem = load_problem("example:vgg16")
    options = dict(seed=4, generations=12, population=96, schedule=schedule, backward=backward)
    if schedule == "windowed":
        options["memory_limit"] = "1f1b"
    cpu = search(problem, backend="numba", **options)
    gpu = search(problem, backend="cuda", **options)
    assert gpu.backend == "cuda"
    assert gpu.plan == cpu.plan and gpu.evaluation == cpu.evaluation
    assert gpu.evaluations == cpu.evaluations
    assert [p.evaluation for p in gpu.tradeoff] == [p.evaluation for p in cpu.tradeoff]


@pytest.mark.usefixtures("fake_gpu")
def test_cli_gpu_search_runs_the_kernels() -> None:
    from click.testing import CliRunner

    from tidgap.cli import cli

    result = CliRunner().invoke(
        cli, ["search", "example:tiny-2", "--gpu", "--generations", "5", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert '"backend": "cuda"' in result.stdout


def test_every_mutation_has_a_named_branch_in_the_breeding_kernel() -> None:
    """``breed.cuh`` tests each registry mutation by its ``TIDGAP_OP_<NAME>`` and no bare
    number (the EvoX pairing of an operator and its kernel, by name)."""
    header = (KERNEL_DIR / "breed.cuh").read_text(encoding="utf-8")
    for name in MUTATIONS:
        assert f"op == TIDGAP_OP_{name.upper()}" in header, name
    assert not re.search(r"op == \d", header)
    assert operation_defines()[0] == f"-DTIDGAP_OP_{next(iter(MUTATIONS)).upper()}=0"
