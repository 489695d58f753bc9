"""``tidgap profile``: tiny models measured end to end on the CPU, split validation, no torch.

Tests that measure need PyTorch (``pip install torch``) and skip without it;
the split planner, the document builder and the missing-PyTorch message are tested always.
"""

from __future__ import annotations

import itertools
import json
import platform
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tidgap.cli import cli
from tidgap.cli.main import TidgapGroup
from tidgap.cli.profile import profile_command, synth_command
from tidgap.model.errors import InputError
from tidgap.model.problem import Problem
from tidgap.profiling.allocator import ALLOCATOR_KEPT
from tidgap.profiling.build import measurement_sizes, non_decreasing
from tidgap.profiling.split import balanced_split, parse_split, stage_layers

ROOT = Path(__file__).resolve().parents[2]
MLP = ["tests.support.tiny_models:MLP", "--input-shape", "16"]
FAST = ["--repeats", "2", "--warmup", "1"]
TINY_GPT = ["gpt", "--layers", "2", "--hidden", "32", "--seq-len", "8", "--vocab", "50"]
MLP_LAYERS = ["0", "1", "2", "3", "4", "5"]


@pytest.fixture(scope="module")
def torch() -> Any:
    """PyTorch, or a skip saying how to install it."""
    return pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")


def run(*args: str) -> Result:
    """``tidgap ARGS`` in-process, with ``profile`` and ``synth`` registered."""
    group = TidgapGroup(
        name="tidgap", commands={**cli.commands, "profile": profile_command, "synth": synth_command}
    )
    return CliRunner().invoke(group, list(args), prog_name="tidgap")


def error_line(result: Result) -> str:
    """The one line a failed command printed on stderr (exit 2, nothing on stdout)."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tidgap: error: "), lines[0]
    assert result.stdout == ""
    return lines[0]


def profiled(tmp_path: Path, *args: str) -> tuple[Problem, dict[str, Any]]:
    """Run ``tidgap profile ARGS --out FILE``; the problem as loaded, and as written."""
    out = tmp_path / "profiled.json"
    result = run("profile", *args, *FAST, "--out", str(out))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    document = json.loads(out.read_text(encoding="utf-8"))
    return Problem.from_dict(document), document


def assert_tables_measured(problem: Problem, sizes: list[int]) -> None:
    """Every stage time is a non-decreasing table at exactly ``sizes``."""
    for stage in problem.stages:
        for function in (stage.forward, stage.backward):
            assert function.table is not None
            assert function.table.sizes == sizes
            times = function.table.times
            assert all(t >= 0 for t in times)
            assert all(a <= b for a, b in itertools.pairwise(times)), times


# --- without PyTorch --------------------------------------------------------------------------


def test_import_tidgap_does_not_import_torch() -> None:
    code = (
        "import sys, tidgap, tidgap.cli, tidgap.cli.profile, tidgap.profiling.synth, "
        "tidgap.profiling, tidgap.profiling.build, tidgap.profiling.split; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_profile_without_torch_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    out = tmp_path / "p.json"
    line = error_line(run("profile", "gpt", "--out", str(out)))
    assert "PyTorch is not installed" in line and "pip install torch" in line
    assert not out.exists()


def test_measurement_sizes_are_powers_of_two_times_unit_then_the_cap() -> None:
    assert measurement_sizes(1, 16) == [1, 2, 4, 8, 16]
    assert measurement_sizes(4, 48) == [4, 8, 16, 32, 48]
    assert measurement_sizes(3, 3) == [3]
    assert non_decreasing([3.0, 2.0, 4.0, 3.5]) == [3.0, 3.0, 4.0, 4.0]


def test_balanced_split_minimises_the_largest_stage() -> None:
    rng = random.Random(7)
    for _ in range(200):
        costs = [rng.choice([0.0, rng.uniform(0, 10)]) for _ in range(rng.randint(1, 8))]
        stages = rng.randint(1, len(costs))
        got = balanced_split(costs, stages)
        assert len(got) == stages - 1 and got == sorted(set(got))
        assert all(1 <= b < len(costs) for b in got)

        def largest(bounds: tuple[int, ...] | list[int], costs: list[float] = costs) -> float:
            edges = [0, *bounds, len(costs)]
            return max(sum(costs[a:b]) for a, b in itertools.pairwise(edges))

        best = min(largest(c) for c in itertools.combinations(range(1, len(costs)), stages - 1))
        assert largest(got) == pytest.approx(best)


def test_parse_split_takes_indices_and_names() -> None:
    names = ["embed", "block0", "block1", "head"]
    assert parse_split("1, block1 ,3", names, 4) == [1, 2, 3]
    assert parse_split("", names, 1) == []


def test_stages_get_names_of_their_own_where_a_layer_is_named_like_a_range() -> None:
    """A layer named 'a-b' after a stage of layers a to b: the two stages had one name, so
    one of them was lost (tidgap run --split then failed with a traceback)."""
    stages = stage_layers(["a", "b", "a-b"], [2])
    assert stages == {"a-b": ["a", "b"], "a-b (2)": ["a-b"]}


def test_a_digit_that_names_one_layer_and_indexes_another_is_ambiguous() -> None:
    """Names were matched first, silently: '1' split at the layer named '1' (index 2), and
    '2' said 'boundary 2 is out of range 1..2'. A split recorded in a problem is indices."""
    names = ["2", "0", "1"]
    for item in ("1", "2"):
        with pytest.raises(InputError, match=f"'{item}' is ambiguous: layer "):
            parse_split(item, names, 2)
    assert parse_split("1", names, 2, by_name=False) == [1]
    assert parse_split("1", ["0", "1", "2"], 2) == [1]  # the name is the index


# --- measuring tiny models --------------------------------------------------------------------


def test_profile_mlp_end_to_end(torch: Any, tmp_path: Path) -> None:
    problem, document = profiled(
        tmp_path, *MLP, "--stages", "3", "--batch-size", "12", "--unit", "3"
    )
    assert problem.num_stages == 3 and len(problem.links) == 2
    assert (problem.batch_size, problem.unit, problem.name) == (12, 3, "profiled")
    assert_tables_measured(problem, [3, 6, 12])
    assert all(stage.max_microbatch is None for stage in problem.stages)
    source = document["source"]
    assert source["measured"] is True and source["device"] == "cpu"
    assert source["versions"]["torch"] == torch.__version__
    assert source["threads"] == torch.get_num_threads()
    glibc = platform.libc_ver()[0] == "glibc"
    assert source["timing"]["allocator"] == (
        ALLOCATOR_KEPT if glibc else "the C library's defaults"
    )
    assert source["split"]["method"].startswith("balanced")
    assert list(source["split"]["layer_ms"]) == MLP_LAYERS
    bounds = source["split"]["boundaries"]
    assert [name for names in source["split"]["stages"].values() for name in names] == MLP_LAYERS
    widths = [32, 32, 32, 16, 16]  # floats leaving layers 0..4
    assert source["links"]["bytes_per_sample"] == [4 * widths[b - 1] for b in bounds]
    for link, sent in zip(problem.links, source["links"]["bytes_per_sample"], strict=True):
        assert link.forward.affine is not None and link.forward == link.backward
        assert link.forward.affine.base == 0.05
        assert link.forward.affine.per_sample == pytest.approx(sent / 10e9 * 1e3, rel=1e-4)


def test_a_layer_placed_twice_is_in_its_stage_each_time(torch: Any, tmp_path: Path) -> None:
    """A module placed twice (one ReLU as layers 1 and 4) was listed once (``named_children``):
    the stages left layer 4 out and profiled, and ran, another function than the model's."""
    _, document = profiled(
        tmp_path,
        "tests.support.tiny_models:REUSED",
        "--input-shape",
        "16",
        "-s",
        "2",
        "--split",
        "3",
    )
    assert document["source"]["split"]["stages"] == {"0-2": MLP_LAYERS[:3], "3-5": MLP_LAYERS[3:]}
    from tests.support.tiny_models import REUSED
    from tidgap.profiling.models import Model
    from tidgap.profiling.run import stage_modules

    model = Model("reused", REUSED, lambda size, device: torch.randn(size, 16))
    x = torch.randn(5, 16)
    through = x
    for _, _, stage in stage_modules(model, [3]):
        through = stage(through)
    assert torch.equal(through, REUSED(x))


def test_layers_that_start_in_place_are_profiled(torch: Any, tmp_path: Path) -> None:
    """``ReLU(inplace=True)`` alone, and a block that begins with one, timed on a leaf
    input that wants a gradient, wrote that leaf: autograd refused (exit 2). They take a
    copy now, and the gradient still reaches the leaf."""
    _, document = profiled(
        tmp_path, "tests.support.tiny_models:IN_PLACE", "--input-shape", "16", "-s", "2"
    )
    assert len(document["stages"]) == 2
    from tests.support.tiny_models import IN_PLACE
    from tidgap.profiling.models import Model

    model = Model("in-place", IN_PLACE, lambda size, device: torch.randn(size, 16))
    for _, layer in model.named_layers()[1:4:2]:
        leaf = torch.randn(3, 16, requires_grad=True)
        layer(leaf).sum().backward()
        assert torch.equal(leaf.grad, (leaf > 0).to(leaf.dtype))
        wide = torch.randn(3, 2, 8, requires_grad=True)  # behind a Flatten: a view of a leaf
        layer(wide.flatten(1)).sum().backward()
        assert torch.equal(wide.grad, (wide > 0).to(wide.dtype))
    Model("again", IN_PLACE, lambda size, device: torch.randn(size, 16))  # hooked once
    assert len(IN_PLACE[1]._forward_pre_hooks) == 1


def test_tied_layers_on_two_stages_are_warned_of(torch: Any, tmp_path: Path) -> None:
    """Stages that share a parameter: the times hold, but tidgap run refuses the split."""
    out = tmp_path / "tied.json"
    model = ["tests.support.tiny_models:TIED", "--input-shape", "16", "--stages", "2"]
    result = run("profile", *model, *FAST, "--batch-size", "4", "--split", "1", "--out", str(out))
    assert result.exit_code == 0 and out.exists(), result.stderr
    assert (
        "tidgap: warning: layers '0' (stage 0) and '2' (stage 1) share a parameter (weight, "
        "weight): tidgap run refuses this split"
    ) in result.stderr
    result = run("profile", *model, *FAST, "--batch-size", "4", "--split", "3")
    assert result.exit_code == 0 and "share a parameter" not in result.stderr


@pytest.mark.parametrize(("warmup", "repeats", "warned"), [("0", "2", True), ("1", "1", False)])
def test_a_cold_median_is_warned_of(
    torch: Any, tmp_path: Path, warmup: str, repeats: str, warned: bool
) -> None:
    """No warm-up and fewer than 3 timed rounds: the first round's one-off start-up costs
    (326 ms on a 3 ms op, seen) stay in the medians, and nothing said so."""
    out = tmp_path / "cold.json"
    timing = ["--warmup", warmup, "--repeats", repeats]
    result = run("profile", *MLP, "--stages", "2", "--batch-size", "4", *timing, "--out", str(out))
    assert result.exit_code == 0 and out.exists(), result.stderr
    line = f"tidgap: warning: --warmup 0 with --repeats {repeats}: the first timed round pays"
    assert (line in result.stderr) is warned


def test_profiled_problem_is_searched(torch: Any, tmp_path: Path) -> None:
    profiled(tmp_path, *MLP, "--stages", "2", "--batch-size", "8")
    result = run(
        "search", str(tmp_path / "profiled.json"), "--generations", "2", "--population", "16",
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["format"] == "tidgap.plan/1"


def test_profile_tiny_gpt_with_split_and_cap(torch: Any, tmp_path: Path) -> None:
    problem, document = profiled(
        tmp_path, *TINY_GPT, "--stages", "2", "--batch-size", "8", "--split", "block1",
        "--max-microbatch", "4", "--bandwidth", "2", "--latency", "0.5", "--name", "g",
    )  # fmt: skip
    assert [problem.stage_name(s) for s in range(2)] == ["embed-block0", "block1-head"]
    assert problem.name == "g" and problem.batch_size == 8
    assert all(stage.max_microbatch == 4 for stage in problem.stages)
    assert_tables_measured(problem, [1, 2, 4])
    source = document["source"]
    assert source["split"] == {
        "method": "given by --split",
        "boundaries": [2],
        "stages": {"embed-block0": ["embed", "block0"], "block1-head": ["block1", "head"]},
    }
    assert source["links"]["bytes_per_sample"] == [8 * 32 * 4]  # seq_len x hidden floats
    affine = problem.links[0].forward.affine
    assert (affine.base, affine.per_sample) == (0.5, pytest.approx(1024 / 2e9 * 1e3))
    assert source["model"]["layers"] == 2 and source["model"]["seq_len"] == 8


def test_profile_prints_the_problem_without_out(torch: Any) -> None:
    result = run("profile", *MLP, *FAST, "--stages", "1", "--batch-size", "2")
    assert result.exit_code == 0, result.stderr
    problem = Problem.from_dict(json.loads(result.stdout))
    assert problem.num_stages == 1 and problem.links == []
    assert_tables_measured(problem, [1, 2])


# --- bad input: exit 2, one line, nothing measured or written ------------------------------------


@pytest.fixture
def no_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything gets measured."""
    import tidgap.profiling.run

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("measured despite bad input")

    monkeypatch.setattr(tidgap.profiling.run, "measure", refuse)


@pytest.mark.parametrize(
    ("split", "reason"),
    [
        ("3,2", "strictly increasing"),
        ("2,2", "strictly increasing"),
        ("0,3", "out of range"),
        ("2,6", "out of range"),
        ("-1,3", "out of range"),
        ("2", "need 2 boundaries"),
        ("1,2,3", "need 2 boundaries"),
        ("", "need 2 boundaries"),
        ("a,3", "neither a layer index nor a layer name"),
        ("1.5,3", "neither a layer index nor a layer name"),
    ],
)
def test_bad_split_exits_2_naming_split(
    torch: Any, tmp_path: Path, no_measuring: None, split: str, reason: str
) -> None:
    out = tmp_path / "p.json"
    result = run("profile", *MLP, "--stages", "3", "--split", split, "--out", str(out))
    line = error_line(result)
    assert line.startswith("tidgap: error: --split: "), line
    assert reason in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((*MLP, "--stages", "7"), "--stages: 7 stages need at least 7 layers"),
        (
            ("tests.support.tiny_models:NOT_SEQUENTIAL", "--input-shape", "4"),
            "not a torch.nn.Sequential",
        ),
        (("tests.support.tiny_models:NOPE", "--input-shape", "4"), "has no attribute 'NOPE'"),
        (("tests.no_such_module:M", "--input-shape", "4"), "cannot import"),
        (("resnet50",), "expected gpt, vgg16 or module:attribute"),
        (("tests.support.tiny_models:MLP",), "--input-shape is required"),
        ((MLP[0], "--input-shape", "3,x"), "--input-shape: expected positive integers"),
        ((MLP[0], "--input-shape", "9" * 20), "is more than 2147483647 values per sample"),
        ((MLP[0], "--input-shape", "65536,65536"), "--input-shape: '65536,65536' is more than"),
        (("gpt", "--image-size", "64"), "--image-size applies to vgg16"),
        (("vgg16", "--image-size", "16"), "--image-size: must be at least 32"),
        ((*TINY_GPT, "--heads", "3"), "--heads: 3 heads do not divide hidden size 32"),
        ((*MLP, "--batch-size", "10", "--unit", "4"), "--batch-size: 10 is not a multiple"),
        ((*MLP, "--batch-size", "8", "--max-microbatch", "6", "--unit", "4"), "--max-microbatch"),
        # checked as given, not as clamped to the batch (10 became 8, a multiple of 4)
        ((*MLP, "--batch-size", "8", "--max-microbatch", "10", "--unit", "4"), "10 is not a"),
        ((*MLP, "--batch-size", str(2**31)), "2147483648 is not in the range 1<=x<=2147483647"),
        ((*MLP, "--threads", "1025"), "1025 is not in the range 1<=x<=1024"),
        ((*MLP, "--stages", str(10**20)), "is not in the range 1<=x<=1024"),
        (("gpt", "--layers", str(2**31 - 1)), "gpt: about 1.52e+16 parameters need 1.22e+08 GB"),
        (("vgg16", "--classes", str(2**31 - 1)), "vgg16: about 8.8e+12 parameters need"),
        (("vgg16", "--image-size", str(2**31 - 1)), "vgg16: cannot make an input of 1 sample"),
        (
            (*TINY_GPT, "--batch-size", str(2**31 - 1)),
            "--batch-size: a microbatch of 2147483647 samples holds at least",
        ),
        (
            (*TINY_GPT, "--batch-size", str(2**31 - 1), "--max-microbatch", str(2**31 - 2)),
            "--max-microbatch: a microbatch of 2147483646 samples holds at least",
        ),
    ],
)
def test_bad_profile_input_exits_2(
    torch: Any, tmp_path: Path, no_measuring: None, args: tuple[str, ...], expected: str
) -> None:
    out = tmp_path / "p.json"
    line = error_line(run("profile", *args, "--out", str(out)))
    assert expected in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("UNBATCHED", "layer '1' returned shape (8,), whose first dimension is not the"),
        ("MISMATCHED", "layer '1' failed on 1 sample: RuntimeError: mat1 and mat2 shapes"),
        ("RAISING", "layer '1' failed on 1 sample: ValueError: this layer takes no input"),
    ],
)
def test_bad_layer_exits_2(torch: Any, tmp_path: Path, model: str, expected: str) -> None:
    out = tmp_path / "p.json"
    args = (f"tests.support.tiny_models:{model}", "--input-shape", "16", "--stages", "2")
    line = error_line(run("profile", *args, "--batch-size", "4", "--out", str(out)))
    assert f"tidgap: error: tests.support.tiny_models:{model}: {expected}" in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def broken(:\n", "importing 'usermodel' failed: SyntaxError: invalid syntax"),
        ("raise KeyError('no weights')\n", "importing 'usermodel' failed: KeyError: 'no weights'"),
        ("import sys\nsys.exit(3)\n", "importing 'usermodel' failed: SystemExit: 3"),
        ("import not_a_module_anywhere\n", "cannot import 'usermodel': No module named"),
    ],
    ids=["syntax", "raises", "exits", "missing import"],
)
def test_a_module_that_fails_on_import_exits_2(
    torch: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_measuring: None,
    source: str,
    expected: str,
) -> None:
    """The user's module's own error on import: one line naming it, never a traceback."""
    (tmp_path / "usermodel.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "usermodel", raising=False)
    args = ("usermodel:MODEL", "--input-shape", "16", "--out", str(tmp_path / "p.json"))
    line = error_line(run("profile", *args))
    assert line.startswith(f"tidgap: error: usermodel:MODEL: {expected}"), line
    assert not (tmp_path / "p.json").exists()


def test_what_a_module_prints_on_import_stays_off_json(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = "print('loading weights...')\nfrom tests.support.tiny_models import MLP\n"
    (tmp_path / "chatty.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "chatty", raising=False)
    args = ("chatty:MLP", "--input-shape", "16", "--batch-size", "4", "--stages", "2")
    result = run("profile", *args, *FAST, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stages"]
    assert "loading weights..." in result.stderr


def test_the_models_own_file_is_never_the_output(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--out`` naming the module MODEL is read from (here in the current folder, as
    ``build_model`` finds it) is refused before anything runs; the module is unchanged."""
    source = "from tests.support.tiny_models import MLP\n"
    module = tmp_path / "ownmodel.py"
    module.write_text(source, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "ownmodel", raising=False)
    args = ("ownmodel:MLP", "--input-shape", "16", "--batch-size", "4", "--stages", "2")
    line = error_line(run("profile", *args, *FAST, "--out", "ownmodel.py"))
    assert line == (
        f"tidgap: error: --out: is the same file as MODEL {module}; refusing to overwrite an input"
    )
    assert module.read_text(encoding="utf-8") == source
    assert "ownmodel" not in sys.modules  # found, not imported


@pytest.mark.parametrize("out", ["pkg/mod.py", "pkg/__init__.py"])
def test_a_dotted_models_files_are_never_the_output(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str
) -> None:
    """``pkg.mod:MLP``: the module's file and its package's ``__init__.py`` are inputs too
    (they were overwritten with the problem); neither is imported to find them."""
    package = tmp_path / "pkg"
    package.mkdir()
    sources = {"__init__.py": "", "mod.py": "from tests.support.tiny_models import MLP\n"}
    for name, source in sources.items():
        (package / name).write_text(source, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for name in ("pkg", "pkg.mod"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    args = ("pkg.mod:MLP", "--input-shape", "16", "--batch-size", "4", "--stages", "2")
    line = error_line(run("profile", *args, *FAST, "--out", out))
    owner = "MODEL" if out.endswith("mod.py") else "MODEL package pkg"
    assert line == (
        f"tidgap: error: --out: is the same file as {owner} {tmp_path / out}; refusing to "
        "overwrite an input"
    )
    assert {name: (package / name).read_text(encoding="utf-8") for name in sources} == sources
    assert "pkg" not in sys.modules  # found, not imported


def test_the_summary_line_escapes_the_name_and_the_file(torch: Any, tmp_path: Path) -> None:
    out = tmp_path / "p\nq.json"
    args = ("tests.support.tiny_models:MLP", "--input-shape", "16", "--stages", "2")
    result = run(
        "profile", *args, "--batch-size", "4", *FAST, "--name", "\x1b[31mRED\nX", "--out", str(out)
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("\\x1b[31mRED\\nX: 2 stage(s), batch_size 4, unit 1, measured on")
    assert "problem written to " + str(out).replace("\n", "\\n") in lines
    assert "\x1b" not in result.stdout


def test_what_a_layer_prints_stays_off_json(torch: Any) -> None:
    args = ("tests.support.tiny_models:CHATTY", "--input-shape", "16", "--stages", "2")
    result = run("profile", *args, "--batch-size", "4", *FAST, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stages"]
    assert "forward of (4, 8)" in result.stderr


def test_unwritable_out_fails_before_measuring(
    torch: Any, tmp_path: Path, no_measuring: None
) -> None:
    out = tmp_path / "missing" / "p.json"
    line = error_line(run("profile", *MLP, "--out", str(out)))
    assert str(out) in line and "does not exist" in line


def test_cuda_without_a_device_exits_2(torch: Any, tmp_path: Path, no_measuring: None) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is available here")
    line = error_line(run("profile", *MLP, "--device", "cuda", "--out", str(tmp_path / "p.json")))
    assert line.startswith("tidgap: error: --device: CUDA is not usable"), line


def test_held_bytes_per_sample_are_the_input_and_the_largest_output(torch: Any) -> None:
    from tidgap.profiling.measure import held_bytes_per_sample

    chain = [("0", torch.nn.Linear(4, 8)), ("1", torch.nn.Linear(8, 2))]
    first = torch.zeros(3, 4)  # float32: 16 bytes a sample; outputs 32 and 8
    assert held_bytes_per_sample(chain, first) == 16 + 32
    wide = [("0", torch.nn.Linear(8, 2).double())]  # float64: 64 bytes in, 16 out
    assert held_bytes_per_sample(wide, torch.zeros(5, 8, dtype=torch.float64)) == 64 + 16
