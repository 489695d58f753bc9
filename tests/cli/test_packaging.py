"""The package as users install it: wheel contents, lazy backends, console script."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """A wheel built from this checkout (offline, no dependencies)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    (path,) = out.glob("tidgap-*.whl")
    return zipfile.ZipFile(path)


@pytest.fixture(scope="module")
def wheel_names(wheel: zipfile.ZipFile) -> list[str]:
    """File names inside the wheel."""
    return wheel.namelist()


def test_wheel_puts_backends_inside_the_tidgap_namespace(wheel_names: list[str]) -> None:
    assert "tidgap/kernels/__init__.py" in wheel_names
    assert "tidgap/fallback_cpu/__init__.py" in wheel_names
    tops = {name.split("/")[0] for name in wheel_names}
    assert not tops & {"kernels", "fallback_cpu", "tests", "bench"}, tops


def test_wheel_ships_every_subpackage_and_kernel_source(wheel_names: list[str]) -> None:
    """Each folder of ``tidgap/`` with an ``__init__.py`` (``pyproject.toml`` lists them one by
    one) and every CUDA source is in the wheel: an installed tidgap imports all of itself."""
    packages = sorted(init.parent for init in (ROOT / "tidgap").rglob("__init__.py"))
    assert len(packages) >= 9
    for package in packages:
        assert f"{package.relative_to(ROOT).as_posix()}/__init__.py" in wheel_names, package
    for source in [*(ROOT / "kernels").glob("*.cu"), *(ROOT / "kernels").glob("*.cuh")]:
        assert f"tidgap/kernels/{source.name}" in wheel_names, source.name


def test_wheel_ships_the_builtin_examples(wheel_names: list[str]) -> None:
    from tidgap.model.examples import example_names

    shipped = {Path(n).stem for n in wheel_names if n.startswith("tidgap/data/examples/")}
    assert len(example_names()) >= 3
    assert set(example_names()) <= shipped


def test_wheel_declares_the_console_script(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "tidgap = tidgap.console:main" in wheel.read(entry_points).decode()


def test_import_tidgap_loads_neither_cupy_nor_numba() -> None:
    code = "import sys, tidgap; print(sorted(m for m in ('cupy', 'numba') if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_console_script_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tidgap", "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert "tidgap" in result.stdout


@pytest.mark.parametrize(
    "script", ["bench/gpu_check.sh", "bench/fetch_device_wheels.sh", ".ci/run"]
)
def test_shell_scripts_parse(script: str) -> None:
    """The scripts a GPU session or CI runs are at least valid bash here."""
    result = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_gpu_checks_parts_fit_its_budget() -> None:
    """Each part of bench/gpu_check.sh runs under ``limited N``; those that always run
    must fit the budget together (less the 5 s it keeps), or the last one, cut short or not
    run at all, fails a check that runs once on a lent GPU (they added up to 575 s of
    555)."""
    import re

    text = (ROOT / "bench/gpu_check.sh").read_text(encoding="utf-8")
    budget = int(re.search(r"BUDGET:-(\d+)", text).group(1))
    optional = re.compile(r"TIDGAP_BENCH|SEARCH_DEVICES")
    limits = [
        int(match.group(1))
        for line in text.splitlines()
        if not optional.search(line) and not line.lstrip().startswith("#")
        for match in re.finditer(r"\blimited (\d+) ", line)
    ]
    assert len(limits) == 5, limits
    assert sum(limits) <= budget - 5, limits


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("bench/quality_table.py", ["--backend", "foo"]),
        ("bench/quality_table.py", ["--time-limit", "-1"]),
        ("bench/fidelity.py", ["--repeats", "0"]),
        ("bench/fidelity.py", ["--search-seconds", "nan"]),
        ("bench/flush_tiny_optimum.py", ["--problems", "0"]),
    ],
)
def test_bench_scripts_refuse_bad_options_before_any_work(script: str, args: list[str]) -> None:
    """A value no run can use is a usage error (exit 2, no traceback) at once: fidelity.py
    with --repeats 0 failed in a median of nothing after minutes of profiling."""
    result = subprocess.run(
        [sys.executable, str(ROOT / script), *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and f"argument {args[0]}" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("script", ["quality_table.py", "fidelity.py", "flush_tiny_optimum.py"])
def test_bench_scripts_help_is_their_whole_first_paragraph(script: str) -> None:
    """The help was the docstring's first line, cut mid-sentence."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    description = " ".join(result.stdout.split("\n\n")[1].split())
    assert description.endswith((".", "?", ")")), description


def test_the_source_distribution_carries_the_docs_tests_and_benchmarks(tmp_path: Path) -> None:
    """A packager's sdist held the package alone: no docs the README links to, no tests,
    no golden data, no benchmarks."""
    import tarfile

    build = f"import setuptools.build_meta as b; b.build_sdist({str(tmp_path)!r})"
    subprocess.run([sys.executable, "-c", build], cwd=ROOT, check=True, capture_output=True)
    (path,) = tmp_path.glob("tidgap-*.tar.gz")
    with tarfile.open(path) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for needed in ["docs/model.md", "tests/data/golden.json", "bench/gpu_check.sh", ".ci/run"]:
        assert needed in names, needed
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
