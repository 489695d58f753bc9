"""The ``tidgap`` console script: loads the command line, then runs it.

Loading takes about a second (NumPy, pydantic, click and the commands); a Ctrl-C in it is
held until loading ends, then ends the command as a Ctrl-C outside a search does
(``tidgap: interrupted``, status 130), not with a traceback from whatever was importing.
"""

from __future__ import annotations

import signal
import sys

from tidgap.held_signals import handling


def main() -> None:
    """Console-script entry point (``python -m tidgap`` too)."""
    heard: list[int] = []
    # a SIGINT ignored (a background job of a script) stays so
    held = () if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else (signal.SIGINT,)
    with handling(held, lambda signum, frame: heard.append(signum)):
        from tidgap.cli import main as run_command_line
    if heard:
        from tidgap.optimize.interrupts import exit_status, stopped_line

        sys.stderr.write(stopped_line(signal.SIGINT))
        sys.exit(exit_status(signal.SIGINT))
    run_command_line()
