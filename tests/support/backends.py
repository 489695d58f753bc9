"""Running any backend of the registry in a test: as is where it is usable, a GPU backend on
:mod:`tests.support.fake_cupy` where no GPU is."""

from __future__ import annotations

import shutil
import sys

import pytest

import tidgap.kernels
from tests.support import fake_cupy
from tidgap.backends import BACKENDS


def install_fake_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy replaced by :mod:`tests.support.fake_cupy` (kernels compiled with g++, run on the
    CPU) until the test ends; skip where there is no g++."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    # The launcher imports CuPy when it is imported: a fresh one binds to the fake.
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.module())
    monkeypatch.delitem(sys.modules, "tidgap.kernels.launcher", raising=False)
    monkeypatch.delattr(tidgap.kernels, "launcher", raising=False)


def runnable(name: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether backend ``name`` can run in this test: it is usable here, or it is a GPU
    backend and the fake CuPy (installed now) stands in for the GPU."""
    record = BACKENDS[name]
    if record.unusable_reason() is None:
        return True
    if record.device != "gpu" or shutil.which("g++") is None:
        return False
    install_fake_cupy(monkeypatch)
    return True


def run_here(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make backend ``name`` run in this test (see :func:`runnable`); skip saying why not."""
    if not runnable(name, monkeypatch):
        pytest.skip(f"the {name} backend cannot run here: {BACKENDS[name].unusable_reason()}")
