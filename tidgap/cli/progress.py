"""The progress line ``tidgap search`` draws on a terminal: the setup phase, then one
refresh per generation."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from tidgap.model.numbers import positive_integer_text
from tidgap.model.text import printable
from tidgap.optimize.driver import SearchProgress

#: What each phase of :func:`tidgap.search` besides the GA is doing, as the line says it.
PHASES = {
    "compile": "setup: compiling (cached on disk after the first run)",
    "baselines": "setup: best GPipe, 1F1B and PipeDream over every microbatch count",
    "heuristics": "setup: local greedy and global DP plans",
    "seeding": "setup: seeding the populations",
    "seed polish": "polishing the best seeds, moving groups of stages",
    "anneal": "annealing each island's best plans",
    "polish": "polishing the best plan",
    "decode": "checking and timing the plans with the reference simulator",
}


def terminal_columns() -> int:
    """The width of the terminal on standard error: ``COLUMNS`` where it is a positive
    integer, else the terminal's own, else 80."""
    given = positive_integer_text(os.environ.get("COLUMNS", ""))
    if given is not None:
        return given
    try:
        return max(os.get_terminal_size(2).columns, 1)
    except OSError:
        return 80


class ProgressLine:
    """Rewrites one stderr line: the setup phase, then generation, evaluations/s, best time,
    gain over GPipe.

    Redraws generations at most ``refresh`` times a second; :meth:`close` ends the line.
    """

    def __init__(self, time_unit: str, refresh: float = 10.0):
        self.time_unit = time_unit
        self.interval = 1.0 / refresh
        self.last_draw = 0.0
        self.drawn = False
        self.started = time.perf_counter()
        self.line = ""
        self.notice = ""

    def _draw(self, line: str) -> None:
        self.line = line
        click.echo(self._shown(), nl=False, err=True)
        self.drawn = True

    def _shown(self) -> str:
        """The line and notice, as redrawn from its start, cut to the terminal's width (a
        longer one wraps, and each redraw then starts a new row): the line first, so that
        the notice stays whole where it fits."""
        width = terminal_columns() - 1
        line = self.line[: max(width - len(self.notice), 0)]
        return "\r" + (line + self.notice)[:width] + "\x1b[K"

    def stopping(self, signal: str) -> None:
        """Say at once that ``signal`` (``"SIGINT"``) asked the search to stop, and keep
        saying it at the end of the line: called from the signal handler, so a first run's
        compile, which the search cannot leave, still answers the key at once. Written
        straight to the terminal: a handler must not re-enter the buffered stderr."""
        self.notice = f"  [{signal}: stopping at the next step; again to stop at once]"
        os.write(2, self._shown().encode())
        self.drawn = True

    def phase(self, name: str) -> None:
        """Show that setup phase ``name`` (a key of :data:`PHASES`) has started."""
        elapsed = time.perf_counter() - self.started
        self._draw(f"{PHASES.get(name, name)}  {elapsed:5.1f} s")

    def __call__(self, progress: SearchProgress) -> None:
        now = time.perf_counter()
        if now - self.last_draw < self.interval:
            return
        self.last_draw = now
        best = progress.best_time
        rate = progress.evaluations / max(progress.elapsed, 1e-9)
        gain = 100.0 * (progress.gpipe_time / best - 1.0)
        self._draw(
            f"generation {progress.generation:>6}  {rate:9.3g} evaluations/s  "
            f"best {best:.6g} {self.time_unit}  {gain:+.2f}% vs GPipe  "
            f"{now - self.started:5.1f} s"
        )

    def clear(self) -> None:
        """Blank the line, so that a message takes it (the next refresh draws it again)."""
        if self.drawn:
            click.echo("\r\x1b[K", nl=False, err=True)
            self.drawn = False

    def close(self) -> None:
        """Finish the line so later output starts on a fresh one."""
        if self.drawn:
            click.echo("", err=True)


@contextmanager
def warnings_shown(category: type[Warning], progress: ProgressLine | None) -> Iterator[None]:
    """Within it, each ``category`` warning is a ``tidgap: warning:`` line on stderr,
    taking the progress line's place (every one: their sender says each once); other
    warnings as Python shows them."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", category)
        shown = warnings.showwarning

        def show(message: Warning | str, kind: type[Warning], *args: Any, **kwargs: Any) -> None:
            if not issubclass(kind, category):
                shown(message, kind, *args, **kwargs)
                return
            if progress is not None:
                progress.clear()
            click.echo(f"tidgap: warning: {printable(str(message))}", err=True)

        warnings.showwarning = show
        yield
