"""The files a command writes besides its text: pictures (``--gantt``), traces
(``--trace``) and exports. Before any long work each path is checked (not an input, not
another output, really writable); a command's files are written together by
:mod:`tidgap.outputs.atomic` (all made before any is put in place), and a failure is bad
input (one line, exit status 2), never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidgap.model.errors import InputError
from tidgap.model.examples import EXAMPLE_PREFIX
from tidgap.model.fileio import json_text
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.model.text import printable
from tidgap.outputs.atomic import (
    Identity,
    Producer,
    identity,
    probe,
    stream_identity,
    write_together,
)
from tidgap.schedules.baselines import BaselineResult
from tidgap.schedules.families import (
    SCHEDULES,
    TIMED_BASELINES,
    baseline_label,
    baseline_timeline,
    plan_timeline,
)
from tidgap.schedules.timeline import Timeline

#: An output option and its path, like ``("--out", "plan.json")``; ``None``: not asked for.
Output = tuple[str, str | os.PathLike[str] | None]


def check_outputs(
    gantt: str | None,
    trace: str | None,
    *others: Output,
    inputs: Mapping[str, str | os.PathLike[str] | None]
    | Iterable[tuple[str, str | os.PathLike[str] | None]]
    | None = None,
) -> None:
    """Raise :class:`InputError`, before any long work, if an output is the same file as an
    input or as another output (through symlinks and hard links), or cannot be written.

    ``inputs`` maps an argument (``PROBLEM``, ``PLAN``) to its file, or pairs them (a
    repeatable option, ``--compare``, once per file); ``example:NAME`` and
    ``None`` are not files. Streams (devices, FIFOs) may be named more than once. An empty
    name is refused (``Path("")`` is the current folder), and so is the file standard
    output or error is redirected to (``/dev/stdout``).
    """
    owners: dict[Identity, tuple[str, str]] = {}  # a file -> who has it, why not write it
    for descriptor, stream in ((1, "standard output"), (2, "standard error")):
        key = stream_identity(descriptor)  # /dev/stdout redirected to a file: replaced
        if key is not None:  # by the output, the report would go to the file it unlinked
            owners.setdefault(key, (f"this command's {stream}", "name another file"))
    pairs = inputs.items() if isinstance(inputs, Mapping) else inputs or ()
    for name, path in pairs:
        key = None if path is None or str(path).startswith(EXAMPLE_PREFIX) else identity(path)
        if key is not None:
            owners.setdefault(key, (f"{name} {path}", "refusing to overwrite an input"))
    outputs = [("--gantt", gantt), ("--trace", trace), *others]
    for option, path in outputs:
        if path is not None and not str(path):
            raise InputError("no file name (an empty argument)", source=option)
    if gantt is not None:
        from tidgap.outputs.gantt import check_picture_path

        check_picture_path(gantt)
    for option, path in outputs:
        if path is None:
            continue
        key = identity(path)
        if key in owners:
            owner, reason = owners[key]
            raise InputError(f"is the same file as {owner}; {reason}", source=option)
        if key is not None:
            owners[key] = (f"{option} {path}", "give each output its own file")
        try:
            probe(path)
        except InputError as error:  # which option, as the other refusals here say
            error.source = option if error.source is None else f"{option}: {error.source}"
            raise


@contextmanager
def writing(path: str | os.PathLike[str], option: str | None = None) -> Iterator[None]:
    """Turn an :class:`OSError` while writing ``path`` into an :class:`InputError` naming
    ``path``, after ``option`` where given."""
    try:
        yield
    except OSError as error:
        source = str(path) if option is None else f"{option}: {path}"
        raise InputError(f"cannot write: {error.strerror or error}", source=source) from None


@contextmanager
def output_folder(path: str | os.PathLike[str], option: str = "--out-dir") -> Iterator[Path]:
    """Make the folder ``path`` (and its missing parents) for a command's outputs, yielding
    it (:class:`InputError` naming ``option`` and ``path`` where it cannot); where the
    block raises (an output refused before any work), remove again the folders it made, so
    a refused command leaves nothing behind."""
    folder = Path(path)
    with writing(path, option):  # a name too long fails here too
        missing = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        with writing(path, option):
            folder.mkdir(parents=True, exist_ok=True)
        yield folder
    except BaseException:
        for made in missing:  # deepest first; a folder something was put in stays
            with suppress(OSError):
                made.rmdir()
        raise


@dataclass(frozen=True)
class OutputFile:
    """One file a command writes: its path, what makes its content at a temporary path,
    and the line to print once it is written (``None``: none)."""

    path: str | os.PathLike[str]
    produce: Producer
    said: str | None = None


def text_file(path: str | os.PathLike[str], text: str, said: str | None = None) -> OutputFile:
    """``text`` (UTF-8) as an :class:`OutputFile`."""
    return OutputFile(path, lambda temporary: temporary.write_text(text, encoding="utf-8"), said)


def json_file(path: str | os.PathLike[str], document: Any, said: str | None = None) -> OutputFile:
    """``document`` as JSON (:func:`tidgap.model.fileio.json_text`)."""
    return text_file(path, json_text(document), said)


def write_files(files: list[OutputFile]) -> list[str]:
    """Write ``files`` together (:func:`tidgap.outputs.atomic.write_together`: a failure
    while making any leaves every path as it was; :class:`InputError` naming the path);
    return the lines they say."""
    write_together([(file.path, file.produce) for file in files])
    return [file.said for file in files if file.said is not None]


def write_json(path: str | os.PathLike[str], document: Any) -> None:
    """Write ``document`` to ``path`` atomically."""
    write_files([json_file(path, document)])


def timeline_files(
    timelines: list[Timeline], gantt: str | None, trace: str | None, problem_name: str | None
) -> list[OutputFile]:
    """The picture and trace of ``timelines``, where asked."""
    files = []
    if gantt is not None:
        from tidgap.outputs.gantt import picture

        files.append(
            OutputFile(gantt, picture(timelines), f"picture written to {printable(gantt)}")
        )
    if trace is not None:
        from tidgap.outputs.trace import trace_document

        document = trace_document(timelines, problem_name)
        files.append(json_file(trace, document, f"trace written to {printable(trace)}"))
    return files


def plan_timelines(
    problem: Problem, plan: Plan | None, run_priced: bool, drawn: bool, label: str = "plan"
) -> list[Timeline]:
    """``plan``'s timeline named ``label`` (none without a plan, or where nothing is
    ``drawn``): as ``tidgap run`` runs it where ``run_priced``, else the model's."""
    if plan is None or not drawn:
        return []
    if run_priced:
        from tidgap.runtime.pricing import run_prediction

        return [run_prediction(problem, plan, label)[1]]
    return [plan_timeline(problem, plan, label)]


def comparison_files(
    problem: Problem,
    plans: list[Timeline],
    baselines: dict[str, BaselineResult],
    gantt: str | None,
    trace: str | None,
    run_priced: bool = False,
) -> list[OutputFile]:
    """Picture and trace (where asked) of ``plans`` above the best GPipe and 1F1B; with
    ``run_priced``, the baselines' timelines as ``tidgap run`` runs them (as a run-priced
    search times plans: :func:`~tidgap.runtime.pricing.run_prediction`)."""
    if gantt is None and trace is None:
        return []

    def timed(name: str) -> Timeline:
        m = baselines[name].microbatches
        if not run_priced:
            return baseline_timeline(problem, name, m)
        from tidgap.runtime.pricing import run_prediction

        plan = SCHEDULES[name].baseline(problem, m)
        return run_prediction(problem, plan, baseline_label(name, m))[1]

    timelines = plans + [timed(name) for name in TIMED_BASELINES]
    return timeline_files(timelines, gantt, trace, problem.name)
