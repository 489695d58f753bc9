"""Reading and writing tidgap's JSON files: strict parsing, one-line errors, atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from tidgap.atomic import probe, write_text_atomically
from tidgap.errors import InputError

Model = TypeVar("Model", bound=BaseModel)

_MESSAGES = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown key",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "too_short": "must not be empty",
}


def _describe(value: Any) -> str:
    """A short JSON rendering of an offending value, for error messages."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def input_error_from(error: ValidationError) -> InputError:
    """The first problem pydantic found, as an :class:`InputError` with its JSON path."""
    first = error.errors()[0]
    path = tuple(first["loc"])
    inner = first.get("ctx", {}).get("error")
    if isinstance(inner, InputError):
        return InputError(inner.message, path + inner.path)
    kind = first["type"]
    if kind in ("greater_than", "greater_than_equal"):
        op = ">" if kind == "greater_than" else ">="
        bound = next(iter(first["ctx"].values()))
        return InputError(f"must be {op} {bound} (got {_describe(first['input'])})", path)
    if kind in _MESSAGES:
        message = _MESSAGES[kind]
        if kind not in ("missing", "extra_forbidden", "too_short"):
            message += f" (got {_describe(first['input'])})"
        return InputError(message, path)
    return InputError(first["msg"][0].lower() + first["msg"][1:], path)


def parse_model(model: type[Model], data: Any, format_tag: str) -> Model:
    """Validate a decoded JSON document as ``model``; raise :class:`InputError` if it is bad.

    The document must be an object whose ``format`` is ``format_tag``.
    """
    if not isinstance(data, dict):
        raise InputError("expected a JSON object at the top level")
    if "format" not in data:
        raise InputError(f"required field is missing (expected {format_tag!r})", ("format",))
    if data["format"] != format_tag:
        raise InputError(
            f"unknown format {_describe(data['format'])}, expected {format_tag!r}", ("format",)
        )
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise input_error_from(error) from None


def read_json(path: str | os.PathLike[str]) -> Any:
    """Decode a JSON file; unreadable or malformed files raise :class:`InputError`."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise InputError(f"cannot read file: {reason}", source=source) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(
            f"not valid JSON (line {error.lineno}, column {error.colno}): {error.msg}",
            source=source,
        ) from None


def write_json_atomic(path: str | os.PathLike[str], document: Any) -> None:
    """Write ``document`` as JSON to ``path`` with :mod:`tidgap.atomic`'s one writer: readers
    never see half a file, and on failure ``path`` keeps its old content."""
    write_text_atomically(path, json.dumps(document, indent=1, allow_nan=False) + "\n")


def require_writable(path: str | os.PathLike[str]) -> None:
    """Raise :class:`InputError` unless ``path`` can be (re)written: tried before work starts
    (:func:`tidgap.atomic.probe`)."""
    probe(path)
