"""SIGINT and SIGTERM held back while a short block runs that must not be cut in two: the
signal takes effect as the block ends.

Two ways, for two needs: :func:`signals_deferred` holds them back from this process's
Python handlers (a temporary file made and recorded, a set of files renamed into place),
whichever thread the kernel hands the signal to; :func:`signals_blocked` blocks them in
this thread, and so in the processes it starts (a pool's workers, until they handle them).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

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


@contextmanager
def signals_deferred() -> Iterator[None]:
    """:data:`HELD` recorded, not handled, in the block; as it ends the handlers of before
    are back and each signal received is raised again for them (in order; a default
    SIGTERM then ends the process). Python runs signal handlers in the main thread only:
    elsewhere (where no handler can be set) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {signum: signal.signal(signum, record) for signum in HELD}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        for signum in received:
            signal.raise_signal(signum)
