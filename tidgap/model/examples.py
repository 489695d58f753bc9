"""Built-in example problems, shipped as package data and named ``example:NAME``."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from tidgap.model.errors import InputError

EXAMPLE_PREFIX = "example:"
DEFAULT_EXAMPLE = "gpt1-14"


def _folder() -> Path:
    return Path(str(resources.files("tidgap.data.examples")))


def example_names() -> list[str]:
    """Names of the built-in problems, sorted."""
    return sorted(path.stem for path in _folder().glob("*.json"))


def example_path(name: str) -> Path:
    """The file of built-in problem ``name``; an unknown name is an :class:`InputError`."""
    path = _folder() / f"{name}.json"
    if name not in example_names():
        known = ", ".join(example_names())
        raise InputError(f"no built-in example {name!r} (known: {known})")
    return path


def example_summary(name: str) -> dict[str, object]:
    """Name, stage count, batch size, unit and provenance of a built-in problem."""
    document = json.loads(example_path(name).read_text(encoding="utf-8"))
    source = document.get("source") or {}
    return {
        "name": name,
        "stages": len(document["stages"]),
        "batch_size": document["batch_size"],
        "unit": document.get("unit", 1),
        "description": source.get("description", ""),
    }
