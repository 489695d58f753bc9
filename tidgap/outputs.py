"""The files a command writes besides its text: pictures (``--gantt``), traces
(``--trace``) and exports. Paths are checked before any long work; each file is written
atomically, and a failure is bad input (one line, exit status 2), never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tidgap.errors import InputError
from tidgap.fileio import require_writable, write_json_atomic
from tidgap.problem import Problem
from tidgap.schedules import BaselineResult
from tidgap.timeline import TIMED_SCHEDULES, Timeline, baseline_timeline


def check_outputs(gantt: str | None, trace: str | None, *others: str | None) -> None:
    """Raise :class:`InputError` if a picture, trace or other output cannot be written."""
    if gantt is not None:
        from tidgap.gantt import check_picture_path

        check_picture_path(gantt)
    for path in (gantt, trace, *others):
        if path is not None:
            require_writable(path)


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an :class:`OSError` while writing ``path`` into an :class:`InputError`."""
    try:
        yield
    except OSError as error:
        raise InputError(f"cannot write: {error.strerror or error}", source=str(path)) from None


def write_json(path: str, document: Any) -> None:
    """Write ``document`` to ``path`` atomically (see :func:`writing`)."""
    with writing(path):
        write_json_atomic(path, document)


def write_timelines(
    timelines: list[Timeline], gantt: str | None, trace: str | None, problem_name: str | None
) -> list[str]:
    """Draw and trace ``timelines`` where asked; return one line per file written."""
    written = []
    if gantt is not None:
        from tidgap.gantt import draw

        with writing(gantt):
            draw(timelines, gantt)
        written.append(f"picture written to {gantt}")
    if trace is not None:
        from tidgap.trace import trace_document

        write_json(trace, trace_document(timelines, problem_name))
        written.append(f"trace written to {trace}")
    return written


def write_comparison(
    problem: Problem,
    plans: list[Timeline],
    baselines: dict[str, BaselineResult],
    gantt: str | None,
    trace: str | None,
) -> list[str]:
    """Picture and trace (where asked) of ``plans`` above the best GPipe and 1F1B."""
    if gantt is None and trace is None:
        return []
    timelines = plans + [
        baseline_timeline(problem, name, baselines[name].microbatches) for name in TIMED_SCHEDULES
    ]
    return write_timelines(timelines, gantt, trace, problem.name)
