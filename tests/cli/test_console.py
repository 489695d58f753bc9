"""The console script: a Ctrl-C while the command line loads ends it in one line."""

from __future__ import annotations

import signal
import subprocess
import sys

#: Runs the console script with a SIGINT delivered while ``tidgap.cli`` is being imported
#: (the first import of it sends the signal, then imports it).
INTERRUPTED_WHILE_LOADING = """
import builtins, os, signal, sys
real_import = builtins.__import__
def interrupting_import(name, *args, **kwargs):
    if name == "tidgap.cli" and "tidgap.cli" not in sys.modules:
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting_import
sys.argv = ["tidgap", "--version"]
from tidgap.console import main
main()
"""


def default_sigint() -> None:
    """SIGINT handled by default and not blocked in a child, whatever the test process
    left (a test before may leave it ignored or blocked, which a child inherits)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def interrupted(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run in a Python of its own whose SIGINT is handled by default."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=default_sigint
    )


def test_ctrl_c_while_the_command_line_loads_is_one_line() -> None:
    result = interrupted(INTERRUPTED_WHILE_LOADING)
    assert result.returncode == 130
    assert result.stderr.strip() == "tidgap: interrupted"
    assert result.stdout == ""  # the command did not run


#: A command that Ctrl-C interrupts outside a search: click's KeyboardInterrupt path.
INTERRUPTED_COMMAND = """
import os, signal, sys, time
from tidgap.cli.main import cli
@cli.command("wait")
def wait():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(10)
sys.argv = ["tidgap", "wait"]
cli.main()
"""


def test_ctrl_c_in_a_command_ends_the_echoed_line_once() -> None:
    """click writes the newline that ends the terminal's ``^C``; tidgap wrote a second,
    a blank line before ``tidgap: interrupted``."""
    result = interrupted(INTERRUPTED_COMMAND)
    assert result.returncode == 130
    assert result.stderr == "\ntidgap: interrupted\n"


def test_the_console_script_runs_the_command_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tidgap", "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert result.stdout.startswith("tidgap, version ")


def test_import_tidgap_loads_its_names_when_used() -> None:
    code = (
        "import sys, tidgap; loaded = 'tidgap.optimize.driver' in sys.modules; "
        "tidgap.search; print(loaded, 'tidgap.optimize.driver' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split() == ["False", "True"]


def test_submodules_the_docs_name_are_reachable_after_import_tidgap() -> None:
    """The eager imports of before loaded them; names like ``tidgap.optimize.many`` in
    README.md and docs/outputs.md raised AttributeError with the lazy package."""
    code = (
        "import tidgap; "
        "print(tidgap.optimize.many.SearchFailed.__name__, "
        "tidgap.schedules.families.plan_timeline.__name__, "
        "tidgap.optimize.memory.format_bytes(336e6), tidgap.runtime.lowering.recomputes.__name__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split() == ["SearchFailed", "plan_timeline", "336", "MB", "recomputes"]


def test_a_sigint_ignored_stays_ignored_while_the_command_line_loads() -> None:
    """A background job of a script ignores SIGINT; the held signal ended it (130)."""
    result = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_WHILE_LOADING],
        capture_output=True,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("tidgap, version ")
