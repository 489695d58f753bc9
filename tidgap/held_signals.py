"""SIGINT and SIGTERM held back while a short block runs that must not be cut in two: the
signal takes effect as the block ends. :func:`signals_blocked` blocks them in this
thread, and so in the processes it starts (a pool's workers, until they handle them).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

#: The signals held back: the ones that stop tidgap's commands.
HELD = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_blocked() -> Iterator[None]:
    """:data:`HELD` blocked in this thread in the block (and in the processes it starts,
    which inherit the mask); another thread of this process may still take them. A no-op
    where the system has no ``pthread_sigmask``."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
