"""What this machine is, for the records tidgap writes (profiles, benchmarks): its CPU
model and core count. Standard library only, so workers can import it cheaply."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """``N-core MODEL`` from ``/proc/cpuinfo`` where there is one, else from ``platform``."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()}-core {model}"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which its children inherit,
    where the system has one; else every core)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
