"""Benchmarks: ``pytest bench`` collects ``bench_*.py`` here and prints a throughput table.

The normal test run (``testpaths = ["tests"]``) never loads this folder. Run
``pytest bench --benchmark-only``; ``-o python_files='bench_*.py'`` works too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidgap.kernels.source import KERNEL_CHOICES

#: name -> (median seconds, evaluations per call), filled by :func:`throughput`.
_RESULTS: dict[str, tuple[float, int]] = {}

#: Evaluations per second the project aims for on a 2-core CPU, per benchmark name (flush
#: plans; ``windowed-*`` for ordered plans, issue 11), and on an H200 (``cuda *``; a
#: generation at ``P = 2**16`` scores ``P - elites`` children: a flush one in at most 1 ms,
#: a joint one in at most 2 ms).
TARGETS = {
    "numba": 5e5,
    "numpy": 5e4,
    "windowed-numba": 3e5,
    "windowed-numpy": 2e4,
    "cuda P=2^20": 1e9,
    "cuda generation P=2^16": (2**16 - 2**11) / 1e-3,
    **{f"cuda windowed {kernel} P=2^20": 2e8 for kernel in KERNEL_CHOICES},
    **{
        f"cuda joint generation {kernel} P=2^16": (2**16 - 2**11) / 2e-3
        for kernel in KERNEL_CHOICES
    },
}
#: Times its reference's evaluations per second (the ``x oracle`` column) aimed for.
RATIO_TARGETS = {"windowed-numba": 50}


def _reference(name: str) -> str:
    """The benchmark a row is compared with: ``windowed-oracle`` for ``windowed-*`` rows,
    else ``oracle``, on the row's workload (its name from `` S=`` on, if any)."""
    oracle = "windowed-oracle" if name.startswith("windowed-") else "oracle"
    workload = name.find(" S=")
    return oracle if workload < 0 else oracle + name[workload:]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect ``bench_*.py`` unless pytest already does (named on the command line or
    matched by ``python_files``)."""
    if file_path.suffix != ".py" or not file_path.name.startswith("bench_"):
        return None
    patterns = parent.config.getini("python_files")
    if parent.session.isinitpath(file_path) or any(file_path.match(p) for p in patterns):
        return None
    return pytest.Module.from_parent(parent, path=file_path)


@pytest.fixture(scope="session")
def throughput() -> Any:
    """``record(name, benchmark, evaluations)``: store evaluations/s in ``extra_info`` and
    in the summary table."""

    def record(name: str, benchmark: Any, evaluations: int) -> None:
        benchmark.extra_info["evaluations"] = evaluations
        if benchmark.stats is None:  # --benchmark-disable: the function ran once, untimed
            return
        median = benchmark.stats.stats.median
        benchmark.extra_info["evaluations_per_second"] = evaluations / median
        _RESULTS[name] = (median, evaluations)

    return record


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _RESULTS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("evaluation throughput")
    header = ("backend", "evals/call", "median", "evals/s", "x oracle")
    width = max(16, *map(len, _RESULTS))
    write("{:<{}} {:>10} {:>12} {:>12} {:>9}  target".format(header[0], width, *header[1:]))
    for name, (median, evaluations) in _RESULTS.items():
        rate = evaluations / median
        oracle = _RESULTS.get(_reference(name))
        times = rate / (oracle[1] / oracle[0]) if oracle else None
        ratio = f"{'-':>9}" if times is None else f"{times:9.0f}"
        verdicts = []
        if (target := TARGETS.get(name)) is not None:
            verdicts.append(f">= {target:.0e}: {'met' if rate >= target else 'MISSED'}")
        if (least := RATIO_TARGETS.get(name)) is not None and times is not None:
            verdicts.append(f">= {least}x: {'met' if times >= least else 'MISSED'}")
        verdict = ", ".join(verdicts)
        timing = f"{median * 1e3:>9.3f} ms"
        write(f"{name:<{width}} {evaluations:>10} {timing} {rate:>12.3g} {ratio}  {verdict}")
