"""``tidgap.held_signals``: a signal heard by a thread of its own (a torchrun rank waiting
in C code), between deferred blocks, and not where the signal is ignored."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tidgap.held_signals import heard_in_a_thread, signals_deferred


@contextmanager
def handled(signum: int, handler: object) -> Iterator[None]:
    previous = signal.signal(signum, handler)  # type: ignore[arg-type]
    try:
        yield
    finally:
        signal.signal(signum, previous)


def _wait_for(heard: list[int], count: int) -> None:
    deadline = time.monotonic() + 10
    while len(heard) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_signal_reaches_the_thread_after_the_deferred_block() -> None:
    heard: list[int] = []
    with handled(signal.SIGTERM, lambda signum, frame: None), heard_in_a_thread(heard.append):
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            assert heard == []  # held back while the block runs
        _wait_for(heard, 1)
        assert heard[0] == signal.SIGTERM  # (and again as the deferral raises it anew)
    assert not [t for t in threading.enumerate() if t.name == "tidgap signals"]
    assert signal.set_wakeup_fd(-1) == -1  # as it was


def test_an_ignored_signal_stays_ignored_inside_a_deferred_block() -> None:
    """SIGINT ignored (a rank started in the background): the deferral's own handler wrote
    it to the wake-up descriptor, and the thread ended the process (130)."""
    heard: list[int] = []
    with handled(signal.SIGINT, signal.SIG_IGN), heard_in_a_thread(heard.append):
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
    assert heard == []


def test_a_rank_ends_on_sigint_from_its_handler_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank's SIGINT raised KeyboardInterrupt where its code runs in Python, which the
    worker reported as a failure (traceback, status 1): its handler now ends it as
    SIGTERM's does, until the command ends."""
    import importlib

    import click

    main = importlib.import_module("tidgap.cli.main")  # the package's main() shadows it

    ended: list[int] = []
    monkeypatch.setattr(main, "_end_now", ended.append)
    with handled(signal.SIGINT, signal.default_int_handler):  # as from a terminal
        with click.Context(click.Command("x")):
            main.end_rank_on_signals()
            handler = signal.getsignal(signal.SIGINT)
            assert handler is not signal.default_int_handler
            handler(signal.SIGINT, None)  # type: ignore[operator]
            assert ended == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # as it was
