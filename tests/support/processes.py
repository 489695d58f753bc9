"""Processes a test started through another: whether they end when they should."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def ends_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` is gone within ``seconds``; if not, it is killed (a test
    leaves nothing behind) and ``False``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    return False


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux: read from ``/proc``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended while listed
            continue
        if int(text.rpartition(")")[2].split()[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def has_children_within(pid: int, seconds: float, count: int = 1) -> bool:
    """Whether process ``pid`` has ``count`` children (at once) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if len(children(pid)) >= count:
            return True
        time.sleep(0.05)
    return False
