"""The one writer of every file tidgap writes (plans, problems, pictures, CSV, traces).

Readers never see half a file and nothing already at the path is harmed
(``docs/outputs.md``, Writing files): a regular file is replaced atomically, keeping its
mode and owner; a symlink is written through to the file it names; a file with several
hard links, a device or a FIFO is written in place once the content is complete.
:func:`probe` finds, before any long work, a path that cannot be written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tidgap.held_signals import signals_deferred
from tidgap.model.errors import InputError

#: One file, for :func:`identity`: (device, inode) of an existing regular file, or the
#: resolved path of one not made yet.
Identity = tuple[int, int] | str


@dataclass(frozen=True)
class Destination:
    """How a path is written: ``target`` is replaced by a file made beside it, or, with
    ``in_place``, opened and written over; ``status`` is what is there now (``None``: nothing).
    """

    target: Path
    status: os.stat_result | None
    in_place: bool


def destination(path: str | os.PathLike[str]) -> Destination:
    """Where and how :func:`replace_atomically` writes ``path``.

    A device, FIFO or file with several hard links is written in place at ``path`` (the
    ``/dev/stdout`` kind of link is followed by the kernel); anything else is replaced at
    the end of its symlinks. Raises :class:`OSError` (a symlink loop, say).
    """
    try:
        status: os.stat_result | None = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        status = None
    _require_folder(path)  # ``nope/../x``, ``file/.``: no such path, though realpath has one
    if status is not None and (not stat.S_ISREG(status.st_mode) or status.st_nlink > 1):
        return Destination(Path(path), status, in_place=True)
    return Destination(Path(os.path.realpath(path)), status, in_place=False)


def _folder_as_given(path: str | os.PathLike[str]) -> str:
    """The folder part of ``path`` as written (``nope/..`` for ``nope/../x``, ``file`` for
    ``file/.``), which the kernel resolves step by step: a missing ``nope`` or a file in
    the middle fails there, while ``os.path.realpath`` drops ``nope/..`` and ``/.`` as
    text."""
    return os.path.dirname(os.fspath(path)) or os.curdir


def _require_folder(path: str | os.PathLike[str]) -> None:
    """Raise :class:`OSError` unless ``path``'s folder as written is a folder."""
    folder = _folder_as_given(path)
    if not stat.S_ISDIR(os.stat(folder).st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), folder)


def identity(path: str | os.PathLike[str]) -> Identity | None:
    """What makes two paths one file, or ``None`` for a stream (device, FIFO, socket), a
    folder or a path in no folder (``nope/../x``: :func:`probe` refuses it): writing a
    stream overwrites nothing. Through symlinks and hard links."""
    try:
        status = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        try:
            _require_folder(path)
        except OSError:
            return None
        return os.path.realpath(path)
    except OSError:
        return None
    return _regular_file(status)


def stream_identity(descriptor: int) -> Identity | None:
    """:func:`identity` of what the open ``descriptor`` writes to (a regular file that
    standard output was redirected to), ``None`` for a stream, a closed descriptor or
    anything else."""
    try:
        return _regular_file(os.fstat(descriptor))
    except OSError:
        return None


def _regular_file(status: os.stat_result) -> Identity | None:
    """The identity of the file ``status`` describes, ``None`` unless a regular file."""
    return (status.st_dev, status.st_ino) if stat.S_ISREG(status.st_mode) else None


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def _open_for_writing(path: Path, flags: int = 0) -> int:
    """A descriptor open for writing on ``path``, never truncated, never a controlling tty."""
    return os.open(path, os.O_WRONLY | os.O_NOCTTY | flags)


def probe(path: str | os.PathLike[str]) -> None:
    """Raise :class:`InputError` (naming ``path``) unless :func:`replace_atomically` can
    write it: really tried, since ``os.access`` says yes to root on read-only mounts.

    A path written in place is opened for writing (not truncated), but a FIFO, whose
    reader waiting already would take the open and close for the end of its stream, is
    only checked for permission; for one replaced, a file is made and removed in its folder.
    """
    shown = str(path)
    if shown.endswith(os.sep):
        raise InputError("names a folder (ends in /), not a file", source=shown)
    try:
        where = destination(path)
    except FileNotFoundError:  # only its folder's (:func:`_require_folder`)
        folder = _folder_as_given(path)
        raise InputError(f"folder {folder!r} does not exist", source=shown) from None
    except NotADirectoryError:
        raise InputError(f"{_folder_as_given(path)!r} is not a folder", source=shown) from None
    except OSError as error:
        raise InputError(f"cannot write: {_reason(error)}", source=shown) from None
    if where.status is not None and stat.S_ISDIR(where.status.st_mode):
        raise InputError("is a directory", source=shown)
    if where.status is not None and where.in_place:
        if stat.S_ISFIFO(where.status.st_mode):
            if not os.access(where.target, os.W_OK):
                raise InputError("cannot open for writing: Permission denied", source=shown)
            return
        try:
            os.close(_open_for_writing(where.target, os.O_NONBLOCK))
        except OSError as error:
            message = f"cannot open for writing: {_reason(error)}"
            raise InputError(message, source=shown) from None
        return
    folder = where.target.parent
    if not folder.exists():
        raise InputError(f"folder {str(folder)!r} does not exist", source=shown)
    if not folder.is_dir():
        raise InputError(f"{str(folder)!r} is not a folder", source=shown)
    try:
        with signals_deferred():  # a Ctrl-C between the two would leave the file
            made = _temporary_beside(where.target, Path(path).suffix, set())
            os.unlink(made)
            _PENDING.discard(made)
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:  # the temporary name is 10 characters longer
            message = f"name too long to write: {_reason(error)} for its temporary file"
        else:
            message = f"folder {str(folder)!r} is not writable: {_reason(error)}"
        raise InputError(message, source=shown) from None
    if where.status is not None:
        _require_replaceable(where.target, where.status, shown)


def _require_replaceable(target: Path, status: os.stat_result, shown: str) -> None:
    """Raise :class:`InputError` where renaming a file onto the existing ``target`` would
    fail: it is immutable or append-only (opening it for writing fails with ``EPERM``; a
    file without write permission fails with ``EACCES`` and is still replaced), or it is
    another user's in a folder with the sticky bit (``/tmp``) that is not this user's."""
    try:
        os.close(_open_for_writing(target, os.O_NONBLOCK))
    except OSError as error:
        if error.errno == errno.EPERM:
            raise InputError(f"cannot replace: {_reason(error)}", source=shown) from None
    folder = target.parent.stat()
    user = os.geteuid()
    if folder.st_mode & stat.S_ISVTX and user not in (0, folder.st_uid, status.st_uid):
        message = "cannot replace another user's file in a folder with the sticky bit"
        raise InputError(message, source=shown)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _settle(temporary: Path, status: os.stat_result | None) -> None:
    """Flush ``temporary`` to disk and give it the owner and mode of the file it replaces
    (owner only where permitted), or a new file's ``0o666`` less the umask."""
    descriptor = os.open(temporary, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    if status is None:
        temporary.chmod(0o666 & ~_umask())
        return
    made = temporary.stat()
    if (made.st_uid, made.st_gid) != (status.st_uid, status.st_gid):
        try:
            os.chown(temporary, status.st_uid, status.st_gid)
        except PermissionError:
            with contextlib.suppress(PermissionError):
                os.chown(temporary, -1, status.st_gid)
    temporary.chmod(stat.S_IMODE(status.st_mode))  # after chown, which may clear set-id bits


def _sync_folder(folder: Path) -> None:
    """Flush the rename in ``folder`` to disk where the system allows it."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


#: How many FIFOs are being written (:func:`awaiting_stream`), by any thread.
_FIFO_WRITES = [0]
_FIFO_WRITES_LOCK = threading.Lock()


def awaiting_stream() -> bool:
    """Whether a FIFO is being written in place: opening or writing it may wait on its
    reader for good, so a stop signal's handler ends the process at once
    (:class:`tidgap.optimize.interrupts.StopSignals`; a search's outputs are written once its
    work is done, and a checkpoint written to a FIFO holds the search until read)."""
    return _FIFO_WRITES[0] > 0


@contextlib.contextmanager
def _writing_fifo(fifo: bool) -> Iterator[None]:
    """Within it, :func:`awaiting_stream` is true if ``fifo``."""
    with _FIFO_WRITES_LOCK:
        _FIFO_WRITES[0] += fifo
    try:
        yield
    finally:
        with _FIFO_WRITES_LOCK:
            _FIFO_WRITES[0] -= fifo


def _write_in_place(content: Path, where: Destination) -> None:
    """Copy the finished ``content`` over ``where.target`` without replacing it.

    A regular file gets its space reserved first (a full disk fails before a byte
    changes), is cut to the new size after and flushed; a device or FIFO is just written.
    """
    assert where.status is not None
    regular = stat.S_ISREG(where.status.st_mode)
    size = content.stat().st_size
    fifo = stat.S_ISFIFO(where.status.st_mode)
    with _writing_fifo(fifo), os.fdopen(_open_for_writing(where.target), "wb") as writer:
        if regular and size and hasattr(os, "posix_fallocate"):
            try:
                os.posix_fallocate(writer.fileno(), 0, size)
            except OSError as error:
                if error.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise
        with content.open("rb") as reader:
            shutil.copyfileobj(reader, writer)
        writer.flush()
        if regular:
            os.ftruncate(writer.fileno(), size)
            os.fsync(writer.fileno())


#: Makes one file's content at the temporary path it is given.
Producer = Callable[[Path], None]


@dataclass(frozen=True)
class _Staged:
    """One file made and not yet put in place: ``content`` is beside ``where.target``
    (replaced by renaming) or in a private folder (copied in place)."""

    shown: str
    where: Destination
    content: Path


#: The temporary files and folders of the writes in progress (:func:`abandon_writes`).
_PENDING: set[Path] = set()


def abandon_writes() -> None:
    """Remove the temporary files and folders of the writes in progress, which keep their
    targets as they were: for a process about to end at once (a second signal), where
    :func:`write_together` cannot clean up after itself."""
    for path in list(_PENDING):
        with contextlib.suppress(OSError):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)


@contextlib.contextmanager
def abandoned_at_once(path: Path) -> Iterator[None]:
    """``path``, a temporary file or folder the block works in, removed by
    :func:`abandon_writes` if the process is made to end at once in the block (a second
    signal, a watchdog's timeout), where the block's own cleanup cannot run."""
    _PENDING.add(path)
    try:
        yield
    finally:
        _PENDING.discard(path)


def _temporary_beside(target: Path, suffix: str, made: set[Path]) -> Path:
    """A new empty file beside ``target``, ``.STEM.XXXXXXXX`` + ``suffix``: where a file
    replacing ``target`` is made before the rename (:func:`probe` tries the same name);
    pending (and in ``made``, the caller's) until the write removes or renames it."""
    with signals_deferred():  # made and recorded as one, for the cleanup
        descriptor, name = tempfile.mkstemp(
            prefix=f".{target.stem}.", suffix=suffix, dir=target.parent
        )
        os.close(descriptor)
        _PENDING.add(Path(name))
        made.add(Path(name))
    return Path(name)


def _stage(
    path: str | os.PathLike[str], produce: Producer, folder: Path, made: set[Path]
) -> _Staged:
    """Make ``path``'s content with ``produce``: in ``folder`` for a file written in place,
    else beside the target (same file system, so the rename is atomic; recorded in
    ``made``)."""
    where = destination(path)
    suffix = Path(path).suffix
    if where.in_place:
        content = Path(tempfile.mkdtemp(dir=folder)) / f"content{suffix}"
    else:
        content = _temporary_beside(where.target, suffix, made)
    try:
        produce(content)
        if not where.in_place:
            _settle(content, where.status)
    except BaseException:
        content.unlink(missing_ok=True)
        _PENDING.discard(content)
        raise
    return _Staged(str(path), where, content)


def _put_in_place(staged: _Staged) -> None:
    if staged.where.in_place:
        _write_in_place(staged.content, staged.where)
        return
    os.replace(staged.content, staged.where.target)
    _sync_folder(staged.where.target.parent)


def write_together(files: list[tuple[str | os.PathLike[str], Producer]]) -> None:
    """Write several files as one: every file is made first (``produce(temporary)``, see
    the module), and only when all are made are they put in place, those written in place
    (devices, FIFOs, hard links: they can still fail) before the renames (which do not,
    on paths :func:`probe` passed: it refuses files a rename cannot replace).

    So a failure while making any file leaves every path as it was, and the temporary
    files are removed. An :class:`OSError` becomes an :class:`InputError` naming the path;
    anything else ``produce`` raises passes through.
    """
    staged: list[_Staged] = []
    shown = ""
    made: set[Path] = set()  # this write's files beside their targets (other threads write too)
    with tempfile.TemporaryDirectory(prefix="tidgap-") as folder:
        _PENDING.add(Path(folder))
        try:
            for path, produce in files:
                shown = str(path)
                staged.append(_stage(path, produce, Path(folder), made))
            for item in [item for item in staged if item.where.in_place]:
                shown = item.shown
                _put_in_place(item)  # may block (a FIFO): not with signals held
            with signals_deferred():  # the renames: all of them, or (failing) the first ones
                for item in [item for item in staged if not item.where.in_place]:
                    shown = item.shown
                    _put_in_place(item)
        except OSError as error:
            raise InputError(f"cannot write: {_reason(error)}", source=shown) from None
        finally:  # every temporary file of this write (a signal may have cut one's making)
            with signals_deferred():  # a second signal: once they are gone
                for temporary in made:
                    temporary.unlink(missing_ok=True)
                    _PENDING.discard(temporary)
                _PENDING.discard(Path(folder))


def replace_atomically(path: str | os.PathLike[str], produce: Producer) -> None:
    """Write one file with :func:`write_together`: ``path`` keeps its old content on any
    failure (in place, only a failure while copying the finished file can leave part of
    it)."""
    write_together([(path, produce)])


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    replace_atomically(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))
