"""Shared helpers for the command-line tests: golden cases, JSON files and running ``tidgap``."""

from __future__ import annotations

import copy
import json
import traceback
from functools import cache
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from tidgap.cli import cli

GOLDEN_PATH = Path(__file__).parents[1] / "data" / "golden.json"
PLAN_FORMAT = "tidgap.plan/1"

Case = dict[str, Any]


@cache
def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN_PATH.read_text(encoding="utf-8"))


def golden_cases() -> list[Case]:
    """Every golden case (a fresh deep copy, safe to mutate)."""
    return copy.deepcopy(_golden()["cases"])


def case_named(name: str) -> Case:
    """The golden case whose problem is called ``name`` (a fresh deep copy)."""
    for case in golden_cases():
        if case["problem"]["name"] == name:
            return case
    raise KeyError(name)


def case_names() -> list[str]:
    """Names of the golden problems, in file order."""
    return [case["problem"]["name"] for case in _golden()["cases"]]


def plan_document(case: Case, index: int = 0, **extra: Any) -> dict[str, Any]:
    """Golden plan ``index`` of ``case`` as a ``tidgap.plan/1`` document (plus ``extra`` keys)."""
    plan = case["plans"][index]
    document: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "forward": copy.deepcopy(plan["forward"]),
        "backward": copy.deepcopy(plan["backward"]),
    }
    document.update(extra)
    return document


def write_json(path: Path, document: object) -> Path:
    """Write ``document`` to ``path`` (``NaN``/``Infinity`` written literally); return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return path


def run_cli(*args: str) -> Result:
    """Run ``tidgap ARGS...`` in-process; stdout and stderr are kept apart."""
    return CliRunner().invoke(cli, list(args))


def crashed(result: Result) -> bool:
    """Whether the command died of an exception other than a normal exit."""
    return result.exception is not None and not isinstance(result.exception, SystemExit)


def describe(result: Result) -> str:
    """Exit code, stdout, stderr and any traceback of ``result``, for assertion messages."""
    text = (
        f"exit code {result.exit_code}\n--- stdout ---\n{result.stdout}"
        f"--- stderr ---\n{result.stderr}"
    )
    if crashed(result) and result.exc_info is not None:
        text += "--- traceback ---\n" + "".join(traceback.format_exception(*result.exc_info))
    return text


def json_output(result: Result) -> Any:
    """The single JSON document a successful ``--json`` command printed on stdout."""
    assert result.exit_code == 0, describe(result)
    assert result.stdout.strip(), describe(result)
    return json.loads(result.stdout)
