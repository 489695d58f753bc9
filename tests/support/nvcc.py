"""Compiling the CUDA sources with ``nvcc`` on a machine without a GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tidgap.kernels.source import kernel_source, operation_defines

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def compile_inlined(
    name: str, folder: Path, arch: str, *options: str
) -> subprocess.CompletedProcess[str]:
    """``nvcc -c`` of ``kernels/NAME`` as NVRTC gets it (its headers inlined, written to
    ``folder``) for ``arch``, with the operation defines every compile passes and
    ``options``; the finished process (its ``stderr`` holds nvcc's and ptxas's report)."""
    source = folder / f"inlined_{name}"
    source.write_text(kernel_source(name))
    assert "#include" not in source.read_text()
    command = ["nvcc", f"-arch={arch}", "-std=c++17", *operation_defines(), *options]
    command += ["-c", str(source), "-o", str(folder / f"{Path(name).stem}.o")]
    return subprocess.run(command, capture_output=True, text=True)
