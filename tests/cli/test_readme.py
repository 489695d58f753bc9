"""The README stays true: its Python code runs, its ``pip install`` extras exist, and its
command table shows each command's arguments as ``--help`` does.

Python blocks run section by section (a ``##`` heading), the blocks of one section in one
namespace, in a fresh folder. A block that imports ``torch`` needs PyTorch (the
``profile`` extra) and is skipped, saying so, without it.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

from tests.support.cli_helpers import describe, run_cli
from tidgap.cli import cli

README = Path(__file__).parents[2] / "README.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
NEEDS_TORCH = re.compile(r"^\s*(?:import|from) torch\b", re.MULTILINE)
PIP_EXTRAS = re.compile(r"pip install '([^'\[]+)\[([^\]]+)\]'")
#: A command-table row: ``| `tidgap COMMAND ARGS...` | what it does |``.
COMMAND_ROW = re.compile(r"^\| `tidgap ([a-z]+)([^`]*)`", re.MULTILINE)
OPTION = re.compile(r"--[a-z][a-z0-9-]*")


def _sections() -> dict[str, list[str]]:
    """``##`` heading -> the Python blocks under it, in order (sections without any left out)."""
    sections: dict[str, list[str]] = {}
    for part in re.split(r"^## ", README.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]:
        heading, _, body = part.partition("\n")
        blocks = PYTHON_BLOCK.findall(body)
        if blocks:
            sections[heading.strip()] = blocks
    return sections


def test_the_readme_has_python_api_code() -> None:
    """The extraction finds the Python API section's three blocks (else the test below is
    vacuous)."""
    assert len(_sections().get("Python API", [])) == 3


@pytest.mark.parametrize("section", sorted(_sections()))
def test_readme_python_runs(
    section: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Every Python block of ``section`` runs, in order, without an exception."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme"}
    for index, block in enumerate(_sections()[section]):
        if NEEDS_TORCH.search(block):
            pytest.importorskip("torch", reason=f"README {section!r} block {index} needs torch")
        exec(compile(block, f"README.md: {section}, block {index}", "exec"), namespace)  # noqa: S102


def test_readme_pip_extras_exist() -> None:
    """``pip install '.[EXTRA]'``: from the checkout (``tidgap[...]`` is not on PyPI), and
    every extra is one the package declares."""
    extras = set(importlib.metadata.metadata("tidgap").get_all("Provides-Extra") or [])
    found = PIP_EXTRAS.findall(README.read_text(encoding="utf-8"))
    assert found
    for target, names in found:
        assert target in (".", "-e ."), target
        assert set(names.split(",")) <= extras, names


def _usage_arguments(command: str) -> dict[str, bool]:
    """``--help``'s positional arguments of ``command``: name -> whether it is required."""
    result = run_cli(command, "--help")
    assert result.exit_code == 0, describe(result)
    usage = next(line for line in result.stdout.splitlines() if line.startswith("Usage:"))
    words = usage.partition("[OPTIONS]")[2].split()
    return {word.strip("[]"): not word.startswith("[") for word in words}


def _row_arguments(text: str) -> dict[str, bool]:
    """A README row's positional arguments (before the first option): name -> required."""
    arguments = {}
    for word in text.split():
        if word.lstrip("[").startswith("-"):
            break
        arguments[word.strip("[]")] = not word.startswith("[")
    return arguments


def test_readme_command_rows_match_help() -> None:
    """Each row names arguments of the command; one shown optional in ``--help`` is shown
    required only where another row of that command leaves it out (``evaluate PROBLEM
    PLAN`` beside ``evaluate PROBLEM --schedule``), and none the other way round."""
    rows: dict[str, list[dict[str, bool]]] = {}
    for command, text in COMMAND_ROW.findall(README.read_text(encoding="utf-8")):
        rows.setdefault(command, []).append(_row_arguments(text))
    assert {"search", "export", "compare", "evaluate"} <= set(rows) <= set(cli.commands)
    for command, forms in rows.items():
        usage = _usage_arguments(command)
        for form in forms:
            assert set(form) <= set(usage), (command, form, usage)
            for name, required in form.items():
                if required and not usage[name]:
                    assert any(name not in other for other in forms), (command, name)
                if not required:
                    assert not usage[name], (command, name)
            assert all(name in form for name, needed in usage.items() if needed), (command, form)


def _long_options(command: str) -> set[str]:
    """The long options of ``command`` (``--help`` left out)."""
    params = cli.commands[command].params
    return {o for p in params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")} - {
        "--help"
    }


def test_readme_command_rows_list_every_option() -> None:
    """A command's rows show every long option its ``--help`` lists and none it lacks; the
    model options that ``profile``, ``calibrate`` and ``run`` share are described in the
    README's text instead ("model options as in profile")."""
    text = README.read_text(encoding="utf-8")
    rows: dict[str, str] = {}
    for command, row in COMMAND_ROW.findall(text):
        rows[command] = rows.get(command, "") + row
    models = _long_options("profile") - set(OPTION.findall(rows["profile"]))
    assert models and all(f"`{option}`" in text for option in models), models
    for command in cli.commands:
        shown, options = set(OPTION.findall(rows.get(command, ""))), _long_options(command)
        assert shown <= options, (command, shown - options)
        assert options - shown <= models, (command, options - shown - models)
