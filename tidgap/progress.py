"""The progress line ``tidgap search`` draws on a terminal, one refresh per generation."""

from __future__ import annotations

import time

import click

from tidgap.planner import SearchProgress


class ProgressLine:
    """Rewrites one stderr line: generation, evaluations/s, best time, gain over GPipe.

    Redraws at most ``refresh`` times a second; :meth:`close` ends the line.
    """

    def __init__(self, time_unit: str, refresh: float = 10.0):
        self.time_unit = time_unit
        self.interval = 1.0 / refresh
        self.last_draw = 0.0
        self.drawn = False

    def __call__(self, progress: SearchProgress) -> None:
        now = time.perf_counter()
        if now - self.last_draw < self.interval:
            return
        self.last_draw = now
        best = progress.best_time
        rate = progress.evaluations / max(progress.elapsed, 1e-9)
        gain = 100.0 * (progress.gpipe_time / best - 1.0)
        line = (
            f"generation {progress.generation:>6}  {rate:9.3g} evaluations/s  "
            f"best {best:.6g} {self.time_unit}  {gain:+.2f}% vs GPipe  "
            f"{progress.elapsed:5.1f} s"
        )
        click.echo("\r" + line, nl=False, err=True)
        self.drawn = True

    def close(self) -> None:
        """Finish the line so later output starts on a fresh one."""
        if self.drawn:
            click.echo("", err=True)
