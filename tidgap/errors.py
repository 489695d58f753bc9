"""One error type for bad input: it names the file and the field as a JSON path."""

from __future__ import annotations

from collections.abc import Sequence

JsonPath = Sequence[str | int]


def format_path(path: JsonPath) -> str:
    """Render ``("stages", 2, "forward")`` as ``stages[2].forward``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


class InputError(ValueError):
    """Bad input: a file (or option) that cannot be used as given.

    ``source`` names the file or option, ``path`` the field inside it; ``str()``
    is the one line the command line prints after ``tidgap: error:``.
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

    def __str__(self) -> str:
        parts = [p for p in (self.source, format_path(self.path)) if p]
        return ": ".join([*parts, self.message])
