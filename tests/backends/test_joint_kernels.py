"""The joint GA's fused breeding kernel without a GPU: ``joint_breed.cu`` compiles for sm_80
and sm_90, and ``joint_breed.cuh``, built for the host, breeds exactly the children of
:func:`tidgap.optimize.joint_operators.joint_breed` (partitions, leads and codes) and
mutates exactly as :func:`~tidgap.optimize.joint_operators.mutate_repaired` (the
annealing's step)."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.host_build import build_host
from tests.support.nvcc import compile_inlined, needs_nvcc
from tests.support.populations import assert_breeds_into_a_part, assert_same_children, random_joint
from tidgap.backends.gpu import gpu_unusable_reason
from tidgap.kernels.source import KERNEL_DIR
from tidgap.optimize.joint_operators import (
    JOINT_MUTATIONS,
    JointGenes,
    joint_breed,
    mutate_repaired,
    mutation_table,
)
from tidgap.optimize.operators import BREED_DRAWS, MUTATE_DRAWS, MUTATIONS
from tidgap.optimize.rng import CounterRng, uniform_int


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_joint_breed_source_compiles_with_nvcc(arch: str, tmp_path: Path) -> None:
    """The exact text NVRTC gets (headers inlined) compiles without warnings."""
    result = compile_inlined("joint_breed.cu", tmp_path, arch)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr.lower(), result.stderr


@pytest.fixture(scope="module")
def host_joint_breed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``tidgap_joint_breed_host``: ``joint_breed.cuh``'s per-child breeding for the host."""
    return build_host(tmp_path_factory, "joint_breed_host", "tidgap_joint_breed_host")


def pointer(array: np.ndarray) -> ctypes.c_void_p:
    """The address of a contiguous array's data, for ctypes."""
    assert array.flags.c_contiguous
    return ctypes.c_void_p(array.ctypes.data)


def host_children(
    kernel: Any,
    genes: JointGenes,
    fitness: np.ndarray,
    forward_caps: np.ndarray,
    backward_caps: np.ndarray,
    rng: CounterRng,
    children: int,
    crossover_rate: float,
    mutation_rate: float,
    tournament_size: int,
    mirrored: bool = False,
) -> JointGenes:
    """Call the host build as :func:`tidgap.kernels.launcher.cuda_joint_breed` calls the GPU."""
    population, stages, width = genes.forward.shape
    streams = rng.streams(BREED_DRAWS)
    inputs = [np.ascontiguousarray(rows, dtype=np.int32) for rows in genes.rows()]
    caps = [np.ascontiguousarray(c, dtype=np.int64) for c in (forward_caps, backward_caps)]
    out = JointGenes(
        *(np.full((children, stages, width), -7, dtype=np.int32) for _ in range(3)),
        np.full((children, stages, 2 * width), 7, dtype=np.int8),
    )
    kernel(
        *(pointer(rows) for rows in inputs),
        pointer(np.ascontiguousarray(fitness, dtype=np.int64)),
        ctypes.c_longlong(population),
        ctypes.c_int(stages),
        ctypes.c_int(width),
        *(pointer(c) for c in caps),
        ctypes.c_int(tournament_size),
        ctypes.c_double(crossover_rate),
        ctypes.c_double(mutation_rate),
        ctypes.c_int(len(mutation_table(mirrored))),
        ctypes.c_int(mirrored),
        pointer(streams),
        ctypes.c_longlong(children),
        *(pointer(rows) for rows in (out.forward, out.backward, out.lead, out.codes)),
    )
    return out


@pytest.mark.parametrize("mirrored", [False, True])
@pytest.mark.parametrize("width", [3, 8, 32])
@pytest.mark.parametrize("seed", range(6))
def test_host_joint_breed_equals_the_xp_operators(
    host_joint_breed: Any, seed: int, width: int, mirrored: bool
) -> None:
    """Selection, crossover, every mutation (of the mirrored table, then the mirror, when
    ``mirrored``) and the repair: the kernel's children are ``joint_breed``'s, all four
    arrays, for S = 1..6."""
    rng = np.random.default_rng(1000 * width + seed)
    stages = seed + 1
    genes, forward_caps, backward_caps = random_joint(rng, stages, width, size=1000)
    fitness = rng.integers(0, 100, size=1000).astype(np.int64)  # ties on purpose
    settings = dict(
        children=990, crossover_rate=0.7, mutation_rate=0.9, tournament_size=3, mirrored=mirrored
    )
    args = (genes, fitness, forward_caps, backward_caps)
    expected = joint_breed(*args, CounterRng(seed), **settings)
    got = host_children(host_joint_breed, *args, CounterRng(seed), **settings)
    assert_same_children(got, expected)


def test_host_joint_breed_exercises_every_mutation(host_joint_breed: Any) -> None:
    """With mutation certain, no crossover and repaired parents, each registry operator
    changes some children, and the kernel still equals the xp code."""
    rng = np.random.default_rng(5)
    genes, forward_caps, backward_caps = random_joint(rng, stages=4, width=12, size=1200)
    genes = genes.repaired()
    fitness = np.arange(1200, dtype=np.int64)
    settings = dict(children=1200, crossover_rate=0.0, mutation_rate=1.0, tournament_size=1)
    args = (genes, fitness, forward_caps, backward_caps)
    got = host_children(host_joint_breed, *args, CounterRng(3), **settings)
    assert_same_children(got, joint_breed(*args, CounterRng(3), **settings))
    draws = CounterRng(3)
    for _ in range(4):
        draws.stream()
    chosen = uniform_int(draws.random((1200,)), 0, len(JOINT_MUTATIONS))
    parents = genes.take(uniform_int(CounterRng(3).random((1200, 1)), 0, 1200)[:, 0])
    for index, name in enumerate(JOINT_MUTATIONS):
        members = chosen == index
        changed = [
            (getattr(got, gene)[members] != getattr(parents, gene)[members]).any()
            for gene in ("forward", "backward", "lead", "codes")
        ]
        assert any(changed), name


@pytest.fixture(scope="module")
def host_joint_mutate(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``tidgap_joint_mutate_host``: ``joint_breed.cuh``'s mutation and repair in place."""
    return build_host(tmp_path_factory, "joint_breed_host", "tidgap_joint_mutate_host")


@pytest.mark.parametrize("mirrored", [False, True])
@pytest.mark.parametrize("rate", [1.0, 0.4])
@pytest.mark.parametrize("seed", range(3))
def test_host_joint_mutate_equals_mutate_repaired(
    host_joint_mutate: Any, seed: int, rate: float, mirrored: bool
) -> None:
    """The annealing's step: every mutation (or none, at a rate below 1), then the repair."""
    rng = np.random.default_rng(40 + seed)
    genes, forward_caps, backward_caps = random_joint(rng, seed + 2, width=16, size=1500)
    expected = mutate_repaired(genes, forward_caps, backward_caps, CounterRng(seed), rate, mirrored)
    population, stages, width = genes.forward.shape
    rows = [np.array(r, dtype=np.int32) for r in genes.rows()]
    codes = np.full((population, stages, 2 * width), 7, dtype=np.int8)
    streams = CounterRng(seed).streams(MUTATE_DRAWS)
    host_joint_mutate(
        *(pointer(r) for r in rows),
        ctypes.c_longlong(population),
        ctypes.c_int(stages),
        ctypes.c_int(width),
        *(pointer(np.ascontiguousarray(c, dtype=np.int64)) for c in (forward_caps, backward_caps)),
        ctypes.c_double(rate),
        ctypes.c_int(len(mutation_table(mirrored))),
        ctypes.c_int(mirrored),
        pointer(streams),
        pointer(codes),
    )
    assert_same_children(JointGenes(*rows, codes), expected)


@pytest.mark.parametrize("mirrored", [False, True])
@pytest.mark.usefixtures("fake_gpu")
def test_the_mutation_launcher_drives_its_kernel_with_the_right_arguments(mirrored: bool) -> None:
    """``cuda_joint_mutate`` through the CuPy stand-in equals ``mutate_repaired`` and leaves
    its input as it was."""
    from tidgap.kernels.launcher import cuda_joint_mutate

    rng = np.random.default_rng(13)
    genes, forward_caps, backward_caps = random_joint(rng, stages=5, width=32, size=300)
    genes = genes.repaired()
    kept = [rows.copy() for rows in genes.arrays()]
    args = (genes, forward_caps, backward_caps)
    expected = mutate_repaired(*args, CounterRng(6), 1.0, mirrored)
    got = cuda_joint_mutate(*args, CounterRng(6), 1.0, mirrored)
    assert_same_children(got, expected)
    for before, after in zip(kept, genes.arrays(), strict=True):
        np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize("mirrored", [False, True])
@pytest.mark.usefixtures("fake_gpu")
def test_the_joint_breeding_launcher_drives_its_kernel_with_the_right_arguments(
    mirrored: bool,
) -> None:
    """``cuda_joint_breed`` through the CuPy stand-in equals ``joint_breed``, codes included."""
    from tidgap.kernels.launcher import cuda_joint_breed

    rng = np.random.default_rng(11)
    genes, forward_caps, backward_caps = random_joint(rng, stages=5, width=32, size=200)
    genes = genes.repaired()
    fitness = rng.integers(0, 1000, size=200).astype(np.int64)
    args = (genes, fitness, forward_caps, backward_caps)
    settings = (190, 0.8, 0.9, 3, mirrored)
    expected = joint_breed(*args, CounterRng(2), *settings)
    assert_same_children(cuda_joint_breed(*args, CounterRng(2), *settings), expected)
    named = dict(zip(("children", "crossover_rate", "mutation_rate", "tournament_size",
                      "mirrored"), settings, strict=True))  # fmt: skip
    assert_breeds_into_a_part(cuda_joint_breed, args, 2, named)


GPU_REASON = gpu_unusable_reason()


@pytest.mark.parametrize("mirrored", [False, True])
@pytest.mark.skipif(GPU_REASON is not None, reason=f"no usable GPU: {GPU_REASON}")
def test_the_joint_breeding_kernel_on_a_gpu_equals_the_xp_operators(mirrored: bool) -> None:
    """On a real GPU (NVRTC, device arrays, many blocks): ``joint_breed``'s children."""
    import cupy

    from tidgap.kernels.launcher import cuda_joint_breed

    rng = np.random.default_rng(12)
    genes, forward_caps, backward_caps = random_joint(rng, stages=6, width=32, size=4096)
    fitness = rng.integers(0, 1000, size=4096).astype(np.int64)
    settings = (65536, 0.8, 0.9, 3, mirrored)
    expected = joint_breed(genes, fitness, forward_caps, backward_caps, CounterRng(4), *settings)
    device = JointGenes(
        *(cupy.asarray(rows) for rows in (genes.forward, genes.backward)), cupy.asarray(genes.lead)
    )
    got = cuda_joint_breed(
        device,
        cupy.asarray(fitness),
        cupy.asarray(forward_caps),
        cupy.asarray(backward_caps),
        CounterRng(4),
        *settings,
    )
    host = JointGenes(*(rows.get() for rows in (got.forward, got.backward, got.lead, got.codes)))
    assert_same_children(host, expected)


def test_every_joint_mutation_has_a_named_branch_in_the_kernel() -> None:
    """``joint_breed.cuh`` tests each registry mutation by its ``TIDGAP_JOINT_<NAME>`` (the
    partition ones through ``TIDGAP_PARTITION_MUTATION(<NAME>)``) and no bare number."""
    header = (KERNEL_DIR / "joint_breed.cuh").read_text(encoding="utf-8")
    partition = {
        f"{direction}_{name}": name for direction in ("forward", "backward") for name in MUTATIONS
    }
    for name in JOINT_MUTATIONS:
        if name in partition:
            assert f"TIDGAP_PARTITION_MUTATION({partition[name].upper()})" in header, name
        else:
            assert f"op == TIDGAP_JOINT_{name.upper()}" in header, name
    assert set(partition) <= set(JOINT_MUTATIONS)
    assert not re.search(r"op == -?\d", header)
