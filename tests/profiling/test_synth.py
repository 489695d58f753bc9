"""``tidgap synth``: simulated networks, deterministic under a seed, always valid problems."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from tidgap.cli import cli
from tidgap.cli.main import TidgapGroup
from tidgap.cli.profile import profile_command, synth_command
from tidgap.model.errors import InputError
from tidgap.model.problem import Problem
from tidgap.profiling.build import measurement_sizes
from tidgap.profiling.synth import SHAPES, synth_problem

ARGS = ["--stages", "5", "--batch-size", "48", "--unit", "4"]


def run(*args: str) -> Result:
    """``tidgap ARGS`` in-process, with ``profile`` and ``synth`` registered."""
    group = TidgapGroup(
        name="tidgap", commands={**cli.commands, "profile": profile_command, "synth": synth_command}
    )
    return CliRunner().invoke(group, list(args), prog_name="tidgap")


def synth_bytes(tmp_path: Path, *args: str) -> bytes:
    """The file ``tidgap synth ARGS --out FILE`` writes."""
    out = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
    result = run("synth", *args, "--out", str(out))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stdout == f"wrote {out}\n"
    return out.read_bytes()


@pytest.mark.parametrize("shape", SHAPES)
def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path, shape: str) -> None:
    first = synth_bytes(tmp_path, "--seed", "3", "--shape", shape, *ARGS)
    random.seed(99)  # the global random state must not matter
    assert synth_bytes(tmp_path, "--seed", "3", "--shape", shape, *ARGS) == first
    other = synth_bytes(tmp_path, "--seed", "4", "--shape", shape, *ARGS)
    assert other != first
    assert json.loads(other)["stages"] != json.loads(first)["stages"]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_file_written_is_a_valid_problem_of_the_declared_shape(
    tmp_path: Path, shape: str
) -> None:
    result = run(
        "synth", "--seed", "10", "--count", "6", "--out-dir", str(tmp_path / "nets"),
        "--shape", shape, "--heterogeneity", "1.5", *ARGS,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    paths = sorted((tmp_path / "nets").iterdir())
    assert [p.name for p in paths] == [f"synth-{seed}.json" for seed in range(10, 16)]
    assert result.stdout.splitlines() == [f"wrote {p}" for p in paths]
    for seed, path in zip(range(10, 16), paths, strict=True):
        document = json.loads(path.read_text(encoding="utf-8"))
        assert document == synth_problem(seed, 5, 48, 4, 1.5, shape)
        problem = Problem.from_dict(document)
        assert (problem.num_stages, problem.batch_size, problem.unit) == (5, 48, 4)
        assert problem.name == f"synth-{seed}" and len(problem.links) == 4
        for stage in problem.stages:
            for function in (stage.forward, stage.backward):
                if shape == "affine":
                    assert function.affine is not None
                    continue
                assert function.table is not None
                sizes, times = function.table.sizes, function.table.times
                assert sizes[0] == 4 and sizes[-1] == 48
                assert times == sorted(times)
                if shape == "table":
                    assert sizes == measurement_sizes(4, 48)
                else:  # flat up to the knee, then linear: unit, knee, batch_size
                    assert len(sizes) <= 3
                    assert len(sizes) < 3 or times[0] == times[1]
        for link in problem.links:
            assert link.forward == link.backward and link.forward.affine is not None


@pytest.mark.parametrize("shape", SHAPES)
def test_heterogeneity_zero_gives_identical_stages(shape: str) -> None:
    problem = Problem.from_dict(synth_problem(5, 4, 64, 2, 0.0, shape))
    first = problem.stages[0]
    for stage in problem.stages[1:]:
        assert stage.model_copy(update={"name": None}) == first.model_copy(update={"name": None})
    assert all(link == problem.links[0] for link in problem.links)
    uneven = Problem.from_dict(synth_problem(5, 4, 64, 2, 0.5, shape))
    assert uneven.stages[1].forward != uneven.stages[0].forward


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 2**40),
    stages=st.integers(1, 9),
    units=st.integers(1, 70),
    unit=st.integers(1, 8),
    heterogeneity=st.floats(0, 2),
    shape=st.sampled_from(SHAPES),
)
def test_every_synthetic_problem_validates(
    seed: int, stages: int, units: int, unit: int, heterogeneity: float, shape: str
) -> None:
    document = synth_problem(seed, stages, units * unit, unit, heterogeneity, shape)
    problem = Problem.from_dict(json.loads(json.dumps(document, allow_nan=False)))
    assert problem.num_stages == stages and problem.num_units == units


def test_synth_prints_the_problem_without_out() -> None:
    result = run("synth", "--seed", "1", *ARGS)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == synth_problem(1, 5, 48, 4, 0.5, "affine")


def test_synthetic_problem_is_searched(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    assert run("synth", "--shape", "saturating", "--out", str(out), *ARGS).exit_code == 0
    result = run("search", str(out), "--generations", "2", "--population", "16", "--json")
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--batch-size", "10", "--unit", "4"), "--batch-size: 10 is not a multiple of --unit 4"),
        (("--count", "3",), "--count needs --out-dir"),
        (("--heterogeneity", "-1",), "--heterogeneity"),
        (("--shape", "cubic"), "--shape"),
        (("--stages", "0"), "--stages"),
        (("--out", "x.json", "--out-dir", "d"), "give --out or --out-dir, not both"),
        (("--out", "no/such/folder/x.json",), "does not exist"),
        (("--count", "2", "--out-dir", "d", "--json"), "not --count > 1"),
        (("--stages", "1025"), "1025 is not in the range 1<=x<=1024"),
        (("--count", str(10**20), "--out-dir", "d"), "is not in the range 1<=x<=100000"),
        (("--batch-size", str(2**31)), "is not in the range 1<=x<=2147483647"),
        # its last file's seed would be one no file keeps (it was written, then refused)
        (("--seed", "9" * 100, "--count", "2", "--out-dir", "d"), "--count: the last seed"),
    ],
)  # fmt: skip
def test_bad_synth_input_exits_2(args: tuple[str, ...], expected: str) -> None:
    result = run("synth", *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tidgap: error: "), result.stderr
    assert expected in lines[0], lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize("name", ["../escaped", "sub/x", "..", "."])
def test_a_name_with_a_folder_never_leaves_out_dir(tmp_path: Path, name: str) -> None:
    out = tmp_path / "made" / "here"
    result = run("synth", "--name", name, "--out-dir", str(out))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.strip() == (
        "tidgap: error: --name: names the file in --out-dir: no folder in it, not . or .."
    )
    assert list(tmp_path.iterdir()) == []


def test_a_refused_out_dir_is_not_left_behind(tmp_path: Path) -> None:
    out = tmp_path / "made" / "here"
    result = run("synth", "--name", "x" * 250, "--out-dir", str(out))  # a file name too long
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "name too long to write" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_out_dir_whose_files_fail_to_write_is_not_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while writing the problems left the folders ``--out-dir`` had made."""
    from tidgap.outputs import atomic

    def full(path: Any, produce: Any, folder: Any, made: Any) -> None:
        raise InputError("cannot write: No space left on device", source=str(path))

    monkeypatch.setattr(atomic, "_stage", full)
    out = tmp_path / "made" / "here"
    result = run("synth", "--count", "2", "--out-dir", str(out))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "No space left on device" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("folder", ["{long}", "made/{long}", "{long}/here"])
def test_an_out_dir_name_too_long_is_one_line(tmp_path: Path, folder: str) -> None:
    """A folder name over 255 bytes in ``--out-dir``: a traceback (ENAMETOOLONG); now one
    line, and no folder of the path left behind."""
    out = tmp_path / folder.format(long="a" * 260)
    result = run("synth", "--count", "2", "--out-dir", str(out))
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert result.stderr == f"tidgap: error: --out-dir: {out}: cannot write: File name too long\n"
    assert list(tmp_path.iterdir()) == []


def test_an_out_dir_under_a_file_names_the_option(tmp_path: Path) -> None:
    """``--out-dir afile/sub`` said ``afile/sub: cannot write: Not a directory``, not which
    option (as ``sweep``'s other ``--out-dir`` errors do)."""
    (tmp_path / "afile").write_text("", encoding="utf-8")
    out = tmp_path / "afile" / "sub"
    result = run("synth", "--count", "1", "--out-dir", str(out))
    assert result.exit_code == 2
    assert result.stderr == f"tidgap: error: --out-dir: {out}: cannot write: Not a directory\n"


def test_the_recorded_command_makes_the_same_problem(tmp_path: Path) -> None:
    """``source.command`` is quoted for a shell (a name with a space did not re-run)."""
    import shlex

    first = json.loads(run("synth", "--name", "my net", "--seed", "3", "--json").stdout)
    argv = shlex.split(first["source"]["command"])
    assert argv[:2] == ["tidgap", "synth"]
    again = run(*argv[1:], "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout) == first


def test_a_negative_seed_is_another_problem_than_its_absolute_value() -> None:
    """``random.Random(-3)`` is ``random.Random(3)``: ``--seed -3`` wrote seed 3's stages."""
    stages = [synth_problem(seed, 4, 32)["stages"] for seed in (3, -3, -4)]
    assert stages[0] != stages[1] and stages[1] != stages[2]
    assert synth_problem(-3, 4, 32)["stages"] == stages[1]
