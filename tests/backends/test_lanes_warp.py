"""The lane kernel (``kernels/windowed_lanes.cu``) run by a warp of 32 real threads under
ThreadSanitizer (``tests/support/native/lanes_warp.cpp``): its lanes share the scratch as
a GPU warp shares shared memory, and sync only where the kernel says, so a lane that reads
or writes what another writes between the same two syncs is a data race TSan reports (the
lanes restart staggered after each sync, in alternating order, so that TSan's short memory
of a word's accesses still holds the other side of a race; the vote, ``__any_sync``, orders
no memory on a GPU and none here). The
stand-in runs the lanes of a round one after the other and cannot see one. Each run must
report no race and give Numba's ticks and peak held samples; with a sync dropped, TSan
must report one (the harness sees what it is there to see)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.support.host_build import NATIVE
from tests.support.populations import (
    random_individuals,
    random_orders,
    random_ticked,
    with_run_tables,
)
from tidgap.backends.ticks import TickedProblem
from tidgap.fallback_cpu.windowed_numba import ordered_ends
from tidgap.kernels.source import KERNEL_DIR, lane_group, operation_defines, scratch_width
from tidgap.optimize.genome import Population

#: TSan: stop at the first report, exit 66.
TSAN_OPTIONS = "halt_on_error=1 exitcode=66"


def tsan_available(folder: Path) -> bool:
    """Whether g++ here builds and runs a program with ``-fsanitize=thread``."""
    if shutil.which("g++") is None:
        return False
    source, program = folder / "probe.cpp", folder / "probe"
    source.write_text("int main() { return 0; }\n")
    built = subprocess.run(["g++", "-fsanitize=thread", str(source), "-o", str(program)])
    return built.returncode == 0 and subprocess.run([str(program)]).returncode == 0


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory):
    """``build(stages, width, drop_sync=0)``: the harness for that shape, built once."""
    folder = tmp_path_factory.mktemp("lanes_warp")
    if not tsan_available(folder):
        pytest.skip("g++ cannot build and run programs with -fsanitize=thread here")
    built: dict[tuple[int, int, int], Path] = {}

    def program(stages: int, width: int, drop_sync: int = 0) -> Path:
        key = (lane_group(stages), scratch_width(width), drop_sync)
        if key not in built:
            path = folder / "lanes_warp_{}_{}_{}".format(*key)
            defines = [f"-DTIDGAP_GROUP={key[0]}", f"-DTIDGAP_MAX_K={key[1]}"]
            defines += [f"-DTIDGAP_DROP_SYNC={drop_sync}"] if drop_sync else []
            subprocess.run(
                ["g++", "-std=c++17", "-O1", "-g", "-fsanitize=thread", "-pthread"]
                + ["-Wall", "-Wextra", "-Werror", "-I", str(KERNEL_DIR)]
                + [*operation_defines(), *defines, str(NATIVE / "lanes_warp.cpp"), "-o", str(path)],
                check=True,
            )
            built[key] = path
        return built[key]

    return program


def warp_run(
    program: Path, ticked: TickedProblem, population: Population, folder: Path
) -> tuple[subprocess.CompletedProcess, np.ndarray, np.ndarray]:
    """Run ``program`` on ``population``: the process, ``(P,)`` ticks and ``(P, S)`` peak
    held samples (as ``CudaOrderedEnds`` returns them: the kernel's units times
    ``ticked.unit``)."""
    count, stages, width = population.forward.shape
    assert population.order is not None
    compute = (ticked.forward_compute, ticked.backward_compute)
    arrays = [
        population.forward.astype(np.int32),
        population.backward.astype(np.int32),
        population.order.astype(np.int8),
        *(t.astype(np.int64) for t in compute),
        ticked.forward_transfer.astype(np.int64),
        ticked.backward_transfer.astype(np.int64),
        ticked.tails.astype(np.int64),
        *ticked.run_tables(),
    ]
    scalars = [count, stages, width, population.order.shape[2]]
    scalars += [ticked.forward_compute.shape[1], int(ticked.run_priced)]
    inputs, outputs = folder / "in.bin", folder / "out.bin"
    with inputs.open("wb") as file:
        for array in arrays:
            file.write(np.int64(array.size).tobytes() + np.ascontiguousarray(array).tobytes())
        file.write(np.array(scalars, dtype=np.int64).tobytes())
    done = subprocess.run(
        [str(program), str(inputs), str(outputs)],
        capture_output=True,
        text=True,
        env={**os.environ, "TSAN_OPTIONS": TSAN_OPTIONS},
        timeout=300,
    )
    if done.returncode != 0:
        return done, np.empty(0), np.empty(0)
    results = np.fromfile(outputs, dtype=np.int64)
    return done, results[:count], results[count:].reshape(count, stages) * ticked.unit


def random_case(
    stages: int, seed: int, run_priced: bool = False
) -> tuple[TickedProblem, Population]:
    """13 random individuals (some deadlocked, some with broken counts) of width 12."""
    rng = np.random.default_rng(seed)
    ticked = random_ticked(rng, stages, int(rng.integers(4, 13)), 1000)
    if run_priced:
        ticked = with_run_tables(ticked)
    return ticked, random_orders(rng, random_individuals(rng, ticked, 13, 12, max_count=12))


@pytest.mark.parametrize(
    ("stages", "run_priced"),
    [(1, False), (3, False), (5, True), (8, False), (12, True), (32, False)],
)
def test_a_warp_of_threads_races_nowhere_and_gives_numbas_ticks(
    build, tmp_path: Path, stages: int, run_priced: bool
) -> None:
    """Lane groups of 1 to 32 lanes (one individual per lane up to one per warp); 13
    individuals, so the warp's last round of individuals leaves some groups idle."""
    ticked, population = random_case(stages, 80 + stages, run_priced)
    done, fitness, held = warp_run(build(stages, 12), ticked, population, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ThreadSanitizer" not in done.stderr
    expected = ordered_ends(population.forward, population.backward, population.order, ticked)
    np.testing.assert_array_equal(fitness, expected[0])
    np.testing.assert_array_equal(held, expected[1])


@pytest.mark.parametrize("drop_sync", [1, 2, 3])
def test_a_dropped_sync_is_a_race_tsan_reports(build, tmp_path: Path, drop_sync: int) -> None:
    """With a sync dropped (the harness's ``TIDGAP_DROP_SYNC``: 1, among others, the sync
    after each round's snapshots; 2 the one after each round's advances but the first, which
    the vote after it does not replace; 3 the first round's after the advances), one lane
    writes what a neighbour reads in the same phase."""
    ticked, population = random_case(3, 7)
    done, _, _ = warp_run(build(3, 12, drop_sync), ticked, population, tmp_path)
    assert done.returncode == 66
    assert "WARNING: ThreadSanitizer: data race" in done.stderr
