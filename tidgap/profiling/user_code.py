"""Errors raised by code tidgap runs on the user's behalf (a model's constructor, its
layers, a module imported by name): one line of bad input, never a traceback."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.machinery import PathFinder

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


def model_source(reference: str) -> str | None:
    """The file a ``module:attribute`` model reference's top-level module is read from
    (the current folder first, as ``build_model`` imports it), found without importing it
    (an output must not replace it); ``None`` for the built-in models, a dotted module
    (finding it would import its package) or one not found."""
    module_name, colon, _ = reference.partition(":")
    if not colon or not module_name.isidentifier():
        return None
    try:
        spec = PathFinder.find_spec(module_name, [os.getcwd(), *sys.path])
    except (ImportError, ValueError, OSError):
        return None
    return spec.origin if spec is not None and spec.has_location else None
