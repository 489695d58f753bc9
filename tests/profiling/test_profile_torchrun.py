"""``tidgap profile`` under torchrun: each rank measures its own stage and, with
``--measure-links``, its links to its neighbours; rank 0 alone writes the problem. Real
torchrun agents, one (``--standalone``) or two standing for two machines."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.profiling.test_profile import MLP, error_line, run
from tests.support.torchrun_env import ROOT, as_torchrun, tidgap_under_torchrun
from tidgap.model.problem import Problem

pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")

#: The MLP's six layers at sizes 2, 4, 8, one thread per process.
SHAPE = [*MLP, "--batch-size", "8", "--unit", "2", "--threads", "1", "-q"]
QUICK = ["--repeats", "2", "--warmup", "0"]


def assert_profiled_per_rank(document: dict[str, Any], stages: int) -> None:
    """A problem of ``stages`` stages, each measured by its own rank (``source.ranks``),
    every link a measured table per direction between its two ranks."""
    problem = Problem.from_dict(document)
    assert problem.num_stages == stages
    source = document["source"]
    assert len(source["ranks"]) == stages
    assert all(rank["threads"] == 1 for rank in source["ranks"])
    assert "under torchrun" in source["description"]
    assert len(document["links"]) == stages - 1
    for link in document["links"]:
        for direction in ("forward", "backward"):
            times = link[direction]["table"]["times"]
            assert len(times) == 3 and all(t > 0 for t in times), times
    assert "between the ranks of the link's two stages" in source["links"]["rule"]
    assert source["links"]["measured"] is True
    # what a recomputing stage holds, each stage's from its own rank: the first receives
    # nothing and cuts the model's input, the others receive what the one before sends
    memory = source["memory"]
    assert memory["input_bytes_per_sample"][0] == 0 < memory["task_bytes_per_sample"][0]
    assert memory["input_bytes_per_sample"][1:] == source["links"]["bytes_per_sample"]
    assert all(len(memory[key]) == stages for key in memory if key.endswith("_per_sample"))


def test_each_rank_profiles_its_stage_and_rank_0_writes_the_problem() -> None:
    """Three processes of one agent: the split balanced on rank 0 and shared, each stage
    timed by its rank (in turns on this machine), both links measured (even, then odd);
    stdout is rank 0's one JSON document."""
    args = ["profile", *SHAPE, *QUICK, "--stages", "3", "--measure-links", "--json"]
    (done,) = tidgap_under_torchrun(args, processes=3)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert_profiled_per_rank(document, 3)
    assert document["source"]["split"]["method"].startswith("balanced")
    assert len(document["source"]["split"]["stages"]) == 3


def test_two_agents_as_two_machines_profile_then_run(tmp_path: Path) -> None:
    """Two agents (``--nnodes 2``, one process each) stand for two machines: each profiles
    its stage and measures the link between them; then a plan for that problem runs on
    the same two agents, its gradients checked."""
    problem = tmp_path / "problem.json"
    args = ["profile", *SHAPE, *QUICK, "--stages", "2", "--split", "3", "--measure-links"]
    agents = tidgap_under_torchrun([*args, "--out", str(problem)], processes=1, nodes=2)
    assert [agent.returncode for agent in agents] == [0, 0], [a.stderr for a in agents]
    assert sum("problem written to" in agent.stdout for agent in agents) == 1
    document = json.loads(problem.read_text(encoding="utf-8"))
    assert_profiled_per_rank(document, 2)
    assert document["source"]["split"]["boundaries"] == [3]
    plan = tmp_path / "plan.json"
    halves = [[2, 6], [4, 4]]
    plan.write_text(json.dumps({"format": "tidgap.plan/1", "forward": halves, "backward": halves}))
    model = ["--model", MLP[0], *MLP[1:]]
    options = ["--iterations", "1", "--warmup", "0", "--check-gradients", "--json"]
    agents = tidgap_under_torchrun(
        ["run", str(problem), str(plan), *model, *options], processes=1, nodes=2
    )
    assert [agent.returncode for agent in agents] == [0, 0], [a.stderr for a in agents]
    (report,) = [agent.stdout for agent in agents if agent.stdout]
    assert json.loads(report)["run"]["max_gradient_relative_difference"] < 1e-4


def test_a_process_per_stage_is_required(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun's environment for 3 processes and 2 stages: one line, exit 2, before any
    process group forms, nothing written."""
    as_torchrun(monkeypatch, "1", "3")
    out = tmp_path / "never.json"
    result = run("profile", *SHAPE, "--stages", "2", "--out", str(out))
    line = error_line(result)
    assert line.endswith(
        "--stages: 2 stages, and torchrun started 3 processes (WORLD_SIZE): one per stage"
    ), line
    assert not out.exists()


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
def test_neighbours_agree_on_the_order_of_the_links_they_share(stages: int) -> None:
    """Every link belongs to its two stages' ranks, each lists it at the same phase (even
    links first), so no rank waits in one link for a peer busy in another; the assembled
    tables take each direction from its sender."""
    from tidgap.profiling.ranks import assembled_transfers, neighbour_pairs

    pairs = [neighbour_pairs(rank, stages) for rank in range(stages)]
    for link in range(stages - 1):
        assert (link, link, link + 1) in pairs[link] and (link, link, link + 1) in pairs[link + 1]
    for rank_pairs in pairs:
        phases = [link % 2 for link, _, _ in rank_pairs]
        assert phases == sorted(phases) and len(set(phases)) == len(phases)
    # rank r's k-th pair's transfers stand for "r, link": where each direction comes from
    each = [
        [[[float(f"{rank}.{link}")]] for link, _, _ in rank_pairs]
        for rank, rank_pairs in enumerate(pairs)
    ]
    forward, backward = assembled_transfers(each, stages)
    assert forward == [[[float(f"{s}.{s}")]] for s in range(stages - 1)]
    assert backward == [[[float(f"{s + 1}.{s}")]] for s in range(stages - 1)]


#: A model whose import hangs on rank 1 with ``TIDGAP_TEST_RANK1=hang``
#: (:mod:`tests.runtime.pipeline_models`; ``RANK`` is read at import).
HANGING = ["tests.runtime.pipeline_models:MLP", "--input-shape", "6", "--batch-size", "4", "-q"]


def test_a_rank_that_hangs_ends_the_profile_at_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 hangs importing the model, rank 0 waits for it in the group: each rank's
    ``--timeout`` ends it, torchrun stops the other, and nothing is written."""
    monkeypatch.setenv("TIDGAP_TEST_RANK1", "hang")
    out = tmp_path / "problem.json"
    started = time.monotonic()
    args = ["profile", *HANGING, "--stages", "2", "--timeout", "4", "--out", str(out)]
    (done,) = tidgap_under_torchrun(args, processes=2, timeout=90)
    assert done.returncode != 0 and time.monotonic() - started < 60
    assert "timed out; exiting" in done.stderr, done.stderr
    assert not out.exists()


def test_one_process_that_hangs_ends_at_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside torchrun the limit holds too: exit 124, one line, nothing written."""
    monkeypatch.setenv("TIDGAP_TEST_RANK1", "hang")
    monkeypatch.setenv("RANK", "1")  # alone: torchrun sets more, so this is no rank
    out = tmp_path / "problem.json"
    started = time.monotonic()
    args = ["profile", *HANGING, "--stages", "2", "--timeout", "1", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "tidgap", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 124 and time.monotonic() - started < 30
    assert done.stderr.strip().splitlines()[-1] == "tidgap profile timed out; exiting"
    assert not out.exists() and done.stdout == ""
