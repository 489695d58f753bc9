"""SIGINT and SIGTERM held back while a short block runs that must not be cut in two: the
signal takes effect as the block ends.

Two ways, for two needs: :func:`signals_deferred` holds them back from this process's
Python handlers (a temporary file made and recorded, a set of files renamed into place),
whichever thread the kernel hands the signal to; :func:`signals_blocked` blocks them in
this thread, and so in the processes it starts (a pool's workers, until they handle them).
:func:`handling` installs a handler for a block (the commands' own, and the deferral's).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
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
def handling(
    signums: Iterable[int], handler: Callable[[int, FrameType | None], None]
) -> Iterator[None]:
    """``handler`` installed for ``signums`` in the block, the old handlers restored after
    (the default action for one not set from Python); outside the main thread (where
    Python cannot set handlers) nothing is installed."""
    try:
        previous = {signum: signal.signal(signum, handler) for signum in signums}
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, signal.SIG_DFL if old is None else old)


#: Held through every :func:`signals_deferred` block: :func:`heard_in_a_thread`'s thread
#: waits for it, so that it too acts only between such blocks.
_DEFERRING = threading.RLock()


@contextmanager
def signals_deferred() -> Iterator[None]:
    """:data:`HELD` recorded, not handled, in the block (:func:`handling`); as it ends the
    handlers of before are back and each signal received is raised again for them (in
    order; a default SIGTERM then ends the process). Outside the main thread the block
    runs as it is."""
    received: list[int] = []
    try:
        with _DEFERRING, handling(HELD, lambda signum, frame: received.append(signum)):
            yield
    finally:  # also where the block failed (a rename): the signal still counts
        for signum in received:
            signal.raise_signal(signum)


@contextmanager
def heard_in_a_thread(on_signal: Callable[[int], None]) -> Iterator[None]:
    """In the block each of :data:`HELD` this process receives also reaches a thread of its
    own, which calls ``on_signal(signum)`` between :func:`signals_deferred` blocks: at
    once, even while the main thread waits inside C code, where Python's handlers never
    run (a rank waiting in torch.distributed ignored torchrun's SIGTERM and was killed 30 s
    later). Through :func:`signal.set_wakeup_fd`, to which Python's own low-level handler
    writes the signal's number in whichever thread the kernel hands it to: so the signal
    must have a Python handler (not the default action); one ignored stays ignored. From
    the main thread; after the block the thread has ended and the wake-up descriptor is
    as it was."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write)

    def listen() -> None:
        while heard := os.read(read, 1):  # empty once the block closed the pipe
            if heard[0] in HELD:
                with _DEFERRING:  # a deferral's own handler wrote it too: heed the one after
                    if signal.getsignal(heard[0]) is not signal.SIG_IGN:
                        on_signal(heard[0])

    listener = threading.Thread(target=listen, name="tidgap signals", daemon=True)
    listener.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write)
        listener.join()
        os.close(read)
