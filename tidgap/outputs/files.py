"""The files a command writes besides its text: pictures (``--gantt``), traces
(``--trace``) and exports. Before any long work each path is checked (not an input, not
another output, really writable); each file is written by :mod:`tidgap.outputs.atomic`, and a
failure is bad input (one line, exit status 2), never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tidgap.model.errors import InputError
from tidgap.model.examples import EXAMPLE_PREFIX
from tidgap.model.fileio import write_json_atomic
from tidgap.model.problem import Problem
from tidgap.outputs.atomic import Identity, identity, probe
from tidgap.schedules.baselines import BaselineResult
from tidgap.schedules.families import TIMED_BASELINES, baseline_timeline
from tidgap.schedules.timeline import Timeline

#: An output option and its path, like ``("--out", "plan.json")``; ``None``: not asked for.
Output = tuple[str, str | os.PathLike[str] | None]


def check_outputs(
    gantt: str | None,
    trace: str | None,
    *others: Output,
    inputs: Mapping[str, str | os.PathLike[str] | None] | None = None,
) -> None:
    """Raise :class:`InputError`, before any long work, if an output is the same file as an
    input or as another output (through symlinks and hard links), or cannot be written.

    ``inputs`` maps an argument (``PROBLEM``, ``PLAN``) to its file; ``example:NAME`` and
    ``None`` are not files. Streams (devices, FIFOs) may be named more than once.
    """
    if gantt is not None:
        from tidgap.outputs.gantt import check_picture_path

        check_picture_path(gantt)
    owners: dict[Identity, tuple[str, str]] = {}  # a file -> who has it, why not write it
    for name, path in (inputs or {}).items():
        key = None if path is None or str(path).startswith(EXAMPLE_PREFIX) else identity(path)
        if key is not None:
            owners.setdefault(key, (f"{name} {path}", "refusing to overwrite an input"))
    for option, path in (("--gantt", gantt), ("--trace", trace), *others):
        if path is None:
            continue
        key = identity(path)
        if key in owners:
            owner, reason = owners[key]
            raise InputError(f"is the same file as {owner}; {reason}", source=option)
        if key is not None:
            owners[key] = (f"{option} {path}", "give each output its own file")
        probe(path)


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
        from tidgap.outputs.gantt import draw

        with writing(gantt):
            draw(timelines, gantt)
        written.append(f"picture written to {gantt}")
    if trace is not None:
        from tidgap.outputs.trace import trace_document

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
        baseline_timeline(problem, name, baselines[name].microbatches) for name in TIMED_BASELINES
    ]
    return write_timelines(timelines, gantt, trace, problem.name)
