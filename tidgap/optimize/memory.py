"""The memory guard: estimate what a search will allocate before it does, and refuse with
one line when the estimate exceeds a budget (default: half the memory available now).

The estimate counts what grows with the options and the problem: the two populations
``(P, S, K)`` int32 with the breeding temporaries, the seeds, the tick tables ``(S, U+1)``
int64 and the evaluation temporaries. The factors are measured peaks of a search
(``tests/optimize/test_memory.py`` checks that the estimate stays above the measured peak).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from decimal import Decimal, localcontext
from pathlib import Path

from tidgap.backends import Backend
from tidgap.backends.evaluator import CHUNK_GENES
from tidgap.model.errors import InputError
from tidgap.optimize.polish import BATCH_BYTES

#: Bytes per gene of one direction's population at the peak of a generation: the genes,
#: the offspring, the parents' copies, the crossover result, the concatenation and the
#: evaluation's temporaries (measured: 6 to 7.3, NumPy and Numba backends; doubled).
BYTES_PER_GENE = 16
#: Tick tables: four ``(S, U+1)`` int64 tables (compute and transfer, both directions),
#: plus the float64 tabulation they are made from.
TABLE_BYTES_PER_ENTRY = 4 * 8 * 2
#: The evaluation chunks of the NumPy backend.
CHUNK_WORKSPACE_BYTES = 4 * 8 * CHUNK_GENES
#: The polish's batches of candidates and their evaluation, and the evaluation chunks.
WORKSPACE_BYTES = 4 * BATCH_BYTES + CHUNK_WORKSPACE_BYTES
#: Where a budget the user gave comes from: the Python keyword and the option.
GIVEN = "max_memory / --max-memory"
#: What every search needs besides (interpreter, NumPy, Numba, the problem).
BASELINE_BYTES = 64 << 20

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
#: Byte sizes are below this (a signed 64-bit count).
MAX_SIZE = 2**63


@dataclass(frozen=True)
class SearchFootprint:
    """Estimated peak bytes of a search, by what they grow with."""

    population: int
    seeds: int
    tables: int

    @property
    def total(self) -> int:
        """All of it, plus the fixed :data:`WORKSPACE_BYTES` and :data:`BASELINE_BYTES`."""
        return BASELINE_BYTES + WORKSPACE_BYTES + self.population + self.seeds + self.tables

    def largest_cause(self) -> str:
        """``"population"``, ``"seeds"``, ``"tables"`` or ``"fixed"`` (what every search
        holds, :data:`WORKSPACE_BYTES` and :data:`BASELINE_BYTES`): what weighs most."""
        parts = {"population": self.population, "seeds": self.seeds, "tables": self.tables}
        parts["fixed"] = BASELINE_BYTES + WORKSPACE_BYTES
        return max(parts, key=parts.__getitem__)


def search_footprint(
    population: int, stages: int, width: int, units: int, seeds: int
) -> SearchFootprint:
    """The estimate for ``population`` individuals of ``(stages, width)`` genes per
    direction, ``seeds`` seed chromosomes and ``units`` partition units."""
    genes = stages * width
    return SearchFootprint(
        population=2 * population * genes * BYTES_PER_GENE,
        seeds=2 * seeds * genes * 4,
        tables=tick_table_bytes(stages, units),
    )


def tick_table_bytes(stages: int, units: int) -> int:
    """The tick tables of ``stages`` stages and ``units`` partition units, with the float64
    tabulation they are made from (bytes)."""
    return stages * (units + 1) * TABLE_BYTES_PER_ENTRY


def joint_footprint(
    population: int, islands: int, stages: int, width: int, units: int, seeds: int
) -> SearchFootprint:
    """The estimate for the joint GA: ``islands`` populations of ``population`` individuals,
    each three ``(stages, width)`` int32 genes and ``(stages, 2 width)`` int8 op codes (3.5
    genes' worth, where the dual GA has two), ``seeds`` seed individuals."""
    genes = stages * width
    return SearchFootprint(
        population=islands * population * genes * BYTES_PER_GENE * 7 // 4,
        seeds=seeds * genes * 14,
        tables=tick_table_bytes(stages, units),
    )


def available_memory() -> int:
    """Bytes of memory available now: ``MemAvailable`` of ``/proc/meminfo`` where there is
    one, else the free physical pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def memory_budget(max_memory: int | None, backend: Backend | None = None) -> tuple[int, str]:
    """The bytes a command holds its estimates to and where they come from: ``max_memory``
    (``--max-memory`` on the command line), else :func:`default_budget` of ``backend``
    (without one, half of :func:`available_memory`)."""
    if max_memory is not None:
        return max_memory, GIVEN
    budget = available_memory() // 2 if backend is None else default_budget(backend)
    return budget, "half the memory available"


def default_budget(backend: Backend) -> int:
    """Half of :func:`available_memory`; for a backend whose populations and tables live in
    device memory, half of the least of it and the device's free memory."""
    available = available_memory()
    device = None if backend.free_memory is None else backend.free_memory()
    return (available if device is None else min(available, device)) // 2


def parse_size(text: str) -> int:
    """``"8G"``, ``"512MiB"``, ``"1.5g"``, ``"1000000"``, ``"1e9"`` -> bytes (``k``/``m``/
    ``g``/``t`` are powers of 1000, with ``i`` of 1024); raise ``ValueError`` on anything
    else."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (examples: 8G, 512MiB, 1000000)")
    number, suffix = Decimal(match.group(1)), (match.group(2) or "").lower()
    prefix = suffix[:1] if suffix[:1] in "kmgt" else ""
    binary = "i" in suffix and prefix
    scale = 1024 ** ("kmgt".index(prefix) + 1) if binary else 1000 ** "-kmgt".index(prefix or "-")
    with localcontext() as context:  # exact: 2**63 - 1 is a size, 2**63 is not
        context.prec = 100
        if number.adjusted() > 30 or not number * scale < MAX_SIZE:  # 1e400, many digits
            raise ValueError(f"too large: {text!r} (at most 2**63 - 1 bytes)")
        return int(number * scale)


def format_bytes(count: float) -> str:
    """``1.2 GB``-style: three significant digits, powers of 1000 (at most TB); rounded
    before the unit is chosen, so 999,999 bytes are ``1 MB``, not ``1e+03 kB``."""
    value = float(f"{count:.3g}")
    for unit in ("B", "kB", "MB", "GB"):
        if abs(value) < 1000:
            return f"{value:.3g} {unit}"
        value = float(f"{value / 1000:.3g}")
    return f"{value:.4g} TB"


def exact_bytes(count: float) -> str:
    """``999,999 bytes``: a byte count as given, shortest decimal and not rounded to three
    digits as :func:`format_bytes` does (a limit just below a sample's bytes would read
    ``1 MB`` beside ``1e+06``); ``1e30`` is ``1,000,...,000 bytes``, not float noise."""
    exact = Decimal(repr(float(count)))
    if exact == exact.to_integral_value():
        exact = exact.to_integral_value()
    return f"{exact:,f} bytes"


def require_available(
    needed: int,
    saying: str,
    source: str,
    path: tuple[str, ...] = (),
    available: int | None = None,
) -> None:
    """Raise :class:`InputError` on ``source`` / ``path`` if ``needed`` bytes exceed
    ``available`` (default :func:`available_memory`): ``saying`` (what needs how much), then
    ``, more than the N GB available``. For sizes whose allocation Linux would grant and
    then meet with the out-of-memory killer."""
    available = available_memory() if available is None else available
    if needed > available:
        raise InputError(
            f"{saying}, more than the {available / 1e9:.3g} GB available", path, source
        )


def require_within(
    estimate: int,
    budget: int,
    what: str,
    budget_source: str,
    source: str | None = None,
    path: tuple[str, ...] = (),
) -> None:
    """Raise :class:`InputError` on ``source`` / ``path`` if ``estimate`` bytes exceed
    ``budget``; ``what`` says what the estimate is of, ``budget_source`` where the budget
    comes from."""
    if estimate > budget:
        where = budget_source
        if budget_source != GIVEN:
            where += f"; {GIVEN} to change it"
        raise InputError(
            f"{what} needs about {format_bytes(estimate)}, more than the memory budget "
            f"{format_bytes(budget)} ({where})",
            path,
            source,
        )
