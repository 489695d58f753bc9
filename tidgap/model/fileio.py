"""Reading and writing tidgap's JSON files: strict parsing, one-line errors, atomic writes."""

from __future__ import annotations

import codecs
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

from tidgap.model.errors import InputError, JsonPath
from tidgap.model.numbers import plain
from tidgap.model.text import printable
from tidgap.outputs.atomic import write_text_atomically

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
    """A short JSON rendering of an offending value for error messages, at most 40
    characters, with non-printable characters escaped (:func:`tidgap.model.text.printable`)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    text = printable(text)
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


def refuse_null_keys(document: Any, free: frozenset[str] = frozenset()) -> None:
    """Raise :class:`InputError` at the first key, in file order, whose value is ``null``,
    outside the top-level keys of ``free`` (free-form JSON): a field not given is left
    out, and a ``null`` taken for it would drop it silently (``"max_microbatch": null``, a
    cap). Items of arrays are left to the model's types."""
    stack: list[tuple[Any, JsonPath]] = [(document, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            entries = [(k, v) for k, v in value.items() if path or k not in free]
            for key, item in entries:
                if item is None:
                    raise InputError("is null; leave the key out to give no value", (*path, key))
        elif isinstance(value, list):
            entries = list(enumerate(value))
        else:
            continue
        # only objects and arrays are visited: a table's numbers hold no key
        inner = [(key, item) for key, item in entries if isinstance(item, (dict, list))]
        stack.extend((item, (*path, key)) for key, item in reversed(inner))


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
        return model.model_validate(plain(data))
    except ValidationError as error:
        raise input_error_from(error) from None


#: Deepest nesting of arrays and objects in a file, counting the top level as 1 (anywhere,
#: ``source`` included).
MAX_DEPTH = 64
#: The largest file :func:`read_json` reads (bytes): far above any problem, plan or
#: profile (a problem's tables for 100 stages of 10,000 sizes each are about 20 MB), far
#: below what would exhaust a machine's memory.
MAX_FILE_BYTES = 1 << 28
#: Most digits of a JSON integer, anywhere in a file.
MAX_INTEGER_DIGITS = 100


@dataclass(frozen=True)
class _Unusable:
    """A JSON number that no command can use, kept as this marker until its path is known."""

    reason: str


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: the object, with a marker for a key given more than once
    (JSON leaves it to the reader; tidgap refuses it rather than keep one silently)."""
    document: dict[str, Any] = {}
    for key, value in pairs:
        document[key] = _Unusable("key given more than once") if key in document else value
    return document


def _integer(literal: str) -> int | _Unusable:
    """``parse_int``: the integer, or a marker if it has more than MAX_INTEGER_DIGITS digits
    (which also keeps Python's own limit on converting long integers from raising)."""
    digits = len(literal.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        return _Unusable(f"integer with {digits} digits (at most {MAX_INTEGER_DIGITS})")
    return int(literal)


def _number(literal: str) -> float | _Unusable:
    """``parse_float``: the number, or a marker if it is too large for a float (``1e400``)."""
    value = float(literal)
    if math.isfinite(value):
        return value
    shown = literal if len(literal) <= 20 else literal[:17] + "..."
    return _Unusable(f"must be a finite number (got {shown}, out of range)")


def _constant(name: str) -> _Unusable:
    """``parse_constant``: ``NaN``, ``Infinity`` and ``-Infinity`` are never accepted."""
    return _Unusable(f"must be a finite number (got {name})")


def _lone_surrogate(text: str) -> str | None:
    """The first lone surrogate in ``text`` (JSON's ``\\ud800`` escape), if any."""
    if text.isascii():
        return None
    return next((ch for ch in text if "\ud800" <= ch <= "\udfff"), None)


def _check_values(document: Any, root: JsonPath = ()) -> None:
    """Raise :class:`InputError` at the first value, in file order, that no command can
    use: nesting deeper than :data:`MAX_DEPTH`, an integer longer than
    :data:`MAX_INTEGER_DIGITS` digits, a number that is not finite, or a string or key
    holding a lone surrogate (not Unicode text: it cannot be printed or written). Paths
    start at ``root`` (the field holding ``document``)."""
    stack: list[tuple[Any, tuple[str | int, ...], int]] = [(document, tuple(root), 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, _Unusable):
            raise InputError(value.reason, path)
        if isinstance(value, str):
            surrogate = _lone_surrogate(value)
            if surrogate is not None:
                raise InputError(f"string holds a lone surrogate {surrogate!r}", path)
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels", path)
        items = list(value.items() if isinstance(value, dict) else enumerate(value))
        for key, _ in items:
            surrogate = _lone_surrogate(key) if isinstance(key, str) else None
            if surrogate is not None:
                raise InputError(f"key holds a lone surrogate {surrogate!r}", (*path, key))
        stack.extend((item, (*path, key), depth + 1) for key, item in reversed(items))


#: A JSON string (skipped) or a bracket, and how a bracket changes the nesting depth.
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _too_deep_at(text: str) -> tuple[int, int]:
    """Line and column (1-based) of the bracket that opens level ``MAX_DEPTH + 1`` in JSON
    text too deep for the parser; ``(1, 1)`` if there is none."""
    depth = 0
    for match in _BRACKETS.finditer(text):
        depth += _STEP.get(match.group(), 0)
        if depth > MAX_DEPTH:
            start = match.start()
            return text.count("\n", 0, start) + 1, start - text.rfind("\n", 0, start)
    return 1, 1


def require_file_name(name: str) -> None:
    """:class:`InputError` where ``name``, a file argument, is empty (``Path("")`` would
    read the current folder)."""
    if not name:
        raise InputError("no file name (an empty argument)", source='""')


def _read_at_most(file: BinaryIO, limit: int) -> bytes:
    """``file``'s bytes up to ``limit`` of them, read a MiB at a time (one read of ``limit``
    bytes would reserve them all, whatever the file's size)."""
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        chunk = file.read(min(1 << 20, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_json(path: str | os.PathLike[str]) -> Any:
    """Decode a JSON file. An empty name, a file that cannot be read, is larger than
    :data:`MAX_FILE_BYTES` (``/dev/zero``, say), is not UTF-8 (a byte-order mark may begin
    it), is not JSON or holds a value no command can use (see :func:`_check_values`) raises
    :class:`InputError`."""
    source = str(path)
    require_file_name(source)
    try:
        with Path(path).open("rb") as file:
            data = _read_at_most(file, MAX_FILE_BYTES + 1)
    except OSError as error:
        raise InputError(f"cannot read file: {error.strerror or error}", source=source) from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError(
            f"larger than {MAX_FILE_BYTES >> 20} MiB: not a tidgap file", source=source
        )
    mark = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[mark:].decode("utf-8")  # a leading byte-order mark (Notepad's) dropped
    except UnicodeDecodeError as error:
        raise InputError(
            f"not UTF-8 text (byte {mark + error.start}: {error.reason})", source=source
        ) from None
    return parse_json(text, source)


def parse_json(text: str, source: str, field: JsonPath = ()) -> Any:
    """Decode JSON ``text`` held in ``source`` (at ``field``, for JSON inside a file) by
    :func:`read_json`'s rules; :class:`InputError` naming both."""
    try:
        document = json.loads(
            text,
            parse_int=_integer,
            parse_float=_number,
            parse_constant=_constant,
            object_pairs_hook=_object,
        )
    except json.JSONDecodeError as error:
        raise InputError(
            f"not valid JSON (line {error.lineno}, column {error.colno}): {error.msg}",
            field,
            source=source,
        ) from None
    except RecursionError:
        line, column = _too_deep_at(text)
        raise InputError(
            f"nested deeper than {MAX_DEPTH} levels (line {line}, column {column})",
            field,
            source=source,
        ) from None
    try:
        _check_values(document, field)
    except InputError as error:
        raise error.within(source) from None
    return document


def json_text(document: Any) -> str:
    """``document`` as the JSON text tidgap writes (indented, finite numbers only)."""
    return json.dumps(document, indent=1, allow_nan=False) + "\n"


def write_json_atomic(path: str | os.PathLike[str], document: Any) -> None:
    """Write ``document`` as JSON to ``path`` with :mod:`tidgap.outputs.atomic`'s one writer:
    readers never see half a file, and on failure ``path`` keeps its old content."""
    write_text_atomically(path, json_text(document))
