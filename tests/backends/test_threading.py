"""The Numba threading default (``tidgap.fallback_cpu``): a short libgomp spin unless the user
chose otherwise.

Each case runs in a fresh interpreter, since libgomp reads its settings once per process. The
child reports ``os.environ``, Numba's threading layer and thread count, and the spin count
the running libgomp actually uses (``omp_display_env``, printed on stderr).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tidgap.fallback_cpu import SPIN_COUNT, USER_SETTINGS

#: Run in the child after the case's own statements: report what is in force.
REPORT = """
import ctypes, json, os
import numba
threads = numba.get_num_threads()
layer = numba.threading_layer()
print(json.dumps({"spincount": os.environ.get("GOMP_SPINCOUNT"),
                  "policy": os.environ.get("OMP_WAIT_POLICY"), "layer": layer,
                  "threads": threads, "cpus": len(os.sched_getaffinity(0))}), flush=True)
if layer == "omp":
    display = getattr(ctypes.CDLL("libgomp.so.1"), "omp_display_env", None)
    if display is not None:
        display(1)
"""

#: libgomp's own spin counts: no variable set, OMP_WAIT_POLICY=ACTIVE, OMP_WAIT_POLICY=PASSIVE.
GOMP_DEFAULT_SPIN, GOMP_ACTIVE_SPIN, GOMP_PASSIVE_SPIN = 300000, 30000000000, 0

CHAIN_ENDS_CALL = """
import numpy as np
from tidgap.fallback_cpu.flush_numba import chain_ends
sizes = np.array([[[2, 2], [1, 3]]] * 8, dtype=np.int32)
ends = chain_ends(sizes, np.arange(10).reshape(2, 5), np.ones((1, 5), dtype=np.int64))
assert ends.shape == (8, 2), ends
"""


def run_child(statements: str, **settings: str) -> tuple[dict, int | None]:
    """Run ``statements`` then :data:`REPORT` with only ``settings`` among the threading
    variables; return the report and libgomp's spin count (None when not shown)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in (*USER_SETTINGS, "NUMBA_NUM_THREADS")
    }
    env.update(settings)
    result = subprocess.run(
        [sys.executable, "-c", statements + REPORT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    spin = re.search(r"GOMP_SPINCOUNT = '(\d+)'", result.stderr)
    return report, int(spin.group(1)) if spin else None


def libgomp_spin(report: dict, spin: int | None) -> int:
    """The spin count, or skip when the layer is not libgomp or it cannot show it."""
    if report["layer"] != "omp" or spin is None:
        pytest.skip(f"threading layer {report['layer']}: no libgomp spin count to read")
    return spin


def test_default_spin_for_tidgap_kernels() -> None:
    report, spin = run_child(CHAIN_ENDS_CALL)
    assert (report["spincount"], report["policy"]) == (str(SPIN_COUNT), None)
    assert report["threads"] == report["cpus"]
    assert libgomp_spin(report, spin) == SPIN_COUNT < GOMP_DEFAULT_SPIN


def test_default_applies_when_numba_was_imported_first() -> None:
    report, spin = run_child("import numba\nimport tidgap.fallback_cpu.flush_numba\n")
    assert report["spincount"] == str(SPIN_COUNT)
    assert libgomp_spin(report, spin) == SPIN_COUNT


@pytest.mark.parametrize(
    ("settings", "expected_spin"),
    [
        ({"OMP_WAIT_POLICY": "ACTIVE"}, GOMP_ACTIVE_SPIN),
        ({"OMP_WAIT_POLICY": "passive"}, GOMP_PASSIVE_SPIN),
        ({"GOMP_SPINCOUNT": "5000"}, 5000),
    ],
)
def test_explicit_setting_wins(settings: dict, expected_spin: int) -> None:
    report, spin = run_child("import tidgap.fallback_cpu.flush_numba\n", **settings)
    assert (report["spincount"], report["policy"]) == (
        settings.get("GOMP_SPINCOUNT"),
        settings.get("OMP_WAIT_POLICY"),
    )
    assert libgomp_spin(report, spin) == expected_spin


def test_threads_started_before_import_keep_libgomp_default() -> None:
    """The documented limit: libgomp read its settings when the threads started."""
    report, spin = run_child("import numba\nnumba.get_num_threads()\nimport tidgap.fallback_cpu\n")
    assert report["spincount"] == str(SPIN_COUNT)  # set, but too late for this process
    assert libgomp_spin(report, spin) == GOMP_DEFAULT_SPIN
