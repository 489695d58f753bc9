"""The CUDA backend. Where no GPU is usable, the device tests skip (saying why) and the
checks of the 'is a GPU usable' logic and of ``--gpu`` still run."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest
from click.testing import CliRunner

from tests.support.populations import random_individuals
from tidgap import load_problem
from tidgap.backends import default_backend
from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.gpu import gpu_unusable_reason
from tidgap.backends.ticks import tick_problem
from tidgap.cli import cli
from tidgap.optimize.driver import search

REASON = gpu_unusable_reason()
needs_gpu = pytest.mark.skipif(REASON is not None, reason=f"no usable GPU: {REASON}")


class FakeRuntimeError(Exception):
    """Stands in for ``cupy.cuda.runtime.CUDARuntimeError``."""


def fake_cupy(
    devices: int | None = None, error: str = "", runtime: int = 13000, driver: int = 12040
) -> types.ModuleType:
    """A module shaped like CuPy whose device query returns ``devices`` or raises ``error``."""

    def get_device_count() -> int:
        if devices is None:
            raise FakeRuntimeError(error)
        return devices

    module = types.ModuleType("cupy")
    module.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(
            CUDARuntimeError=FakeRuntimeError,
            getDeviceCount=get_device_count,
            runtimeGetVersion=lambda: runtime,
            driverGetVersion=lambda: driver,
        )
    )
    return module


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (
            None,
            "CuPy is not installed (pip install cupy-cuda12x or cupy-cuda13x, for your CUDA major)",
        ),
        (
            fake_cupy(error="cudaErrorNoDevice: no CUDA-capable device is detected"),
            "no CUDA device found",
        ),
        (fake_cupy(devices=0), "no CUDA device found"),
        (
            fake_cupy(error="cudaErrorInsufficientDriver: driver version is insufficient"),
            "the NVIDIA driver is too old for this CuPy (built for CUDA 13.0, the driver "
            "supports 12.4)",
        ),
        (fake_cupy(error="cudaErrorInsufficientDriver: x", driver=0), "no NVIDIA driver found"),
        (fake_cupy(error="cudaErrorUnknown: boom"), "CUDA is not usable: cudaErrorUnknown: boom"),
        (fake_cupy(devices=1), None),
    ],
)
def test_gpu_unusable_reason(
    monkeypatch: pytest.MonkeyPatch, module: types.ModuleType | None, expected: str | None
) -> None:
    monkeypatch.setitem(sys.modules, "cupy", module)  # None makes `import cupy` fail
    assert gpu_unusable_reason() == expected


def test_default_backend_falls_back_to_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(devices=0))
    assert default_backend() == "numba"
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(devices=1))
    assert default_backend() == "cuda"


@pytest.mark.skipif(REASON is None, reason="a GPU is usable here")
@pytest.mark.parametrize("option", [["--gpu"], ["--backend", "cuda"]])
def test_gpu_option_without_a_gpu_exits_2_saying_why(option: list[str]) -> None:
    result = CliRunner().invoke(cli, ["search", "example:tiny-2", *option])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"tidgap: error: {option[0]}: no usable GPU: {REASON}\n"


def test_gpu_and_cpu_together_is_bad_usage() -> None:
    result = CliRunner().invoke(cli, ["search", "--gpu", "--cpu"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1


# --- on a GPU --------------------------------------------------------------------------


@needs_gpu
def test_cuda_handles_wide_chromosomes_and_large_populations() -> None:
    import cupy

    ticked = tick_problem(load_problem("example:hetero-8"))
    rng = np.random.default_rng(2)
    population = random_individuals(rng, ticked, size=4096, width=32)
    tiled = np.tile(population.forward, (64, 1, 1))  # 262144 individuals
    cuda = create_evaluator(ticked, "flush", "cuda")
    got = cuda.forward_end(cupy.asarray(tiled)).get()
    expected = create_evaluator(ticked, "flush", "numba").forward_end(population.forward)
    np.testing.assert_array_equal(got, np.tile(expected, 64))


@needs_gpu
def test_gpu_search_is_reproducible_and_matches_the_cpu() -> None:
    problem = load_problem("example:vgg16")
    runs = [
        search(problem, seed=5, generations=20, population=256, backend=b)
        for b in ("cuda", "cuda", "numba")
    ]
    plans = [(r.plan.forward, r.plan.backward) for r in runs]
    assert plans[0] == plans[1], "GPU search not reproducible"
    assert plans[0] == plans[2], "GPU and CPU searches differ for the same seed"


@needs_gpu
@pytest.mark.parametrize("schedule", ["windowed", "flush"])
def test_cli_gpu_search_gives_the_cpu_searchs_plan(schedule: str) -> None:
    """``--gpu`` runs on CUDA and, with the same seed and generations, returns the plan
    Numba's search returns (the backends agree exactly, draws included)."""
    args = ["search", "example:hetero-8", "--schedule", schedule, "--generations", "5"]
    documents = []
    for backend in ("--gpu", "--cpu"):
        result = CliRunner().invoke(cli, [*args, backend, "--seed", "3", "--json"])
        assert result.exit_code == 0, result.output
        documents.append(json.loads(result.stdout))
    gpu, cpu = documents
    assert gpu["search"]["backend"] == "cuda" and cpu["search"]["backend"] != "cuda"
    for key in ("forward", "backward", "order", "predicted"):
        assert gpu.get(key) == cpu.get(key), key
