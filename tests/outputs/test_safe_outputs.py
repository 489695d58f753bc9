"""Outputs are written safely (``docs/outputs.md``, Writing files): devices and FIFOs in
place, symlinks through, hard links, mode and owner kept; an output that is an input, or
another output, and a path that cannot be written are refused before any work.

Device nodes are private ones made in a temporary folder (``mknod``, as root); the
system's ``/dev`` is never touched.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

import tidgap.cli.export
import tidgap.cli.search
from tests.support.cli_helpers import (
    case_named,
    crashed,
    describe,
    plan_document,
    run_cli,
    write_json,
)
from tidgap.model.errors import InputError
from tidgap.outputs.atomic import probe, replace_atomically, write_together

CASE = "tiny7_1"  # two stages: every command here runs in well under a second
QUICK_SEARCH = ("--generations", "1", "--population", "8", "--seed", "3")
NULL, FULL = os.makedev(1, 3), os.makedev(1, 7)  # what /dev/null and /dev/full are
PIPE_BYTES = 1 << 20  # a FIFO's buffer in the tests: far more than any file written here


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    """A golden problem and plan 0 of it, as files in ``tmp_path``."""
    case = case_named(CASE)
    problem = write_json(tmp_path / "problem.json", case["problem"])
    return problem, write_json(tmp_path / "plan.json", plan_document(case))


@pytest.fixture
def no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any search fail loudly: the commands must refuse before they start one."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the search ran")

    monkeypatch.setattr(tidgap.cli.search, "search", refuse)
    monkeypatch.setattr(tidgap.cli.export, "search", refuse)


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    """Set the process umask for one test."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


def device(path: Path, number: int) -> Path:
    """A private character device node ``number`` at ``path``; skip where mknod is refused."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, number)
    except PermissionError:
        pytest.skip("mknod is not permitted here (not root); the FIFO tests cover streams")
    return path


def error_line(result: Result) -> str:
    """The one ``tidgap: error:`` line of a command that exited 2 without output."""
    assert not crashed(result), describe(result)
    assert result.exit_code == 2, describe(result)
    assert result.stdout == "", describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tidgap: error: "), describe(result)
    return lines[0]


EXPORT = ("export", "PROBLEM", "PLAN", "--to")
#: One command line per way of writing a file; the words PROBLEM, PLAN and OUT stand for files.
COMMANDS = {
    "search --out": ("search", "PROBLEM", *QUICK_SEARCH, "--out", "OUT"),
    "search --trace": ("search", "PROBLEM", *QUICK_SEARCH, "--trace", "OUT"),
    "evaluate --trace": ("evaluate", "PROBLEM", "PLAN", "--trace", "OUT"),
    "export --out": (*EXPORT, "json-schedule", "--out", "OUT"),
    "synth --out": ("synth", "--stages", "2", "--out", "OUT"),
}


def run_filled(words: tuple[str, ...], inputs: tuple[Path, Path], out: str | Path) -> Result:
    """Run the command line ``words`` with PROBLEM, PLAN and OUT replaced by the files."""
    files = {"PROBLEM": str(inputs[0]), "PLAN": str(inputs[1]), "OUT": str(out)}
    return run_cli(*(files.get(word, word) for word in words))


def others(folder: Path, *keep: Path) -> list[str]:
    """Names in ``folder`` besides ``keep``: a temporary file left behind shows here."""
    return sorted(p.name for p in folder.iterdir() if p not in keep)


# --- streams: written in place, never replaced ----------------------------------------------------


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_device_stays_a_device(tmp_path: Path, inputs: tuple[Path, Path], name: str) -> None:
    """``--out /dev/null`` (here a private node like it) is written, not replaced by a file."""
    node = device(tmp_path / "null", NULL)
    before = set(tmp_path.iterdir())
    result = run_filled(COMMANDS[name], inputs, node)
    assert result.exit_code == 0, describe(result)
    assert stat.S_ISCHR(node.lstat().st_mode) and node.lstat().st_rdev == NULL
    assert set(tmp_path.iterdir()) == before


def test_a_full_device_is_one_line_and_stays_a_device(
    tmp_path: Path, inputs: tuple[Path, Path]
) -> None:
    """Like ``/dev/full``: the write fails (disk full), one line, exit 2, node untouched."""
    node = device(tmp_path / "full", FULL)
    line = error_line(run_filled(COMMANDS["synth --out"], inputs, node))
    assert line == f"tidgap: error: {node}: cannot write: No space left on device"
    assert stat.S_ISCHR(node.lstat().st_mode) and node.lstat().st_rdev == FULL


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_standard_output_on_a_full_disk_is_one_line(tmp_path: Path) -> None:
    """``tidgap ... > /dev/full``: one line and exit 1, not a traceback; a plan written
    to ``--out`` before the summary stays whole."""
    out = tmp_path / "plan.json"
    args = ["search", "example:tiny-2", "--generations", "2", "-q", "--out", str(out)]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "tidgap", *args], stdout=full, stderr=subprocess.PIPE,
            text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == "tidgap: error: cannot write: No space left on device\n"
    assert json.loads(out.read_text(encoding="utf-8"))["format"] == "tidgap.plan/1"


def _tidgap(*args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    """``python -m tidgap ARGS`` in a process of its own (``options``: ``subprocess.run``'s)."""
    return subprocess.run(
        [sys.executable, "-m", "tidgap", *args], text=True, timeout=120,
        **{"capture_output": True, **options},
    )  # fmt: skip


def test_a_closed_standard_output_is_one_line(tmp_path: Path) -> None:
    """``tidgap ... >&-``: one line and exit 1 (it printed nothing and exited 0); the plan
    written to ``--out`` before the summary stays whole."""
    out = tmp_path / "plan.json"
    args = ["search", "example:tiny-2", "--generations", "2", "-q", "--out", str(out)]
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" -m tidgap "$@" >&-', sys.executable, *args],
        stderr=subprocess.PIPE, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr == "tidgap: error: cannot write: standard output is closed\n"
    assert json.loads(out.read_text(encoding="utf-8"))["format"] == "tidgap.plan/1"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_standard_error_that_cannot_be_written_changes_no_exit_status(tmp_path: Path) -> None:
    """``2>/dev/full``: a warning failed the command (exit 1, its output lost), and bad
    input exited 1, not 2."""
    problem = write_json(tmp_path / "problem.json", case_named(CASE)["problem"])
    plan = write_json(tmp_path / "plan.json", {**plan_document(case_named(CASE)), "problem": "x"})
    with open("/dev/full", "w") as full:
        warned = _tidgap("evaluate", str(problem), str(plan), stderr=full, capture_output=False,
                         stdout=subprocess.PIPE)  # fmt: skip
        refused = _tidgap("evaluate", str(tmp_path / "none.json"), str(plan), stderr=full,
                          capture_output=False, stdout=subprocess.PIPE)  # fmt: skip
    assert warned.returncode == 0 and "iteration" in warned.stdout
    assert refused.returncode == 2 and refused.stdout == ""


def test_a_removed_current_folder_is_one_line(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    code = f"import os, runpy, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); "
    done = subprocess.run(
        [sys.executable, "-c", code + "sys.argv = ['tidgap', 'examples']; "
         "runpy.run_module('tidgap', run_name='__main__')"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "tidgap: error: the current folder no longer exists (it was removed): change to another\n"
    )


@pytest.mark.parametrize("threads", ["0", "-1", "abc", "²"])  # "²".isdigit(), not int()
def test_numba_threads_that_are_no_count_are_one_line(threads: str) -> None:
    """``NUMBA_NUM_THREADS=0`` made every search a traceback (Numba's ValueError)."""
    done = _tidgap("search", "example:tiny-2", "--generations", "1", env={
        **os.environ, "NUMBA_NUM_THREADS": threads})  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "tidgap: error: NUMBA_NUM_THREADS: must be a positive integer, the compiled loops' "
        f"threads (got {threads!r})\n"
    )


def test_a_matplotlib_backend_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    """``MPLBACKEND=nonexistent`` with ``--gantt``: matplotlib's ValueError was a traceback."""
    pytest.importorskip("matplotlib")
    env = {**os.environ, "MPLBACKEND": "nonexistent"}
    picture = tmp_path / "plan.png"
    done = _tidgap("compare", "example:tiny-2", "--gantt", str(picture), env=env)
    assert done.returncode == 2 and not picture.exists()
    assert done.stderr == (
        "tidgap: error: MPLBACKEND: 'nonexistent' is not a matplotlib backend (unset it: "
        "tidgap draws without one)\n"
    )


@pytest.mark.parametrize("threads", ["+2", " 1 ", ""])
def test_numba_threads_numba_takes_are_taken(threads: str) -> None:
    """``+2`` is 2 to Numba, and an empty value its default: neither is refused."""
    done = _tidgap("examples", env={**os.environ, "NUMBA_NUM_THREADS": threads})
    assert done.returncode == 0 and done.stderr == ""


def test_a_name_the_output_encoding_lacks_is_escaped(tmp_path: Path) -> None:
    """``PYTHONIOENCODING=latin-1`` and a problem named with an emoji: a traceback on the
    summary line; now the character is escaped."""
    document = case_named(CASE)["problem"]
    problem = write_json(tmp_path / "problem.json", {**document, "name": "réseau 🚀"})
    env = {**os.environ, "PYTHONIOENCODING": "latin-1"}
    done = _tidgap(
        "evaluate", str(problem), "--schedule", "gpipe", "-m", "1", env=env, encoding="latin-1"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("réseau \\U0001f680: ")


def test_a_broken_pipe_with_standard_error_closed_exits_1() -> None:
    """``tidgap ... 2>&- | true``: exit 1 as with standard error open (it was 120:
    Python's flush at exit failed on the closed standard error)."""
    reader = subprocess.Popen(
        ["sh", "-c", 'exec "$0" -m tidgap compare example:hetero-8 2>&-', sys.executable],
        stdout=subprocess.PIPE,
    )
    assert reader.stdout is not None
    reader.stdout.close()  # before the command starts writing (it takes half a second to start)
    assert reader.wait(timeout=120) == 1


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_fifo_gets_the_content(tmp_path: Path, inputs: tuple[Path, Path], name: str) -> None:
    """A FIFO (with a reader) receives the whole document and stays a FIFO."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    fcntl.fcntl(reader, fcntl.F_SETPIPE_SZ, PIPE_BYTES)  # holds all the command writes
    try:
        result = run_filled(COMMANDS[name], inputs, fifo)
        received = os.read(reader, PIPE_BYTES)
    finally:
        os.close(reader)
    assert result.exit_code == 0, describe(result)
    document = json.loads(received)
    assert isinstance(document, dict) and document
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_reader_waiting_on_a_fifo_gets_the_content(
    tmp_path: Path, inputs: tuple[Path, Path], name: str
) -> None:
    """A reader already blocked reading the FIFO (``cat pipe``) got an empty stream: the
    early check opened and closed the FIFO for writing, its end of file; then the command
    waited for good for another reader."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()  # waiting in open before the command starts (it takes a second to start)
    files = {"PROBLEM": str(inputs[0]), "PLAN": str(inputs[1]), "OUT": str(fifo)}
    words = [files.get(word, word) for word in COMMANDS[name]]
    done = subprocess.run(  # a subprocess: the old code waited for good
        [sys.executable, "-m", "tidgap", *words], capture_output=True, timeout=120
    )
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert received and json.loads(received[0])


def test_a_stop_signal_ends_a_command_waiting_on_a_fifo_without_a_reader(
    tmp_path: Path, inputs: tuple[Path, Path]
) -> None:
    """The search's work is done, so a first SIGTERM ends it (it held the command until a
    second one: the first only asked the search to stop)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    words = ("search", "PROBLEM", *QUICK_SEARCH, "--out", "OUT", "-q")
    files = {"PROBLEM": str(inputs[0]), "PLAN": str(inputs[1]), "OUT": str(fifo)}
    command = [sys.executable, "-m", "tidgap", *(files.get(word, word) for word in words)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wchan = Path(f"/proc/{process.pid}/wchan")
    deadline = time.monotonic() + 120
    while (
        wchan.read_text() not in ("wait_for_partner", "fifo_open") and time.monotonic() < deadline
    ):
        time.sleep(0.1)  # opening the FIFO, waiting for a reader
    process.send_signal(signal.SIGTERM)
    _, shown = process.communicate(timeout=30)
    assert process.returncode == 143, shown
    assert shown.decode().endswith("tidgap: terminated\n")
    assert others(tmp_path, fifo, *inputs) == []


def test_a_fifo_without_a_reader_passes_the_probe_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    probe(fifo)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


# --- a command's files are written together ----------------------------------------------------


def test_files_written_together_change_nothing_when_one_cannot_be_made(tmp_path: Path) -> None:
    """The first file is made, the second fails: neither path changes, nothing is left."""
    first, second = tmp_path / "plan.json", tmp_path / "picture.png"
    first.write_text("old plan", encoding="utf-8")

    def fail(temporary: Path) -> None:
        temporary.write_bytes(b"half")
        raise OSError(28, "No space left on device")

    files = [(first, lambda temporary: temporary.write_text("new", encoding="utf-8"))]
    with pytest.raises(InputError, match="picture.png: cannot write: No space left on device"):
        write_together([*files, (second, fail)])
    assert first.read_text(encoding="utf-8") == "old plan" and not second.exists()
    assert others(tmp_path, first) == []


def test_a_stream_that_fails_is_written_before_any_file_is_replaced(tmp_path: Path) -> None:
    """A full device is written first: its failure leaves the other file as it was."""
    node = device(tmp_path / "full", FULL)
    plan = tmp_path / "plan.json"
    plan.write_text("old plan", encoding="utf-8")
    new = [(plan, lambda t: t.write_text("new", encoding="utf-8"))]
    with pytest.raises(InputError, match="full: cannot write: No space left on device"):
        write_together([*new, (node, lambda t: t.write_text("trace", encoding="utf-8"))])
    assert plan.read_text(encoding="utf-8") == "old plan" and others(tmp_path, plan, node) == []


@pytest.mark.parametrize(
    ("words", "failing"),
    [
        (("search", "PROBLEM", *QUICK_SEARCH, "--out", "OUT", "--trace", "FULL"), "full"),
        ((*EXPORT, "pytorch-csv", "--out", "OUT"), "old.microbatches.json"),
    ],
    ids=["search --trace", "export's sidecar"],
)
def test_a_command_that_cannot_write_one_file_keeps_the_others(
    tmp_path: Path, inputs: tuple[Path, Path], words: tuple[str, ...], failing: str
) -> None:
    """One line naming the file that failed (a full device, or a symlink to one), exit 2,
    and the file already at ``--out`` keeps its content."""
    node = device(tmp_path / "full", FULL)
    if failing != node.name:
        (tmp_path / failing).symlink_to(node)
    old = tmp_path / "old.csv"
    old.write_text("kept", encoding="utf-8")
    filled = tuple(str(node) if word == "FULL" else word for word in words)
    line = error_line(run_filled(filled, inputs, old))
    assert line == f"tidgap: error: {tmp_path / failing}: cannot write: No space left on device"
    assert old.read_text(encoding="utf-8") == "kept"


def test_a_checkpoint_that_cannot_be_written_is_one_warning_and_the_plan_is_written(
    tmp_path: Path, inputs: tuple[Path, Path]
) -> None:
    """A full disk under the checkpoint ended the search (exit 2, the plan lost) until
    2026-12-07."""
    node, plan = device(tmp_path / "full", FULL), tmp_path / "searched.json"
    words = ("search", "PROBLEM", *QUICK_SEARCH, "--checkpoint", "OUT", "--out", str(plan))
    result = run_filled(words, inputs, node)
    assert result.exit_code == 0, describe(result)
    assert result.stderr == (
        f"tidgap: warning: checkpoint not saved: {node}: cannot write: No space left on "
        "device (the file keeps the last state saved; the search goes on)\n"
    )
    assert json.loads(plan.read_text())["format"] == "tidgap.plan/1"


# --- regular files: links, mode and owner kept ----------------------------------------------------


def synth_to(out: Path, seed: int = 0) -> dict[str, Any]:
    """Run ``tidgap synth --out OUT`` and return the problem it wrote."""
    result = run_cli("synth", "--stages", "2", "--seed", str(seed), "--out", str(out))
    assert result.exit_code == 0, describe(result)
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["name"] == f"synth-{seed}"
    return document


def test_a_symlink_stays_a_symlink(tmp_path: Path) -> None:
    """The link is followed: its target (in another folder) gets the content."""
    target = tmp_path / "real" / "problem.json"
    target.parent.mkdir()
    target.write_text("old", encoding="utf-8")
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "out.json"
    link.symlink_to(Path("..") / "real" / "problem.json")
    synth_to(link, seed=4)
    assert link.is_symlink() and os.readlink(link) == str(Path("..") / "real" / "problem.json")
    assert json.loads(target.read_text(encoding="utf-8"))["name"] == "synth-4"
    assert others(tmp_path / "real", target) == [] and others(tmp_path / "links", link) == []


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to("made.json")
    synth_to(link)
    assert link.is_symlink() and (tmp_path / "made.json").is_file()


def test_hard_links_survive(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text("old", encoding="utf-8")
    os.link(first, second)
    document = synth_to(first, seed=2)
    assert first.stat().st_ino == second.stat().st_ino and first.stat().st_nlink == 2
    assert json.loads(second.read_text(encoding="utf-8")) == document
    assert others(tmp_path, first, second) == []


def test_a_longer_old_file_is_cut_to_the_new_content(tmp_path: Path) -> None:
    """Written in place (a hard link), the file ends where the new content does."""
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text("x" * 100_000, encoding="utf-8")
    os.link(first, second)
    document = synth_to(first)
    assert json.loads(second.read_text(encoding="utf-8")) == document


def test_a_hard_linked_file_keeps_its_content_when_writing_fails(tmp_path: Path) -> None:
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    first.write_bytes(b"old")
    os.link(first, second)

    def fail(temporary: Path) -> None:
        assert temporary.suffix == ".png"
        temporary.write_bytes(b"half")
        raise RuntimeError("renderer failed")

    with pytest.raises(RuntimeError):
        replace_atomically(second, fail)
    assert first.read_bytes() == b"old" and first.stat().st_nlink == 2
    assert others(tmp_path, first, second) == []


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o604], ids=oct)
def test_the_mode_is_kept(tmp_path: Path, mode: int) -> None:
    out = tmp_path / "p.json"
    out.write_text("old", encoding="utf-8")
    out.chmod(mode)
    synth_to(out)
    assert stat.S_IMODE(out.stat().st_mode) == mode


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002], ids=oct)
def test_a_new_file_follows_the_umask(
    tmp_path: Path, umask: Callable[[int], None], mask: int
) -> None:
    out = tmp_path / "p.json"
    umask(mask)
    synth_to(out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask


def test_the_owner_is_kept(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    out = tmp_path / "p.json"
    out.write_text("old", encoding="utf-8")
    os.chown(out, 4321, 5432)
    synth_to(out)
    assert (out.stat().st_uid, out.stat().st_gid) == (4321, 5432)


def test_a_picture_goes_through_a_hard_link(tmp_path: Path, inputs: tuple[Path, Path]) -> None:
    """Writers that need a path with the suffix (matplotlib) work when written in place."""
    pytest.importorskip("matplotlib")
    picture, other = tmp_path / "plan.png", tmp_path / "other.png"
    picture.write_bytes(b"old")
    os.link(picture, other)
    problem, plan = inputs
    result = run_cli("evaluate", str(problem), str(plan), "--gantt", str(picture))
    assert result.exit_code == 0, describe(result)
    assert other.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


# --- an output that is an input, or another output ------------------------------------------------


def _same_file(kind: str, original: Path) -> Path:
    """A path naming ``original``: itself, a symlink to it or a hard link to it."""
    if kind == "itself":
        return original
    alias = original.with_name(f"{kind}-{original.name}")
    if kind == "symlink":
        alias.symlink_to(original.name)
    else:
        os.link(original, alias)
    return alias


@pytest.mark.parametrize("kind", ["itself", "symlink", "hardlink"])
@pytest.mark.parametrize(
    ("words", "option", "argument"),
    [
        (("search", "PROBLEM", "--out", "OUT"), "--out", "PROBLEM"),
        (("search", "PROBLEM", "--trace", "OUT"), "--trace", "PROBLEM"),
        ((*EXPORT, "json-schedule", "--out", "OUT"), "--out", "PLAN"),
        ((*EXPORT, "same-partition", "--out", "OUT"), "--out", "PROBLEM"),
        (("compare", "PROBLEM", "PLAN", "--trace", "OUT"), "--trace", "PLAN"),
        (("evaluate", "PROBLEM", "PLAN", "--trace", "OUT"), "--trace", "PROBLEM"),
    ],
    ids=["search-out", "search-trace", "export-plan", "export-problem", "compare", "evaluate"],
)
def test_an_input_is_never_overwritten(
    inputs: tuple[Path, Path],
    no_search: None,
    kind: str,
    words: tuple[str, ...],
    option: str,
    argument: str,
) -> None:
    original = inputs[0] if argument == "PROBLEM" else inputs[1]
    before = original.read_bytes()
    line = error_line(run_filled(words, inputs, _same_file(kind, original)))
    assert line == (
        f"tidgap: error: {option}: is the same file as {argument} {original}; "
        "refusing to overwrite an input"
    )
    assert original.read_bytes() == before


def test_the_export_sidecar_is_never_an_input(tmp_path: Path, inputs: tuple[Path, Path]) -> None:
    problem, plan = inputs
    sidecar = tmp_path / "schedule.microbatches.json"
    os.link(plan, sidecar)
    before = plan.read_bytes()
    out = tmp_path / "schedule.csv"
    line = error_line(
        run_cli("export", str(problem), str(sidecar), "--to", "pytorch-csv", "--out", str(out))
    )
    assert line.startswith(f"tidgap: error: --out's sidecar: is the same file as PLAN {sidecar};")
    assert plan.read_bytes() == before and not out.exists()


def test_two_outputs_are_never_one_file(tmp_path: Path, no_search: None) -> None:
    picture = tmp_path / "run.png"
    link = tmp_path / "trace.json"
    link.symlink_to(picture.name)
    args = ("search", "example:gpt1-14", "--gantt", str(picture), "--trace", str(link))
    line = error_line(run_cli(*args))
    assert line == (
        f"tidgap: error: --trace: is the same file as --gantt {picture}; "
        "give each output its own file"
    )
    assert not picture.exists()


def test_two_outputs_may_be_one_stream(tmp_path: Path, inputs: tuple[Path, Path]) -> None:
    """Writing a device twice overwrites nothing, so it is allowed."""
    node = device(tmp_path / "null", NULL)
    problem, plan = inputs
    args = ("search", str(problem), *QUICK_SEARCH, "--out", str(node), "--trace", str(node))
    result = run_cli(*args)
    assert result.exit_code == 0, describe(result)


def test_an_example_problem_is_not_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``example:NAME`` names a built-in problem, not the file of that name here."""
    monkeypatch.chdir(tmp_path)
    name = "example:gpt1-14"
    result = run_cli("search", name, *QUICK_SEARCH, "--out", name)
    assert result.exit_code == 0, describe(result)
    assert json.loads((tmp_path / name).read_text(encoding="utf-8"))["format"] == "tidgap.plan/1"


# --- unwritable paths, found before the search ----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (lambda tmp: "/proc/tidgap-cannot-be-made.json", "folder '/proc' is not writable"),
        (lambda tmp: f"{tmp}/plan.json/x.json", "is not a folder"),
        (lambda tmp: f"{tmp}/missing/x.json", "does not exist"),
        # the kernel finds no problem.json there; realpath's text would be the input
        (lambda tmp: f"{tmp}/missing/../problem.json", "/missing/..' does not exist"),
        (lambda tmp: f"{tmp}/plan.json/../x.json", "/plan.json/..' is not a folder"),
        (lambda tmp: f"{tmp}/problem.json/.", "/problem.json' is not a folder"),  # not the input
        (lambda tmp: f"{tmp}/new-folder/", "names a folder"),
        (lambda tmp: str(tmp), "is a directory"),
        # 250 characters: a file name, but not its temporary ".NAME.XXXXXXXX" one
        (lambda tmp: f"{tmp}/{'p' * 245}.json", "name too long to write"),
    ],
    ids=[
        "proc",
        "under-a-file",
        "missing-folder",
        "through-a-missing-folder",
        "through-a-file",
        "a-file-as-a-folder",
        "trailing-slash",
        "folder",
        "long-name",
    ],  # fmt: skip
)
@pytest.mark.parametrize("option", ["--out", "--trace"])
def test_an_unwritable_path_is_found_before_the_search(
    inputs: tuple[Path, Path],
    no_search: None,
    path: Callable[[Path], str],
    expected: str,
    option: str,
) -> None:
    folder = inputs[0].parent
    before = sorted(folder.iterdir())
    problem = inputs[0].read_bytes()
    out = path(folder)
    line = error_line(run_cli("search", str(inputs[0]), "--generations", "1000000000", option, out))
    assert expected in line and (f"error: {option}: " in line or f"'{option}'" in line), line
    assert sorted(folder.iterdir()) == before and inputs[0].read_bytes() == problem


def test_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    probe(tmp_path / "new.json")
    assert list(tmp_path.iterdir()) == []


def test_probe_refuses_a_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        probe(tmp_path)


def test_a_file_rename_cannot_replace_is_found_before_the_search(
    inputs: tuple[Path, Path], no_search: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An immutable or append-only file (chattr +i / +a: opening it for writing fails with
    EPERM, which needs root to set up, so stood in for here) is refused before any work,
    and the other outputs keep their content; a merely read-only file is still replaced."""
    import tidgap.outputs.atomic as atomic

    folder = inputs[0].parent
    locked, kept = folder / "locked.json", folder / "kept.json"
    for path in (locked, kept):
        path.write_text("old", encoding="utf-8")
    opening = atomic._open_for_writing

    def refusing(path: Path, flags: int = 0) -> int:
        if Path(path) == locked:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return opening(path, flags)

    monkeypatch.setattr(atomic, "_open_for_writing", refusing)
    words = ("search", str(inputs[0]), "--generations", "1000000000", "--out", str(kept))
    line = error_line(run_cli(*words, "--trace", str(locked)))
    assert line == f"tidgap: error: --trace: {locked}: cannot replace: Operation not permitted"
    assert kept.read_text(encoding="utf-8") == "old"
    locked.chmod(0o444)
    monkeypatch.setattr(atomic, "_open_for_writing", opening)
    probe(locked)


def test_another_users_file_in_a_sticky_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rename() may not replace another user's file in a folder with the sticky bit (as
    /tmp) that is not this user's: this user stood in for by another euid."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = shared / "plan.json"
    theirs.write_text("theirs", encoding="utf-8")
    probe(theirs)  # one's own file
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(theirs).st_uid + 1)
    with pytest.raises(InputError, match="another user's file in a folder with the sticky"):
        probe(theirs)
    probe(shared / "new.json")


def test_a_second_signal_while_writing_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A second signal ends the process at once (``os._exit``) in the middle of a write:
    the targets keep their old content and the write's temporary files and folder go
    (a whole plan under ``.p.XXXXXXXX.json`` and an empty picture were left)."""
    target, picture = tmp_path / "p.json", tmp_path / "p.png"
    target.write_text("old")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = (
        "import signal, sys\n"
        "from pathlib import Path\n"
        "from tidgap.optimize.interrupts import StopSignals\n"
        "from tidgap.outputs.atomic import write_together\n"
        "signals = StopSignals()\n"
        "signals.handle(signal.SIGINT, None)  # the first: recorded\n"
        "def second(path):\n"
        "    path.write_text('half')\n"
        "    signals.handle(signal.SIGTERM, None)  # a second: ends the process\n"
        f"new = lambda path: path.write_text('new')\n"
        f"write_together([({str(target)!r}, new), ({str(picture)!r}, second)])\n"
    )
    env = {**os.environ, "TMPDIR": str(scratch)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60)
    assert done.returncode == 143, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "tmp"]
    assert target.read_text() == "old" and list(scratch.iterdir()) == []


class _Stop(Exception):
    """What the test's signal handler raises."""


def _raising(signum: int, frame: Any) -> None:
    raise _Stop(signum)


def test_a_signal_during_the_renames_waits_until_every_file_is_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal handled between two renames (SIGTERM put the export's CSV in place and
    kept its old sidecar): its handler runs once every file is in place, and no
    temporary file is left."""
    import tidgap.outputs.atomic as atomic

    paths = [tmp_path / f"f{i}.json" for i in range(3)]
    for path in paths:
        path.write_text("old", encoding="utf-8")
    renamed: list[Path] = []
    replace = os.replace

    def replace_then_signal(source: Path, target: Path) -> None:
        replace(source, target)
        renamed.append(Path(target))
        if len(renamed) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # handled at once, were it not held

    monkeypatch.setattr(atomic.os, "replace", replace_then_signal)
    previous = signal.signal(signal.SIGTERM, _raising)
    try:
        with pytest.raises(_Stop):
            write_together([(p, lambda t: t.write_text("new", encoding="utf-8")) for p in paths])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [p.read_text(encoding="utf-8") for p in paths] == ["new"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in paths]


def test_a_signal_while_a_file_is_made_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C just after a temporary file was made, before its making is guarded: the old
    contents stay and every temporary file goes (synth --count left one now and then)."""
    import tidgap.outputs.atomic as atomic

    paths = [tmp_path / f"f{i}.json" for i in range(3)]
    for path in paths:
        path.write_text("old", encoding="utf-8")
    beside = atomic._temporary_beside

    def made_then_interrupted(target: Path, suffix: str, made: set[Path]) -> Path:
        temporary = beside(target, suffix, made)
        if target.name == "f1.json":
            raise KeyboardInterrupt
        return temporary

    monkeypatch.setattr(atomic, "_temporary_beside", made_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_together([(p, lambda t: t.write_text("new", encoding="utf-8")) for p in paths])
    assert [p.read_text(encoding="utf-8") for p in paths] == ["old"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in paths]
    assert not atomic._PENDING


def test_sigterm_to_a_command_without_its_own_handling_cleans_up(tmp_path: Path) -> None:
    """SIGTERM to synth (evaluate, compare, export, bench) while it writes: exit 143 with
    one line, the old files kept, no temporary file (the default action ended the process
    with them left beside the outputs)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "synth-0.json").write_text("old", encoding="utf-8")
    script = (
        "import os, signal, sys\n"
        "import tidgap.outputs.atomic as atomic\n"
        "from tidgap.cli import cli\n"
        "settle = atomic._settle\n"
        "def terminated(temporary, status):\n"
        "    settle(temporary, status)\n"
        "    if temporary.name.startswith('.synth-1.'):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "atomic._settle = terminated\n"
        f"cli(['synth', '--count', '3', '--stages', '2', '--out-dir', {str(out)!r}, '-q'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 143, done.stderr
    assert done.stderr.strip() == "tidgap: terminated"
    assert sorted(p.name for p in out.iterdir()) == ["synth-0.json"]
    assert (out / "synth-0.json").read_text(encoding="utf-8") == "old"


def test_a_second_signal_during_the_cleanup_waits_until_it_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first signal stops the write and its cleanup starts; a second one (raising in
    its handler) waits until every temporary file is gone (it cut the cleanup short:
    hundreds of files left by synth --count 2000)."""
    paths = [tmp_path / f"f{i}.json" for i in range(4)]

    def new(temporary: Path) -> None:
        temporary.write_text("new", encoding="utf-8")

    def first_signal(temporary: Path) -> None:
        raise KeyboardInterrupt

    unlink = Path.unlink

    def unlink_then_signal(self: Path, missing_ok: bool = False) -> None:
        unlink(self, missing_ok=missing_ok)
        os.kill(os.getpid(), signal.SIGTERM)  # the second signal, while cleaning up

    previous = signal.signal(signal.SIGTERM, _raising)
    try:
        with pytest.raises(_Stop):
            monkeypatch.setattr(Path, "unlink", unlink_then_signal)
            write_together([*((p, new) for p in paths[:3]), (paths[3], first_signal)])
    finally:
        monkeypatch.undo()
        signal.signal(signal.SIGTERM, previous)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_path_written_is_shown_escaped(
    tmp_path: Path, inputs: tuple[Path, Path], name: str
) -> None:
    """A name holding a newline printed ``trace written to fake`` and, on a line of its
    own, whatever followed (``tidgap: error: x.json``), with exit 0."""
    out = tmp_path / "fake\ntidgap: error: x.json"
    result = run_filled(COMMANDS[name], inputs, out)
    assert result.exit_code == 0, describe(result)
    assert "fake\\ntidgap: error: x.json" in result.stdout
    assert not any(line.startswith("tidgap: error") for line in result.stdout.splitlines())


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="no /dev/stdout")
def test_an_output_that_is_the_redirected_standard_output_is_refused(tmp_path: Path) -> None:
    """``--trace /dev/stdout`` with standard output redirected to a file: the trace replaced
    that file, and the report went to the file it unlinked (lost). Now one line, status 2,
    the file as it was; through a pipe (a stream) the trace still goes to it."""
    report = tmp_path / "report.txt"
    report.write_text("kept\n")
    command = [sys.executable, "-m", "tidgap", "compare", "example:tiny-2", "--trace"]
    with report.open("a") as stdout:
        done = subprocess.run(
            [*command, "/dev/stdout"], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert done.returncode == 2
    assert done.stderr == (
        "tidgap: error: --trace: is the same file as this command's standard output; "
        "name another file\n"
    )
    assert report.read_text() == "kept\n"
    piped = subprocess.run([*command, "/dev/stdout"], capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and '"traceEvents"' in piped.stdout, piped.stderr
