"""Write an output file so that readers never see half of it (pictures, CSV, traces)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def replace_atomically(path: str | os.PathLike[str], produce: Callable[[Path], None]) -> None:
    """Call ``produce(temporary)`` on a new file beside ``path``, then move it onto ``path``.

    The temporary file keeps ``path``'s suffix (so writers that infer the format from it
    work) and gets the permissions a new file would (``0o666`` less the umask); on any
    failure ``path`` keeps its old content and the temporary file is removed.
    """
    target = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    temporary = Path(name)
    try:
        produce(temporary)
        umask = os.umask(0)
        os.umask(umask)
        temporary.chmod(0o666 & ~umask)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    replace_atomically(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))
