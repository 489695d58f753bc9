"""Errors raised by code tidgap runs on the user's behalf (a model's constructor, its
layers, a module imported by name): one line of bad input, never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tidgap.model.errors import InputError, first_line


@contextmanager
def user_errors(what: str, source: str | None = None) -> Iterator[None]:
    """Turn any :class:`Exception` (``SystemExit`` too) raised inside into an
    :class:`InputError` ``WHAT: first line`` on ``source``; an :class:`InputError` passes
    through, and so does ``KeyboardInterrupt``."""
    try:
        yield
    except InputError:
        raise
    except (Exception, SystemExit) as error:
        raise InputError(f"{what}: {first_line(error)}", source=source) from None
