"""How deep and wide a pipeline the GPU's ordered-plan kernel holds: its thread kernels keep
each individual's scratch in local memory, which CUDA caps at 512 KiB per thread and
reserves for every thread the device holds at once. A windowed search on ``auto`` runs on
the CPU beyond either; on ``cuda`` it is refused in one line."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from tests.support.backends import install_fake_cupy
from tests.support.fake_cupy import SHARED_BYTES_OPTIN
from tests.support.nvcc import compile_inlined, needs_nvcc
from tidgap import InputError, Problem, search
from tidgap.backends import BACKENDS
from tidgap.kernels.source import (
    LOCAL_MEMORY_LIMIT,
    context_local_memory,
    ordered_refusal,
    scratch_width,
    thread_scratch_bytes,
)
from tidgap.optimize.windowed_driver import windowed_backend
from tidgap.profiling.synth import synth_problem


@needs_nvcc
@pytest.mark.parametrize(("stages", "width"), [(8, 32), (64, 512), (256, 64)])
def test_the_scratch_is_the_stack_frame_nvcc_reports(
    stages: int, width: int, tmp_path: Path
) -> None:
    """At the compile-time sizes the launcher sets (S=64, K=512: 790,272 bytes)."""
    sizes = [f"-DTIDGAP_MAX_S={scratch_width(stages)}", f"-DTIDGAP_MAX_K={scratch_width(width)}"]
    result = compile_inlined("windowed_evaluate.cu", tmp_path, "sm_90", *sizes, "-Xptxas", "-v")
    assert result.returncode == 0, result.stderr
    frames = re.findall(r"(\d+) bytes stack frame", result.stderr)
    assert [int(frame) for frame in frames] == [thread_scratch_bytes(stages, width)]


def test_the_refusal_follows_cuda_s_local_memory_limit() -> None:
    assert thread_scratch_bytes(256, 64) <= LOCAL_MEMORY_LIMIT < thread_scratch_bytes(512, 64)
    assert ordered_refusal(256, 64) is None
    assert ordered_refusal(128, 256) == (
        "the GPU's ordered-plan kernel needs 775 KiB of scratch per individual for 128 "
        "stages of up to 256 microbatches, over CUDA's 512 KiB per thread"
    )


def usable_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CuPy stand-in installed and the ``cuda`` backend taken as usable (``auto`` may
    choose it)."""
    install_fake_cupy(monkeypatch)
    monkeypatch.setitem(
        BACKENDS, "cuda", dataclasses.replace(BACKENDS["cuda"], unusable_reason=lambda: None)
    )


def as_h100(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CuPy stand-in as a usable H100: 132 multiprocessors of 2048 threads, 79 GiB
    free."""
    usable_stand_in(monkeypatch)
    fake = sys.modules["cupy"]
    attributes = {
        "MaxThreadsPerMultiProcessor": 2048,
        "MultiProcessorCount": 132,
        "MaxSharedMemoryPerBlockOptin": SHARED_BYTES_OPTIN,
    }
    device = types.SimpleNamespace(synchronize=lambda: None, attributes=attributes)
    monkeypatch.setattr(fake.cuda, "Device", lambda *_: device)
    monkeypatch.setattr(
        fake.cuda.runtime, "memGetInfo", lambda: (79 * 2**30, 80 * 2**30), raising=False
    )


def test_the_refusal_counts_the_local_memory_cuda_reserves_for_every_resident_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """399 KiB a thread for 256 stages of 64 microbatches: CUDA allows it per thread, and
    reserves it for 270,336 threads (103 GiB), which an H100 does not have; an 8-stage
    search needs 1.8 GiB. ``auto`` searches the deep pipeline on the CPU."""
    assert context_local_memory(6624, 2) == 2 * 7168  # 6624 + 512, rounded up to 256 bytes
    assert ordered_refusal(256, 64) is None  # no device to ask
    as_h100(monkeypatch)
    assert ordered_refusal(8, 32) is None
    assert ordered_refusal(256, 64) == (
        "the GPU's ordered-plan kernel needs 399 KiB of scratch per individual for 256 "
        "stages of up to 64 microbatches, which CUDA reserves for each of the device's "
        "270336 resident threads: 103.0 GiB, over 50% of its 79.0 GiB free"
    )
    deep = Problem.from_dict(synth_problem(0, stages=256, batch_size=64))
    assert windowed_backend(deep, None, None) == "numba"
    shallow = Problem.from_dict(synth_problem(0, stages=8, batch_size=64))
    assert windowed_backend(shallow, None, None) == "cuda"


def wide_problem() -> Problem:
    """2 stages of 1100 samples: a width of 1100 needs 768 KiB per individual (the kernel
    is compiled for at least 16 stages)."""
    return Problem.from_dict(synth_problem(0, stages=2, batch_size=1100))


def test_the_launcher_refuses_chromosomes_its_kernels_cannot_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_fake_cupy(monkeypatch)
    from tidgap.backends.ticks import tick_problem
    from tidgap.kernels.launcher import CudaOrderedEnds

    problem = wide_problem()
    ticked = tick_problem(problem)
    genes = np.zeros((1, 2, 1100), dtype=np.int32)
    with pytest.raises(ValueError, match="768 KiB of scratch per individual"):
        CudaOrderedEnds(ticked)(genes, genes, np.zeros((1, 2, 2200), np.int8), ticked)


def test_a_windowed_search_too_wide_for_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """On ``cuda``: one line naming ``backend``, before the seeding. On ``auto`` with a GPU
    usable: the CPU's search, the same plan as ``numba``'s."""
    usable_stand_in(monkeypatch)
    problem = wide_problem()
    assert windowed_backend(problem, None, None) == "cuda"  # the default width, 64
    assert windowed_backend(problem, 1100, None) == "numba"
    settings = {"seed": 0, "generations": 1, "population": 8, "max_microbatches": 1100}
    with pytest.raises(InputError, match="768 KiB of scratch") as refused:
        search(problem, backend="cuda", **settings)
    assert refused.value.source == "backend"
    assert "search on the CPU (--cpu), or with fewer --max-microbatches" in str(refused.value)
    chosen = search(problem, backend="auto", **settings)
    assert chosen.backend == "numba"
    assert chosen.plan == search(problem, backend="numba", **settings).plan


def test_the_command_line_refuses_it_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from tidgap.cli import cli

    usable_stand_in(monkeypatch)
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(synth_problem(0, stages=2, batch_size=1100)))
    out = tmp_path / "plan.json"
    out.write_text("kept")
    arguments = ["search", str(path), "--gpu", "--generations", "1", "--population", "8"]
    result = CliRunner().invoke(cli, [*arguments, "--max-microbatches", "1100", "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "tidgap: error: backend: the GPU's ordered-plan kernel needs 768 KiB of scratch per "
        "individual for 2 stages of up to 1100 microbatches, over CUDA's 512 KiB per thread: "
        "search on the CPU (--cpu), or with fewer --max-microbatches"
    ]
    assert out.read_text() == "kept"


def test_the_benchmark_skips_what_the_kernel_cannot_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    from tidgap.analysis.throughput import measure_backend
    from tidgap.analysis.workload import Workload
    from tidgap.backends.ticks import tick_problem

    install_fake_cupy(monkeypatch)
    problem = wide_problem()

    def draw(family: str, size: int) -> None:
        raise AssertionError("drew a population the kernel cannot hold")

    workload = Workload(problem, tick_problem(problem), 1100, draw)  # type: ignore[arg-type]
    rows = list(measure_backend(BACKENDS["cuda"], workload, ["windowed"], [8, 64], 1, 0))
    assert [row.skipped for row in rows] == [ordered_refusal(2, 1100)] * 2


def test_auto_counts_the_width_a_memory_limit_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 byte a stage holds 1 sample: 1100 microbatches. ``auto`` chose the GPU from the
    width it starts from and the search refused (its advice, fewer --max-microbatches,
    impossible)."""
    usable_stand_in(monkeypatch)
    document = synth_problem(0, stages=2, batch_size=1100)
    for stage in document["stages"]:
        stage["activation_bytes"] = 1
    problem = Problem.from_dict(document)
    assert windowed_backend(problem, None, None) == "cuda"
    assert windowed_backend(problem, None, 1) == "numba"
    settings = {"seed": 0, "generations": 1, "population": 8, "memory_limit": 1}
    assert search(problem, backend="auto", **settings).backend == "numba"
    with pytest.raises(
        InputError, match=r"over CUDA's 512 KiB per thread: search on the CPU \(--cpu\)$"
    ):
        search(problem, backend="cuda", **settings)
