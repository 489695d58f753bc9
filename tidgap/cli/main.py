"""The ``tidgap`` click group: one-line errors with exit status 2, and the version option.

Bad input or usage prints one line, ``tidgap: error: FILE: FIELD: reason``, and exits 2.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

import click

from tidgap import __version__
from tidgap.cli.options import named_as_option
from tidgap.held_signals import handling, heard_in_a_thread
from tidgap.model.errors import InputError, first_line
from tidgap.model.numbers import positive_integer_text
from tidgap.optimize.interrupts import end_now, exit_status, stopped_line

#: What click (8.2 on) raises for a group given no command: ``()`` before it, which printed
#: the help itself.
NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class TidgapGroup(click.Group):
    """A click group whose errors are one line on stderr with exit status 2."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        _usable_standard_streams()
        try:
            _require_usable_environment()
            with handling((signal.SIGTERM,), _terminate):  # a command may handle it itself
                status = super().main(*args, standalone_mode=False, **kwargs)
        except InputError as error:
            _fail(str(named_as_option(error)))
        except NO_ARGS_IS_HELP as error:  # a bare command: its help, as click < 8.2 printed it
            click.echo(error.format_message())
            sys.exit(0)
        except click.UsageError as error:
            context = f"{error.ctx.info_name}: " if error.ctx and error.ctx.parent else ""
            _fail(f"{context}{error.format_message()}")
        except click.ClickException as error:
            click.echo(f"tidgap: error: {error.format_message()}", err=True)
            sys.exit(error.exit_code)
        except MemoryError as error:  # more than the machine has (--max-memory above it)
            click.echo(f"tidgap: error: out of memory: {first_line(error)}", err=True)
            sys.exit(1)
        except OSError as error:  # standard output: a full disk, a reader that left
            if error.errno not in UNWRITABLE_OUTPUT:
                raise
            _drop_standard_output()
            if error.errno != errno.EPIPE:  # `tidgap ... | head` is no error to report
                click.echo(f"tidgap: error: cannot write: {error.strerror}", err=True)
            sys.exit(1)
        except click.Abort as error:
            # Ctrl-C outside a search (a search stops at a generation boundary instead);
            # click has already ended the terminal's ``^C`` line
            line = stopped_line(signal.SIGINT)
            if isinstance(error.__cause__, KeyboardInterrupt | EOFError):
                line = line.lstrip("\n")
            sys.stderr.write(line)
            sys.exit(exit_status(signal.SIGINT))
        sys.exit(status if isinstance(status, int) else 0)


class _ClosedOutput(io.TextIOBase):
    """Standard output where the process started with it closed (``>&-``): each write
    fails as a write to a closed descriptor does, so the command says so (exit 1) instead
    of printing nothing and succeeding."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


class _ForgivingError(io.TextIOBase):
    """Standard error that drops what it cannot write (``2>/dev/full``): a warning no one
    can read then no longer fails the command (exit 1, its output lost), and bad input
    still exits 2."""

    def __init__(self, stream: io.TextIOWrapper) -> None:
        self.stream = stream

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError:
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            self.stream.flush()

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()


def _usable_standard_streams() -> None:
    """Standard output and error that write any name: a character their encoding lacks
    (``PYTHONIOENCODING=latin-1``, an emoji in a problem's name) written as an escape, not
    a traceback; a closed standard output fails each write (:class:`_ClosedOutput`); a
    closed standard error discards (Python's flush at exit failed on it, exit 120), as
    does one that cannot be written (:class:`_ForgivingError`)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            with contextlib.suppress(OSError, ValueError):  # a descriptor closed since
                stream.reconfigure(errors="backslashreplace")
    if sys.stdout is None:
        sys.stdout = _ClosedOutput()
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (for the process)
    elif isinstance(sys.stderr, io.TextIOWrapper):
        sys.stderr = _ForgivingError(sys.stderr)


def _require_usable_environment() -> None:
    """:class:`InputError` where the process cannot work as asked: its current folder
    was removed (relative paths fail, and worker processes start in it), or
    ``NUMBA_NUM_THREADS`` is not a positive integer (the compiled loops failed on it)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise InputError(
            "the current folder no longer exists (it was removed): change to another"
        ) from None
    threads = os.environ.get("NUMBA_NUM_THREADS", "")
    if threads.strip() and positive_integer_text(threads) is None:  # empty: Numba's default
        raise InputError(
            f"must be a positive integer, the compiled loops' threads (got {threads!r})",
            source="NUMBA_NUM_THREADS",
        )


def _terminate(signum: int, frame: FrameType | None) -> None:
    """The handler of SIGTERM where the command does not handle it itself (a search stops
    at a generation boundary instead), and of a rank's SIGINT: :func:`_end_now`. Not an
    exception raised wherever the code is: one raised while a thread held Numba's compiler
    lock hung the process."""
    _end_now(signum)


#: Taken by the first :func:`_end_now` (a handler and a listening thread may both call it).
_ENDING = threading.Lock()


def _end_now(signum: int) -> None:
    """End at once, as the default action of ``signum`` does, but first say so and remove
    the temporary files of the writes in progress, whose outputs stay as they were (the
    renames hold it back until all are done). Once: a second call returns, the first is
    ending the process."""
    if not _ENDING.acquire(blocking=False):
        return
    end_now(signum)


def end_rank_on_signals() -> None:
    """For a rank under torchrun: SIGINT and SIGTERM end it at once (:func:`_end_now`), also
    while it waits in torch.distributed, where Python's handlers never run (torchrun's
    SIGTERM went unheard and its agent killed the rank 30 s later), until the command ends;
    SIGINT's handler ends it too, as SIGTERM's does (a KeyboardInterrupt raised in the
    rank's code became a failure's traceback and status 1), unless SIGINT is ignored."""
    context = click.get_current_context()
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        context.with_resource(handling((signal.SIGINT,), _terminate))
    context.with_resource(heard_in_a_thread(_end_now))


#: ``errno`` values of a write to standard output that cannot go on (reported in one line).
UNWRITABLE_OUTPUT = (errno.ENOSPC, errno.EDQUOT, errno.EPIPE, errno.EIO, errno.EBADF)


def _drop_standard_output() -> None:
    """Point standard output at ``/dev/null``, so that Python's flush at exit does not
    fail on it again (and print a second error)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _fail(message: str) -> None:
    click.echo(f"tidgap: error: {message}", err=True)
    sys.exit(2)


@click.group(cls=TidgapGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tidgap")
def cli() -> None:
    """Plan pipeline-parallel training with unequal, per-stage microbatch partitions.

    PROBLEM is a tidgap.problem/1 file or example:NAME (see `tidgap examples`).
    """
