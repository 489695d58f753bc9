"""Host builds of the CUDA headers: ``tests/support/native/NAME.cpp`` compiled with g++
(``-Wall -Wextra -Werror``, the kernels' operation defines) and loaded through ctypes."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tidgap.kernels.source import KERNEL_DIR, operation_defines

NATIVE = Path(__file__).parent / "native"


def build_host(tmp_path_factory: pytest.TempPathFactory, name: str, function: str) -> Any:
    """``function`` from ``tests/support/native/NAME.cpp`` (kernel headers included), built
    with g++."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    library = tmp_path_factory.mktemp("native") / f"{name}.so"
    subprocess.run(
        [
            "g++",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-shared",
            "-fPIC",
            "-I",
            str(KERNEL_DIR),
            *operation_defines(),
            str(NATIVE / f"{name}.cpp"),
            "-o",
            str(library),
        ],
        check=True,
    )
    host_function = getattr(ctypes.CDLL(str(library)), function)
    host_function.restype = None
    return host_function
