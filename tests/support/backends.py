"""Running any backend of the registry in a test: as is where it is usable, a GPU backend on
:mod:`tests.support.fake_cupy` where no GPU is."""

from __future__ import annotations

import importlib.util
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
    # The launcher imports CuPy when it is imported: a fresh one binds to the fake. It is
    # set, not left to the next import, so that the test's end puts back the real one, or
    # removes it where none was imported yet (else a later test on a real GPU, in the same
    # process, would launch the fake's host builds with CuPy arrays).
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.module())
    spec = importlib.util.find_spec("tidgap.kernels.launcher")
    assert spec is not None and spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, launcher)
    spec.loader.exec_module(launcher)
    monkeypatch.setattr(tidgap.kernels, "launcher", launcher, raising=False)


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
