"""Ctrl-C and SIGTERM as requests to stop: the search ends at the next generation boundary
(the annealing at its next step, the polish after its batch of neighbours) and keeps its
best plan; a second signal ends the process at once, without a traceback.

The handlers only record the signal (no exception is raised inside compiled code, so a
Numba call is never left with an exception set); the search polls :meth:`StopSignals.received`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any, NoReturn

from tidgap.held_signals import handling
from tidgap.outputs.atomic import abandon_writes, awaiting_stream

#: The signals that ask a search to stop, by name.
STOP_SIGNALS = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}

#: The same signal again within this many seconds of the first is the first delivered
#: twice, not a second request: a supervisor such as GNU ``timeout`` sends it to the
#: process and then to its process group (a sweep waiting idle took the two for two
#: Ctrl-Cs, exited at once and wrote nothing). A person's second Ctrl-C comes later.
DUPLICATE_SECONDS = 0.1


def exit_status(signum: int) -> int:
    """The shell's status for a process ended by ``signum``: ``128 + signum`` (130, 143)."""
    return 128 + signum


def stopped_line(signum: int) -> str:
    """What a command ended by ``signum`` says on stderr, on a line of its own:
    ``tidgap: interrupted`` (SIGINT) or ``tidgap: terminated``."""
    return f"\ntidgap: {'interrupted' if signum == signal.SIGINT else 'terminated'}\n"


def end_now(signum: int, line: str | None = None) -> NoReturn:
    """End the process at once with ``signum``'s status, saying ``line`` on stderr (by
    default :func:`stopped_line`), the writes in progress abandoned (their targets kept as
    they were: ``os._exit`` runs no cleanup)."""
    sys.stderr.write(stopped_line(signum) if line is None else line)
    sys.stderr.flush()
    abandon_writes()
    os._exit(exit_status(signum))


@dataclass(frozen=True)
class FirstStop:
    """A search's ``interrupted`` that asks each of ``checks`` in turn and says what the
    first to answer says (``None`` when none does; ``None`` and ``False`` are no answer):
    a pool's stop beside the caller's own ``interrupted``. It pickles where they do."""

    checks: tuple[Callable[[], str | None], ...]

    def __call__(self) -> str | None:
        for check in self.checks:
            reason = check()
            if reason is not None and reason is not False:
                return reason
        return None


def also_stopped_by(options: dict[str, Any], check: Callable[[], str | None]) -> dict[str, Any]:
    """Search ``options`` whose ``interrupted`` polls ``check`` too (first), besides the one
    they give, if any."""
    given = options.get("interrupted")
    return {**options, "interrupted": check if given is None else FirstStop((check, given))}


class StopSignals:
    """Records the first SIGINT / SIGTERM (and calls ``on_first`` with its name); on a
    second one, exits with its status at once (the first again within
    :data:`DUPLICATE_SECONDS` is the same one, delivered twice)."""

    def __init__(self, on_first: Callable[[str], None] | None = None) -> None:
        self.signum: int | None = None
        self.on_first = on_first
        self._first_at = 0.0

    def received(self) -> str | None:
        """The name of the signal received (``"SIGINT"``, ``"SIGTERM"``), or ``None``."""
        return None if self.signum is None else STOP_SIGNALS[self.signum]

    def exit_if_received(self) -> None:
        """End the process with the received signal's status (130, 143), if there was one."""
        if self.signum is not None:
            sys.exit(exit_status(self.signum))

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """Signal handler: remember the first signal; a second one ends the process, and so
        does a first one while an output stream waits on its reader (the work is done: a
        FIFO nobody reads held a search's command until SIGKILL)."""
        if awaiting_stream():
            end_now(signum)
        if self.signum is None:
            self.signum, self._first_at = signum, time.monotonic()
            if self.on_first is not None:
                self.on_first(STOP_SIGNALS[signum])
            return
        if signum == self.signum and time.monotonic() - self._first_at < DUPLICATE_SECONDS:
            return
        end_now(signum, f"\ntidgap: {STOP_SIGNALS[signum]} again: stopped at once\n")


@contextmanager
def stop_on_signals(on_first: Callable[[str], None] | None = None) -> Iterator[StopSignals]:
    """Install :class:`StopSignals` (with ``on_first``) for SIGINT and SIGTERM; restore the
    old handlers after.

    Outside the main thread (where Python cannot set handlers) nothing is installed and
    the signals keep their usual effect.
    """
    signals = StopSignals(on_first)
    with handling(STOP_SIGNALS, signals.handle):
        yield signals
