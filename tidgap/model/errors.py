"""One error type for bad input: it names the file and the field as a JSON path."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tidgap.model.text import printable

JsonPath = Sequence[str | int]


#: Most characters of a key a path shows; a longer key is quoted, cut and ended ``...``
#: (as the values that messages quote are).
KEY_CHARS = 40


def format_path(path: JsonPath) -> str:
    """Render ``("stages", 2, "forward")`` as ``stages[2].forward``; a key that is not an
    identifier is quoted, as in ``source["a b"]`` or ``[""]``, and one longer than
    :data:`KEY_CHARS` is cut: ``["xxxxxxxx...]``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part.isidentifier() and len(part) <= KEY_CHARS:
            text += f".{part}" if text else part
        else:
            quoted = json.dumps(part, ensure_ascii=False)
            text += f"[{quoted if len(quoted) <= KEY_CHARS else quoted[: KEY_CHARS - 3] + '...'}]"
    return text


class InputError(ValueError):
    """Bad input: a file (or option) that cannot be used as given.

    ``source`` names the file or option, ``path`` the field inside it; ``str()``
    is the one line the command line prints after ``tidgap: error:``, with every
    non-printable character escaped (:func:`tidgap.model.text.printable`), so that a value or
    key quoted from a file can neither break the line nor reach the terminal raw.
    """

    def __init__(self, message: str, path: JsonPath = (), source: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = tuple(path)
        self.source = source

    def within(self, source: str) -> InputError:
        """Return this error attributed to ``source`` unless it already names one."""
        if self.source is None:
            self.source = source
        return self

    def on(self, source: str) -> InputError:
        """This error attributed to ``source`` instead of the one it names (a model's class
        name, where a helper built it for an argument)."""
        return InputError(self.message, self.path, source)

    def __str__(self) -> str:
        parts = [p for p in (self.source, format_path(self.path)) if p]
        return printable(": ".join([*parts, self.message]))


def joined_message(error: BaseException) -> str:
    """``error``'s message on one line, its lines joined by spaces (a cluster's messages
    break lines mid-sentence)."""
    return " ".join(str(error).split())


def first_line(error: BaseException) -> str:
    """``error`` in one line: its type and its message's first line, e.g.
    ``ValueError: bad input``."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
