"""The memory guard: estimates above what a search really allocates, refusals before
anything large is allocated, one line naming the option and the estimate."""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from tidgap.backends import BACKENDS
from tidgap.cli import cli
from tidgap.model.errors import InputError
from tidgap.model.problem import Problem, load_problem
from tidgap.optimize.driver import chromosome_width, search
from tidgap.optimize.memory import (
    BASELINE_BYTES,
    exact_bytes,
    format_bytes,
    joint_footprint,
    parse_size,
    search_footprint,
)
from tidgap.profiling.synth import synth_problem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1000", 1000),
        ("8G", 8 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1.5k", 1500),
        ("2 GB", 2e9),
        ("1e9", 10**9),  # formats.md: "or a number" (it was refused)
        ("2.5E-3k", 2),
        ("9223372036854775807", 2**63 - 1),  # exact: a float rounds it up to 2**63
        ("9007199254740993", 2**53 + 1),
        ("8388607.5Ti", 2**63 - 2**39),
    ],
)
def test_sizes_parse(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "lots", "-1G", "8X", "1e", "e9", "1e9.5", "9223372036854775808", "8388608Ti", "1e400",
     "9" * 400, "1e999999999999"],
)  # fmt: skip
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_exact_bytes_are_the_value_given_without_float_noise() -> None:
    """``int(1e30)`` printed 1,000,000,000,000,000,019,884,624,838,656."""
    assert exact_bytes(999999) == "999,999 bytes"
    assert exact_bytes(1e30) == "1," + ",".join(["000"] * 10) + " bytes"
    assert exact_bytes(3.7) == "3.7 bytes"


def test_bytes_format_readably() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(51.2e9) == "51.2 GB"
    # rounded before the unit is chosen; fractions of a byte kept (a mean's bytes)
    assert format_bytes(999_999) == "1 MB"
    assert format_bytes(249_999.9 * 4) == "1 MB"
    assert format_bytes(999.6e6) == "1 GB"
    assert format_bytes(999.4) == "999 B"
    assert format_bytes(62.9) == "62.9 B"
    assert format_bytes(2.5e15) == "2500 TB"


@pytest.mark.parametrize("schedule", ["flush", "windowed"])
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_the_estimate_covers_the_measured_peak(backend: str, schedule: str) -> None:
    problem = Problem.from_dict(synth_problem(seed=3, stages=6, batch_size=192))
    population, width = (2048, 96) if schedule == "flush" else (512, 96)
    options = dict(backend=backend, max_microbatches=width, schedule=schedule)
    search(problem, generations=1, population=16, **options)
    tracemalloc.start()
    try:
        result = search(problem, generations=4, population=population, **options)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert chromosome_width(problem, width, []) == width
    S, U = problem.num_stages, problem.num_units
    if schedule == "flush":
        estimate = search_footprint(population, S, width, U, 200)
    else:
        estimate = joint_footprint(population, len(result.tradeoff), S, width, U, 400)
    assert estimate.total - BASELINE_BYTES >= peak


def test_a_huge_population_is_refused_before_allocating() -> None:
    tracemalloc.start()
    try:
        result = CliRunner().invoke(cli, ["search", "example:tiny-2", "--population", "100000000"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tidgap: error: --population: ")
    assert "GB" in lines[0] and "--max-memory" in lines[0]
    assert peak < 200 << 20


def test_a_population_the_joint_ga_cannot_hold_is_refused_before_the_first_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The windowed search checked its joint GA's estimate only after its first (flush)
    search had run (16 s here, minutes at larger sizes)."""
    from tidgap.optimize import windowed_driver

    def no_flush_search(*args: object, **kwargs: object) -> None:
        raise AssertionError("the flush first search ran")

    monkeypatch.setattr(windowed_driver, "flush_search", no_flush_search)
    args = ["search", "example:tiny-2", "--population", "1000000", "--generations", "1"]
    result = CliRunner().invoke(cli, [*args, "--max-memory", "600M"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("tidgap: error: --population: this search (the population")
    assert "memory budget 600 MB (max_memory / --max-memory)" in result.stderr


def test_a_trillion_individuals_is_one_line() -> None:
    result = CliRunner().invoke(cli, ["search", "--population", "1000000000000"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--population" in result.stderr


def test_max_memory_lowers_the_budget() -> None:
    args = ["search", "example:tiny-2", "--generations", "2", "--quiet"]
    assert CliRunner().invoke(cli, args).exit_code == 0
    result = CliRunner().invoke(cli, [*args, "--max-memory", "1M"])
    assert result.exit_code == 2
    # the option, named once
    assert "memory budget 1 MB (max_memory / --max-memory)" in result.stderr
    # tiny-2's tables take a kilobyte: what weighs most is what every search holds
    assert "this search (the fixed share every search holds above all)" in result.stderr
    assert result.stderr.count("--max-memory") == 1


@pytest.mark.parametrize("value", ["plenty", "0", "0.4", "1" + "0" * 310, "9999999999T"])
def test_a_bad_max_memory_is_bad_usage(value: str) -> None:
    result = CliRunner().invoke(cli, ["search", "--max-memory", value])
    assert result.exit_code == 2 and "--max-memory" in result.stderr
    assert result.stderr.count("\n") == 1


def test_more_memory_than_the_machine_has_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``--max-memory`` above the machine lets an allocation fail: one line, exit 1."""
    from tidgap.cli import search as search_cli

    def allocate(*args: object, **kwargs: object) -> None:
        raise MemoryError("Unable to allocate 32.0 GiB for an array")

    monkeypatch.setattr(search_cli, "search", allocate)
    result = CliRunner().invoke(cli, ["search", "example:tiny-2", "--max-memory", "1T"])
    assert result.exit_code == 1
    assert result.stderr == (
        "tidgap: error: out of memory: MemoryError: Unable to allocate 32.0 GiB for an array\n"
    )


def test_bench_refuses_a_population_over_the_count_limit() -> None:
    result = CliRunner().invoke(cli, ["bench", "--population", "2147483648"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "2147483648 is not a population size (1 to 2147483647)" in result.stderr


def test_a_huge_batch_is_refused_by_bench_before_its_tables(tmp_path: Path) -> None:
    """Before building them: 10**9 units' tables would take 256 GB."""
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(synth_problem(seed=1, stages=4, batch_size=10**9)))
    result = CliRunner().invoke(cli, ["bench", str(path), "--backend", "numpy"])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"tidgap: error: {path}: batch_size: the tick tables")
    assert result.stderr.count("\n") == 1


def test_a_huge_batch_names_the_problem_field(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(synth_problem(seed=1, stages=4, batch_size=10**9)))
    result = CliRunner().invoke(cli, ["search", str(path), "--quiet"])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"tidgap: error: {path}: batch_size: this search (the tick")
    assert result.stderr.count("\n") == 1


def test_the_library_raises_input_error() -> None:
    with pytest.raises(InputError, match="^population: "):
        search(load_problem("example:tiny-2"), population=10**9, max_memory=10**9)


def test_the_gpu_budget_is_the_lesser_of_host_and_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import tidgap.optimize.memory as memory

    monkeypatch.setattr(memory, "available_memory", lambda: 10_000)
    gpu = replace(BACKENDS["cuda"], free_memory=lambda: 4_000)
    assert memory.default_budget(gpu) == 2_000
    assert memory.default_budget(BACKENDS["numba"]) == 5_000
    assert memory.default_budget(replace(gpu, free_memory=lambda: None)) == 5_000


def test_the_python_api_names_its_own_keyword_for_the_budget() -> None:
    problem = load_problem("example:tiny-2")
    with pytest.raises(InputError, match=r"memory budget 1 kB \(max_memory"):
        search(problem, generations=1, max_memory=1000)
