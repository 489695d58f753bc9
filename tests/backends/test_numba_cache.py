"""Where the Numba loops are cached (:mod:`tidgap.fallback_cpu.numba_cache`): outside the
installed package, in a folder per version of tidgap's sources, stale when any of them
changes (not only the loop's own file), and no crash where nothing is writable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

numba = pytest.importorskip("numba")

from numba.core import config  # noqa: E402

from tidgap.fallback_cpu import numba_cache, rows  # noqa: E402


def _tree(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_the_digest_changes_with_any_source_and_only_with_sources(tmp_path: Path) -> None:
    """A constant changed in another module than the loop's (an upgrade, an edit) makes a
    new digest, so the loops compile afresh; compiled files and other files do not."""
    package = _tree(tmp_path / "tidgap", {"optimize/genome.py": "GENE = 1\n", "a.py": ""})
    loops = _tree(tmp_path / "fallback_cpu", {"rows.py": "def f(): pass\n"})
    before = numba_cache.sources_digest((package, loops))
    (package / "optimize/__pycache__").mkdir()
    (package / "optimize/__pycache__/genome.cpython-311.pyc").write_bytes(b"\0")
    (loops / "notes.txt").write_text("x", encoding="utf-8")
    assert numba_cache.sources_digest((package, loops)) == before
    (package / "optimize/genome.py").write_text("GENE = 2\n", encoding="utf-8")
    changed = numba_cache.sources_digest((package, loops))
    assert changed != before
    (package / "optimize/genome.py").rename(package / "optimize/genes.py")  # same bytes
    assert numba_cache.sources_digest((package, loops)) not in (before, changed)


def test_the_loops_cache_in_the_digests_folder_and_other_code_does_not() -> None:
    """This package's loops get the digest's folder and stamp; a function of another file
    keeps Numba's own locators."""
    locator = rows.copy_row._cache._impl.locator
    assert isinstance(locator, numba_cache.SourcesLocator)
    assert locator.get_cache_path() == str(numba_cache.FOLDER)
    assert locator.get_source_stamp() == numba_cache.DIGEST
    assert numba_cache.FOLDER.name == f"numba-{numba_cache.DIGEST}"
    assert numba_cache.HERE not in numba_cache.FOLDER.parents  # not beside the package
    assert numba_cache.SourcesLocator.from_function(_elsewhere, __file__) is None


def _elsewhere() -> None:
    """A function outside the package."""


def test_no_writable_folder_means_no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    unwritable = "/proc/no-such-folder"
    monkeypatch.setattr(config, "CACHE_DIR", unwritable)
    monkeypatch.setenv("XDG_CACHE_HOME", unwritable)
    monkeypatch.setattr(tempfile, "tempdir", unwritable)
    assert numba_cache.cache_folder("abc") is None


def test_the_temporary_folder_is_taken_only_when_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiled code is loaded from the folder: one that others may write into is not
    used."""
    monkeypatch.setattr(config, "CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/no-such-folder")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    found = numba_cache.cache_folder("abc")
    own = tmp_path / f"tidgap-{os.getuid()}"
    assert found == own / "tidgap" / "numba-abc"
    own.chmod(0o777)
    assert numba_cache.cache_folder("abc") is None


def test_commands_run_with_an_unwritable_home(tmp_path: Path) -> None:
    """HOME unwritable and no NUMBA_CACHE_DIR (an installed package is read-only too):
    the loops cache in the temporary folder and the command works."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env |= {"HOME": "/proc/no-such-folder", "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "tidgap", "compare", "example:tiny-2", "--json"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"][0]["iteration_time"] > 0
    folder = tmp_path / f"tidgap-{os.getuid()}" / "tidgap" / f"numba-{numba_cache.DIGEST}"
    assert any(folder.glob("rows.copy_row-*.nbi")), sorted(os.listdir(folder.parent))


def test_relative_places_are_as_numba_and_the_xdg_spec_read_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative NUMBA_CACHE_DIR is taken from the current folder, as Numba takes it; a
    relative XDG_CACHE_HOME is ignored (the XDG spec), so ~/.cache is used."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config, "CACHE_DIR", "numba-here")
    assert numba_cache.cache_folder("abc") == tmp_path / "numba-here" / "tidgap" / "numba-abc"
    monkeypatch.setattr(config, "CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".cache" / "tidgap" / "numba-abc"
    assert numba_cache.cache_folder("abc") == expected
