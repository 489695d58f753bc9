"""Where Numba caches this package's compiled loops: a folder per version of tidgap's sources.

Numba's own cache (``njit(cache=True)``) sits beside each source file (or in ``~/.cache/numba``)
and counts as stale only when that one file changes, not when a function or constant it
uses from another module does: after an upgrade or an edit of such a module, the old
machine code ran on, with no word. Every module of this package that compiles a loop
imports :data:`CACHING` from here, which gives those loops a locator of their own first:
the folder ``BASE/tidgap/numba-DIGEST``, ``DIGEST`` a hash of every Python source of
tidgap (this package included), so an upgrade or an edit compiles afresh and two versions
never share compiled code. ``BASE`` is the first writable of ``NUMBA_CACHE_DIR``,
``XDG_CACHE_HOME`` (default ``~/.cache``) and the temporary folder. Where none is
writable, :data:`CACHING` is ``False``: the loops compile in every process, and nothing is
written beside the installed package (which ``pip uninstall`` would leave behind).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from numba.core import caching, config

import tidgap

#: This package's folder (``tidgap/fallback_cpu`` when installed).
HERE = Path(__file__).resolve().parent


#: The folders whose Python sources the compiled loops may use: tidgap's and, where it is
#: not inside it (a checkout), this package's.
PACKAGE = Path(tidgap.__file__).resolve().parent
ROOTS = (PACKAGE,) if PACKAGE in HERE.parents else (PACKAGE, HERE)


def sources_digest(roots: tuple[Path, ...] = ROOTS) -> str:
    """A hex digest of every ``.py`` file under ``roots`` (their paths relative to their
    root, named after it, and their bytes), in path order."""
    digest = hashlib.sha256()
    files: dict[str, Path] = {}
    for root in roots:
        for path in root.rglob("*.py"):
            files[f"{root.name}/{path.relative_to(root).as_posix()}"] = path
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def _writable(folder: Path) -> bool:
    """Whether ``folder`` exists or could be made, and takes a file."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError:
        return False
    return True


def _own_temporary_folder() -> str | None:
    """``TMP/tidgap-UID``, made private to this user; ``None`` where another user owns it
    or may write into it (compiled code is loaded from it)."""
    if not hasattr(os, "getuid"):
        return None
    folder = os.path.join(tempfile.gettempdir(), f"tidgap-{os.getuid()}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        status = os.lstat(folder)
    except OSError:
        return None
    private = status.st_uid == os.getuid() and not status.st_mode & 0o022
    return folder if private and os.path.isdir(folder) else None


def cache_folder(digest: str) -> Path | None:
    """The first writable of the candidate folders for ``digest``; ``None`` where none is."""
    given = os.environ.get("XDG_CACHE_HOME", "")  # relative: ignored, as the XDG spec says
    home = given if os.path.isabs(given) else os.path.join(os.path.expanduser("~"), ".cache")
    numba_dir = os.path.abspath(config.CACHE_DIR) if config.CACHE_DIR else ""  # as Numba
    for base in (lambda: numba_dir, lambda: home, _own_temporary_folder):
        folder = base()  # the temporary one made only where the others fail
        if folder and os.path.isabs(folder):
            candidate = Path(folder, "tidgap", f"numba-{digest}")
            if _writable(candidate):
                return candidate
    return None


#: Numba's private locator API this module extends (present from 0.59 to 0.68 at least);
#: without it the loops keep Numba's own cache.
LOCATOR_API = getattr(caching, "_CacheLocator", None) is not None and isinstance(
    getattr(getattr(caching, "CacheImpl", None), "_locator_classes", None), list
)
DIGEST = sources_digest()
FOLDER = cache_folder(DIGEST) if LOCATOR_API else None
#: Whether the loops are cached (``cache=`` of every ``njit`` of this package).
CACHING = FOLDER is not None or not LOCATOR_API


class SourcesLocator(getattr(caching, "_CacheLocator", object)):  # type: ignore[misc]
    """Numba's cache locator for the loops of this package: :data:`FOLDER`, stale when
    :data:`DIGEST` changes."""

    def __init__(self, py_func: Any) -> None:
        self._lineno = py_func.__code__.co_firstlineno

    def get_cache_path(self) -> str:
        return str(FOLDER)

    def get_source_stamp(self) -> str:
        return DIGEST

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> SourcesLocator | None:
        """A locator for a function defined in this package; ``None`` for any other."""
        if FOLDER is None or Path(py_file).resolve().parent != HERE:
            return None
        return cls(py_func)


if LOCATOR_API and SourcesLocator not in caching.CacheImpl._locator_classes:
    caching.CacheImpl._locator_classes.insert(0, SourcesLocator)
