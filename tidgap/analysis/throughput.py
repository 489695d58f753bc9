"""Evaluation throughput: time full evaluations of populations on a backend, and the
``tidgap.bench/1`` document of the results (``tidgap bench``; no click here).

One evaluation is one individual's iteration time (``Evaluator.score``: the flush's
``forward_end + backward_span``, an ordered plan's event loop). A row runs ``warmup``
untimed evaluations of the whole population (Numba compiles or loads its cache, CUDA loads
its kernels), then ``repeats`` timed ones, each waited for on the device. Populations are
drawn on the host (:mod:`tidgap.analysis.workload`, at most :data:`BASE` individuals,
repeated beyond) and copied to the backend's array module before timing.
"""

from __future__ import annotations

import datetime
import importlib
import platform
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from tidgap import __version__
from tidgap.analysis.workload import BASE, Workload, population_arrays, repeated
from tidgap.backends import BACKENDS, Backend, ordered_refusal
from tidgap.backends.evaluator import Evaluator, create_evaluator
from tidgap.host import cpu_model
from tidgap.optimize.genome import Population
from tidgap.optimize.memory import (
    CHUNK_WORKSPACE_BYTES,
    format_bytes,
    joint_footprint,
    memory_budget,
    search_footprint,
)
from tidgap.schedules.families import SCHEDULES

#: The document's ``format``.
FORMAT = "tidgap.bench/1"


@dataclass(frozen=True)
class Row:
    """One backend, family and population size: ``seconds`` of each timed evaluation of the
    whole population, or ``skipped`` saying why none ran; ``bytes_per_evaluation`` read and
    written at least; ``peak_bandwidth`` of the device in bytes/s (``None`` on the CPU or
    where the device does not say)."""

    backend: str
    family: str
    population: int
    seconds: tuple[float, ...] = ()
    bytes_per_evaluation: int = 0
    peak_bandwidth: float | None = None
    skipped: str | None = None

    @property
    def median(self) -> float:
        """Median seconds per evaluation of the whole population."""
        return statistics.median(self.seconds)

    @property
    def rate(self) -> float:
        """Evaluations (individuals) per second at the median."""
        return self.population / self.median

    @property
    def bandwidth_share(self) -> float | None:
        """Share of the device's peak memory bandwidth the median rate moves, or ``None``."""
        if self.peak_bandwidth is None:
            return None
        return self.rate * self.bytes_per_evaluation / self.peak_bandwidth

    def as_dict(self) -> dict[str, Any]:
        """The row of the ``tidgap.bench/1`` document (numbers ``None`` when skipped)."""
        timed = self.skipped is None
        return {
            "backend": self.backend,
            "family": self.family,
            "population": self.population,
            "median_s": self.median if timed else None,
            "min_s": min(self.seconds) if timed else None,
            "max_s": max(self.seconds) if timed else None,
            "evaluations_per_second": self.rate if timed else None,
            "bytes_per_evaluation": self.bytes_per_evaluation if timed else None,
            "bandwidth_share": self.bandwidth_share if timed else None,
            "skipped": self.skipped,
        }


def evaluated_families() -> list[str]:
    """The schedule families some backend has an evaluator for, in the registry's order."""
    return [name for name in SCHEDULES if any(name in r.evaluators for r in BACKENDS.values())]


def synchronize(xp: ModuleType) -> None:
    """Wait until the device has finished its queued work (nothing to wait for on NumPy)."""
    if xp is not np:
        xp.cuda.Device().synchronize()


def peak_bandwidth(xp: ModuleType) -> float | None:
    """The current device's peak memory bandwidth in bytes/s from CuPy's device attributes:
    2 (double data rate) x memory clock x bus width; ``None`` on NumPy or where an attribute
    is missing."""
    if xp is np:
        return None
    attributes = xp.cuda.Device().attributes
    clock_khz = attributes.get("MemoryClockRate")
    bus_bits = attributes.get("GlobalMemoryBusWidth")
    if not clock_khz or not bus_bits:
        return None
    return 2.0 * clock_khz * 1e3 * bus_bits / 8


def time_evaluations(
    evaluator: Evaluator, population: Population, xp: ModuleType, repeats: int, warmup: int
) -> tuple[float, ...]:
    """``warmup`` untimed, then ``repeats`` timed evaluations of ``population`` (arrays of
    ``xp``): the seconds of each timed one, the device waited for."""
    for _ in range(warmup):
        evaluator.score(population)
    synchronize(xp)
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        evaluator.score(population)
        synchronize(xp)
        seconds.append(time.perf_counter() - started)
    return tuple(seconds)


def footprint(family: str, size: int, stages: int, width: int, units: int) -> int:
    """Bytes set aside to evaluate ``size`` individuals: a search's estimate of a
    population of that size (:mod:`tidgap.optimize.memory`: its genes and their
    evaluation's temporaries, generously), the tick tables and the NumPy evaluator's
    chunks; not what a search holds besides (the polish's batches, the process's own
    share, which the budget, half the memory available now, already leaves out)."""
    if SCHEDULES[family].separable:
        estimate = search_footprint(size, stages, width, units, 0)
    else:
        estimate = joint_footprint(size, 1, stages, width, units, 0)
    return estimate.population + estimate.tables + CHUNK_WORKSPACE_BYTES


def bytes_per_evaluation(population: Population) -> int:
    """Bytes an evaluation reads and writes at least: one individual's arrays and its int64
    iteration time (the tick tables are shared by all)."""
    return sum(array[0].nbytes for array in population_arrays(population)) + 8


def measure_backend(
    record: Backend,
    workload: Workload,
    families: list[str],
    sizes: list[int],
    repeats: int,
    warmup: int,
    budget: int | None = None,
) -> Iterator[Row]:
    """The rows of a usable backend, family by family, size by size. A size whose
    :func:`footprint` exceeds ``budget`` bytes (default:
    :func:`~tidgap.optimize.memory.memory_budget`'s) and a family without an evaluator on
    the backend give skipped rows."""
    xp = record.namespace()
    peak = peak_bandwidth(xp)
    limit, source = memory_budget(budget, record)
    ticked = workload.ticked
    for family in families:
        try:
            evaluator = create_evaluator(ticked, family, record.name)
        except ValueError as error:
            yield from (Row(record.name, family, size, skipped=str(error)) for size in sizes)
            continue
        refusal = None
        if not SCHEDULES[family].separable:  # ordered plans: the GPU's kernel has a limit
            refusal = ordered_refusal(record, ticked.num_stages, workload.width)
        if refusal is not None:
            yield from (Row(record.name, family, size, skipped=refusal) for size in sizes)
            continue
        base = workload.draw(family, min(max(sizes), BASE))
        for size in sizes:
            needed = footprint(family, size, ticked.num_stages, workload.width, ticked.num_units)
            if needed > limit:
                reason = (
                    f"needs about {format_bytes(needed)}, more than the memory budget "
                    f"{format_bytes(limit)} ({source})"
                )
                yield Row(record.name, family, size, skipped=reason)
                continue
            population = Population(*map(xp.asarray, population_arrays(repeated(base, size))))
            seconds = time_evaluations(evaluator, population, xp, repeats, warmup)
            yield Row(record.name, family, size, seconds, bytes_per_evaluation(population), peak)
            del population


def _version(module: str) -> str | None:
    """``module.__version__``, or ``None`` where it does not import."""
    try:
        return str(importlib.import_module(module).__version__)
    except ImportError:
        return None


def gpu_name(xp: ModuleType) -> str | None:
    """The current CUDA device's name, ``None`` on NumPy."""
    if xp is np:
        return None
    properties = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
    name = properties.get("name", b"")
    return name.decode() if isinstance(name, bytes) else str(name)


def machine(usable: list[Backend]) -> dict[str, Any]:
    """What the rows ran on: the CPU, Python's, NumPy's, Numba's and CuPy's versions (``None``
    where not installed), Numba's threads, and the GPU's name and peak bandwidth in bytes/s
    when a usable backend lives on one (else ``None``)."""
    numba_threads = None
    if _version("numba") is not None:
        from tidgap.fallback_cpu.threads import thread_count

        numba_threads = thread_count()
    gpus = [record for record in usable if record.device == "gpu"]
    xp = gpus[0].namespace() if gpus else np
    return {
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": _version("numba"),
        "numba_threads": numba_threads,
        "cupy": _version("cupy") if gpus else None,
        "gpu": gpu_name(xp),
        "peak_bandwidth": peak_bandwidth(xp),
    }


def bench_document(
    workload: Workload,
    usable: list[Backend],
    unusable: dict[str, str],
    rows: list[Row],
    repeats: int,
    warmup: int,
) -> dict[str, Any]:
    """The ``tidgap.bench/1`` document (docs/files.md)."""
    problem = workload.problem
    return {
        "format": FORMAT,
        "tidgap": __version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(usable),
        "problem": {
            "name": problem.name,
            "stages": problem.num_stages,
            "batch_size": problem.batch_size,
            "unit": problem.unit,
            "width": workload.width,
        },
        "repeats": repeats,
        "warmup": warmup,
        "unusable": [{"backend": name, "reason": reason} for name, reason in unusable.items()],
        "rows": [row.as_dict() for row in rows],
    }
