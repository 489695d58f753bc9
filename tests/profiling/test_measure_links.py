"""``tidgap profile --measure-links``: each link's transfers measured between two local
processes over torch.distributed (gloo here) and written as the links' tables."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.profiling.test_profile import MLP, error_line, run
from tidgap.model.errors import InputError
from tidgap.model.problem import Problem

#: The MLP in three stages whose boundaries carry 32 and 16 floats, at sizes 2, 4, 8.
THREE_STAGES = [*MLP, "--stages", "3", "--split", "2,4", "--batch-size", "8", "--unit", "2"]
QUICK = ["--repeats", "1", "--warmup", "0", "-q"]


@pytest.fixture(scope="module")
def torch() -> Any:
    """PyTorch, or a skip saying how to install it."""
    return pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")


def children() -> list[int]:
    """The process ids whose parent is this process (Linux ``/proc``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(encoding="ascii", errors="replace").rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.append(int(stat.parent.name))
    return found


def profiled(tmp_path: Path, *args: str) -> dict[str, Any]:
    """``tidgap profile ARGS --out FILE``, which must succeed; the document written."""
    out = tmp_path / "links.json"
    result = run("profile", *args, *QUICK, "--out", str(out))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return json.loads(out.read_text(encoding="utf-8"))


def test_links_measured_over_gloo_are_tables_at_the_profiles_sizes(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two real processes: per link and direction a positive, non-decreasing table at the
    stage tables' sizes; the problem loads and searches; no process or folder is left."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    before = set(children())
    document = profiled(tmp_path, *THREE_STAGES, "--measure-links")
    assert set(children()) <= before
    assert list(temporary.iterdir()) == []
    sizes = document["source"]["timing"]["sizes"]
    assert sizes == [2, 4, 8] == document["stages"][0]["forward"]["table"]["sizes"]
    assert len(document["links"]) == 2
    for link in document["links"]:
        for direction in ("forward", "backward"):
            assert set(link[direction]) == {"table"}
            assert link[direction]["table"]["sizes"] == sizes
            times = link[direction]["table"]["times"]
            assert all(t > 0 for t in times), times
            assert all(a <= b for a, b in itertools.pairwise(times)), times
    source = document["source"]["links"]
    assert source["measured"] is True and source["backend"] == "gloo"
    assert source["shapes"] == [[32], [16]]
    assert source["bytes_per_sample"] == [32 * 4, 16 * 4]
    assert "bandwidth_GBps" not in source
    assert "--measure-links" in document["source"]["command"]
    problem = Problem.from_dict(document)
    assert problem.links[0].forward(8) == document["links"][0]["forward"]["table"]["times"][-1]
    path = tmp_path / "links.json"
    found = run("search", str(path), "--generations", "3", "--json")
    assert found.exit_code == 0, found.stderr
    assert json.loads(found.stdout)["predicted"]["iteration_time"] > 0


@pytest.mark.parametrize("guess", [["--bandwidth", "5"], ["--latency", "0.1"]])
def test_measuring_links_and_guessing_them_is_bad_usage(tmp_path: Path, guess: list[str]) -> None:
    out = tmp_path / "never.json"
    result = run("profile", *MLP, "--stages", "2", "--measure-links", *guess, "--out", str(out))
    line = error_line(result)
    assert "--measure-links" in line and guess[0] in line, line
    assert not out.exists()


def test_tables_take_each_sizes_median_per_direction_in_the_time_unit(torch: Any) -> None:
    """Rank 0's transfers give the forward table, rank 1's the backward; seconds times the
    scale; a median that dips keeps the larger time before it."""
    from tidgap.profiling.links import link_tables

    forward = [[[1e-3, 3e-3, 2e-3], [5e-3], [4e-3]]]
    backward = [[[1e-4], [2e-4, 4e-4], [5e-4]]]
    (link,) = link_tables([forward, backward], [1, 2, 4], 1e3)
    assert link["forward"]["table"] == {"sizes": [1, 2, 4], "times": [2.0, 5.0, 5.0]}
    assert link["backward"]["table"]["times"] == pytest.approx([0.1, 0.3, 0.5])


def test_each_link_is_measured_with_its_boundarys_shape(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The processes get each boundary's per-sample shape and dtype and the tables' sizes;
    their seconds become ms tables."""
    from tidgap.profiling import links

    jobs: list[links.LinkJob] = []

    def measured(job: links.LinkJob) -> list[list[list[list[float]]]]:
        jobs.append(job)
        per_link = [[[size * 1e-4] for size in job.sizes] for _ in job.shapes]
        return [per_link, [[[2 * t for t in kept] for kept in row] for row in per_link]]

    monkeypatch.setattr(links, "measured_transfers", measured)
    document = profiled(tmp_path, *THREE_STAGES, "--measure-links")
    (job,) = jobs
    assert (job.shapes, job.dtypes, job.sizes, job.device) == (
        [[32], [16]],
        ["float32", "float32"],
        [2, 4, 8],
        "cpu",
    )
    for link in document["links"]:
        assert link["forward"]["table"]["times"] == pytest.approx([0.2, 0.4, 0.8])
        assert link["backward"]["table"]["times"] == pytest.approx([0.4, 0.8, 1.6])


def test_a_layer_that_fails_in_eval_mode_is_one_line_naming_it(torch: Any, tmp_path: Path) -> None:
    """The link shapes are probed in eval mode, after the timings ran in train mode: a
    layer failing there is bad input naming the option, the stage and the layer."""
    (tmp_path / "eval_refusing.py").write_text(
        "from torch import nn\n"
        "class NoEval(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if not self.training:\n"
        "            raise RuntimeError('no eval here')\n"
        "        return x\n"
        "model = nn.Sequential(nn.Linear(4, 8), NoEval(), nn.Linear(8, 2))\n",
        encoding="utf-8",
    )
    out = tmp_path / "links.json"
    args = ["eval_refusing:model", "--input-shape", "4", "--stages", "2", "--split", "2"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        patch.syspath_prepend(str(tmp_path))
        result = run(
            "profile", *args, "--batch-size", "4", "--measure-links", *QUICK, "--out", str(out)
        )
    assert result.exit_code == 2 and error_line(result) == (
        "tidgap: error: --measure-links: stage 0 forward of one sample (probing its output's "
        "shape) in layer '1' (NoEval): RuntimeError: no eval here"
    )
    assert not out.exists()


def test_one_stage_has_no_link_to_measure(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tidgap.profiling import links

    def measured(job: links.LinkJob) -> None:
        raise AssertionError("nothing to measure with one stage")

    monkeypatch.setattr(links, "measured_transfers", measured)
    document = profiled(tmp_path, *MLP, "--stages", "1", "--batch-size", "4", "--measure-links")
    assert document["links"] == []
    assert document["source"]["links"]["measured"] is True
    assert document["source"]["links"]["shapes"] == []


def test_a_failing_process_is_one_line_of_status_1_and_leaves_none(torch: Any) -> None:
    """A rank that cannot build its tensor (or one killed): a failure naming the rank and
    its error, status 1 (it was 2, bad input's), the logs kept, both processes gone."""
    import click

    from tidgap.profiling.links import LinkJob, measured_transfers

    job = LinkJob([[4]], ["no_such_dtype"], [1, 2], "cpu", timeout=120.0)
    before = set(children())
    with pytest.raises(click.ClickException) as caught:
        measured_transfers(job)
    assert set(children()) <= before and caught.value.exit_code == 1
    line = caught.value.format_message()
    assert line.startswith("--measure-links: rank "), line
    assert "no_such_dtype" in line and "\n" not in line
    folder = Path(line.rsplit("(the logs: ", 1)[1].rstrip(")"))
    assert (folder / "rank0.log").is_file() and (folder / "rank1.log").is_file()
    shutil.rmtree(folder)


def test_cuda_needs_two_gpus(torch: Any) -> None:
    """NCCL puts each rank on its own GPU: fewer than two is bad input before any start."""
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has 2 GPUs")
    from tidgap.profiling import models
    from tidgap.profiling.links import with_measured_links

    with pytest.raises(InputError, match="--measure-links: on CUDA needs 2 GPUs"):
        with_measured_links(
            {}, models.gpt(layers=1, hidden=8, heads=1, seq_len=4, vocab=10), torch.device("cuda")
        )
