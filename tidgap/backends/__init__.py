"""The evaluation backends: ``BACKENDS``, name -> :class:`Backend` record, in order of
preference (the first usable one is the default).

A record names its code as ``"module:attribute"`` strings, imported on first use, so
``import tidgap`` imports neither CuPy nor Numba. No module outside this package tests a
backend by its name: what differs between backends is a field here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from tidgap.backends.gpu import device_free_memory, gpu_unusable_reason


@dataclass(frozen=True)
class Backend:
    """One backend: where its populations live and which code evaluates and breeds them.

    - ``title``: its name in messages ("no usable GPU: ...");
    - ``device``: ``"gpu"`` or ``"cpu"``, what ``--gpu`` / ``--cpu`` choose among;
    - ``namespace()``: the array module of its populations (NumPy or CuPy), imported lazily;
    - ``unusable_reason()``: ``None`` when it runs here, else one line saying why not;
    - ``evaluators``: schedule family (``"flush"``, ``"windowed"``) -> ``"module:factory"``,
      ``factory(ticked) -> Evaluator``;
    - ``breeder``: ``"module:function"`` of a fused breeding kernel with the signature of
      :func:`tidgap.optimize.operators.breed`, or ``None`` for those operators over ``xp``;
    - ``joint_breeder``: the same for the joint GA
      (:func:`tidgap.optimize.joint_operators.joint_breed`), ``None`` for the ``xp`` operators;
    - ``joint_mutator``: ``"module:function"`` of a fused
      :func:`tidgap.optimize.joint_operators.mutate_repaired` (the annealing's step),
      ``None`` for the ``xp`` operators;
    - ``repair``: ``"module:function"`` of a compiled
      :func:`tidgap.optimize.order_genes.canonical` (same results), ``None`` for the ``xp`` one;
    - ``run_memory``: ``"module:function"`` of a compiled
      :meth:`tidgap.optimize.run_memory.RunMemory.held` (same results; its signature
      :data:`~tidgap.optimize.run_memory.CompiledHeld`), ``None`` for the ``xp`` one;
    - ``free_memory()``: free bytes of the device memory its populations live in, ``None``
      where it cannot say; the field is ``None`` for backends in host memory;
    - ``cached_loops``: ``"module:function"`` of the disk-cached compiled loops of its
      windowed search, which a first run compiles in a second process
      (:mod:`tidgap.optimize.background_compile`); empty where there are none;
    - ``ordered_refusal``: ``"module:function"``, ``refusal(stages, width) -> str | None``:
      ``None`` where its windowed evaluator scores chromosomes of ``stages`` stages and
      width ``width``, else why not in one line; ``None``: every shape.
    """

    name: str
    title: str
    device: str
    namespace: Callable[[], ModuleType]
    unusable_reason: Callable[[], str | None]
    evaluators: Mapping[str, str]
    breeder: str | None = None
    joint_breeder: str | None = None
    joint_mutator: str | None = None
    repair: str | None = None
    run_memory: str | None = None
    free_memory: Callable[[], int | None] | None = None
    cached_loops: tuple[str, ...] = ()
    ordered_refusal: str | None = None


class UnusableBackend(RuntimeError):
    """A backend that cannot run here; the message is one line saying why."""


def load(spec: str) -> Any:
    """The attribute named by ``"module:attribute"``, importing the module."""
    module, attribute = spec.split(":")
    return getattr(importlib.import_module(module), attribute)


def _numpy() -> ModuleType:
    """NumPy, the array module of the CPU backends."""
    return np


def _cupy() -> ModuleType:
    """CuPy, imported now."""
    return importlib.import_module("cupy")


def _always_usable() -> None:
    """NumPy is a dependency of tidgap: always usable."""
    return None


def numba_unusable_reason() -> str | None:
    """``None`` when Numba imports, else one line saying why not."""
    try:
        importlib.import_module("numba")
    except ImportError as error:
        return f"Numba does not import ({error})"
    return None


BACKENDS: dict[str, Backend] = {
    record.name: record
    for record in (
        Backend(
            name="cuda",
            title="GPU",
            device="gpu",
            namespace=_cupy,
            unusable_reason=gpu_unusable_reason,
            evaluators={
                "flush": "tidgap.kernels.launcher:CudaEvaluator",
                "windowed": "tidgap.kernels.launcher:windowed_cuda",
            },
            breeder="tidgap.kernels.launcher:cuda_breed",
            joint_breeder="tidgap.kernels.launcher:cuda_joint_breed",
            joint_mutator="tidgap.kernels.launcher:cuda_joint_mutate",
            run_memory="tidgap.kernels.launcher:cuda_run_memory",
            free_memory=device_free_memory,
            ordered_refusal="tidgap.kernels.source:ordered_refusal",
        ),
        Backend(
            name="numba",
            title="Numba",
            device="cpu",
            namespace=_numpy,
            unusable_reason=numba_unusable_reason,
            evaluators={
                "flush": "tidgap.backends.evaluator:flush_numba",
                "windowed": "tidgap.backends.evaluator:windowed_numba",
            },
            breeder="tidgap.fallback_cpu.breed_numba:numba_breed",
            joint_breeder="tidgap.fallback_cpu.breed_numba:numba_joint_breed",
            joint_mutator="tidgap.fallback_cpu.breed_numba:numba_joint_mutate",
            repair="tidgap.fallback_cpu.repair_numba:canonical",
            run_memory="tidgap.fallback_cpu.run_memory_numba:held",
            cached_loops=(
                "tidgap.fallback_cpu.windowed_numba:_ordered_rows",
                "tidgap.fallback_cpu.breed_numba:_joint_breed",
                "tidgap.fallback_cpu.breed_numba:_joint_mutate",
                "tidgap.fallback_cpu.repair_numba:_canonical",
                "tidgap.fallback_cpu.run_memory_numba:_held",
            ),
        ),
        Backend(
            name="numpy",
            title="NumPy",
            device="cpu",
            namespace=_numpy,
            unusable_reason=_always_usable,
            evaluators={
                "flush": "tidgap.backends.evaluator:flush_numpy",
                "windowed": "tidgap.backends.evaluator:windowed_numpy",
            },
        ),
    )
}


def get_backend(name: str) -> Backend:
    """The record of ``name``; ``ValueError`` naming the known ones otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    return BACKENDS[name]


def require_usable(record: Backend) -> Backend:
    """``record`` if it runs here; else :class:`UnusableBackend` saying why."""
    reason = record.unusable_reason()
    if reason is not None:
        raise UnusableBackend(f"no usable {record.title}: {reason}")
    return record


def first_usable(device: str | None = None) -> Backend:
    """The first usable backend of the registry (among those on ``device`` when given);
    :class:`UnusableBackend` with the first one's reason when none is."""
    candidates = [r for r in BACKENDS.values() if device is None or r.device == device]
    if not candidates:
        raise ValueError(f"no backend runs on {device!r}")
    for record in candidates:
        if record.unusable_reason() is None:
            return record
    return require_usable(candidates[0])


def default_backend() -> str:
    """The name of the first usable backend, in the registry's order of preference."""
    return first_usable().name


def ordered_refusal(record: Backend, stages: int, width: int) -> str | None:
    """Why ``record``'s windowed evaluator cannot score chromosomes of ``stages`` stages and
    width ``width``, in one line; ``None`` where it can."""
    return None if record.ordered_refusal is None else load(record.ordered_refusal)(stages, width)
