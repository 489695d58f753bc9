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


@contextmanager
def naming(what: str) -> Iterator[None]:
    """An :class:`InputError` raised inside, its message led by ``what: ``."""
    try:
        yield
    except InputError as error:
        error.message = f"{what}: {error.message}"
        raise


def model_inputs(option: str, reference: str) -> dict[str, str]:
    """The files a ``module:attribute`` model reference runs when imported, found without
    importing them (an output must not replace them), for
    :func:`~tidgap.outputs.files.check_outputs`' ``inputs``: the module's file as
    ``option``, and for a dotted module each package's ``__init__.py`` on the way as
    ``OPTION package NAME`` (the current folder first, as ``build_model`` imports it);
    none for the built-in models, and none past a part not found."""
    module_name, colon, _ = reference.partition(":")
    parts = module_name.split(".")
    if not colon or not all(part.isidentifier() for part in parts):
        return {}
    found: dict[str, str] = {}
    locations = [os.getcwd(), *sys.path]
    for end in range(1, len(parts) + 1):
        name = ".".join(parts[:end])
        try:
            spec = PathFinder.find_spec(name, locations)
        except (ImportError, ValueError, OSError):
            break
        if spec is None:
            break
        if spec.has_location and spec.origin is not None:
            found[option if name == module_name else f"{option} package {name}"] = spec.origin
        locations = list(spec.submodule_search_locations or [])
    return found
