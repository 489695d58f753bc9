"""Processes a test started through another: whether they end when they should."""

from __future__ import annotations

import os
import signal
import time


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
