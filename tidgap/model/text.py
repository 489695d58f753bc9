"""Text from input files made safe to print: no control characters reach the terminal."""

from __future__ import annotations

import os
from collections.abc import Sequence


def printable(text: str | os.PathLike[str]) -> str:
    """``text`` (or a path's text) with every non-printable character written as its
    ``repr`` escape.

    Control characters (ESC ``\\x1b``, ``\\r``, ``\\n``, ``\\t``, DEL ``\\x7f``, the C1
    controls ``\\x80``-``\\x9f``), format characters such as the bidi overrides
    ``\\u202e``, separators other than the space, and lone surrogates become escapes like
    ``\\x1b`` or ``\\u202e`` (what :meth:`str.isprintable` rejects); everything else,
    backslashes and non-ASCII letters included, is kept as is.
    """
    text = os.fspath(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


#: The most characters :func:`brief` keeps of a value quoted in a message.
BRIEF = 60


def brief(value: object, most: int = BRIEF) -> str:
    """``str(value)`` cut to its first ``most`` characters and ``...`` where longer: a value
    quoted from a file in a one-line message."""
    text = str(value)
    return text if len(text) <= most else text[:most] + "..."


def without_surrogates(text: str) -> str:
    """``text`` (a name from the command line or a file name) with each lone surrogate,
    which is how Python reads a byte that is not UTF-8, as U+FFFD: a name that goes into a
    file tidgap must read back (its reader refuses lone surrogates)."""
    return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 sample``, ``2 samples``: ``count`` and ``noun``, plural unless 1 (``plural``, or
    an ``s`` added)."""
    return f"{count} {noun}" if count == 1 else f"{count} {plural or noun + 's'}"


def unique_labels(labels: Sequence[str]) -> list[str]:
    """``labels`` with each repeat of an earlier one numbered: ``plan``, ``plan (2)`` (a
    ``--compare`` file named ``plan``, or one given twice; a stage named ``a-b`` after a
    stage of layers ``a`` to ``b``)."""
    unique: list[str] = []
    for label in labels:
        n, name = 1, label
        while name in unique:
            n += 1
            name = f"{label} ({n})"
        unique.append(name)
    return unique
