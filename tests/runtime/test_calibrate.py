"""``tidgap calibrate``: a profiled problem's tables re-timed through the runtime's workers."""

from __future__ import annotations

import itertools
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import describe, run_cli, write_json
from tests.support.torchrun_env import tidgap_under_torchrun
from tidgap.model.errors import InputError
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem, load_problem
from tidgap.profiling.synth import synth_problem
from tidgap.runtime.calibrate import (
    calibrated,
    calibration_plans,
    calibration_sizes,
    table_sizes,
)

MODEL = ["--model", "tests.runtime.pipeline_models:MLP", "--input-shape", "6"]


def table_document() -> dict:
    """A 2-stage, batch-8 problem with tables, recording the MLP's split at layer 2."""
    document = synth_problem(0, 2, 8, 1, 0.5, "table", "tiny")
    document["source"] = {"split": {"boundaries": [2]}}
    return document


def test_the_plans_hold_every_table_size() -> None:
    """GPipe(m) where one holds the size, else a flush plan of it; sizes above the batch
    are left out."""
    problem = Problem.from_dict(table_document())
    plans = calibration_plans(problem, [1, 2, 4, 8])
    assert [label for label, _ in plans] == ["GPipe(1)", "GPipe(2)", "GPipe(4)", "GPipe(8)"]
    plans = calibration_plans(problem, [3, 5, 16])
    assert [label for label, _ in plans] == ["GPipe(2)", "GPipe(3)", "flush(5x1)"]
    held = {size for _, plan in plans for row in plan.forward + plan.backward for size in row}
    assert {3, 5} <= held
    assert plans[-1][1].forward == [[5, 3], [5, 3]] == plans[-1][1].backward


def test_each_plans_recomputing_twin_recomputes_on_every_stage() -> None:
    """The backward rows move one unit earlier, so no backward boundary is a forward one;
    a plan whose first chunk is one unit has no twin."""
    from tidgap.runtime.calibrate import recomputing_plans, recomputing_twin
    from tidgap.runtime.lowering import recomputes

    problem = Problem.from_dict(table_document())
    plans = calibration_plans(problem, [1, 2, 4, 8])
    twins = recomputing_plans(plans, problem.unit)
    assert [label for label, _ in twins] == [f"GPipe({m}) recomputing" for m in (1, 2, 4)]
    for (_, plan), (_, twin) in zip(plans, twins, strict=False):
        assert twin.forward == plan.forward and all(recomputes(twin))
    assert twins[1][1].backward == [[3, 4, 1], [3, 4, 1]]
    assert recomputing_twin(plans[-1][1], problem.unit) is None  # GPipe(8): chunks of 1
    assert recomputing_twin(Plan.of([[4, 4]], [[4, 4]]), 4) is None


def test_recomputing_ops_become_the_calibrations_recompute_tables() -> None:
    """The twins' forwards and backwards, each plus the stage's overhead, per size; a size
    no twin measured is the calibrated forward (forward plus backward) scaled by the
    nearest measured ratio; the problem loads with them."""
    document = table_document()
    problem = Problem.from_dict(document)
    sizes = document["stages"][0]["forward"]["table"]["sizes"]
    stages = [{"F": {size: [1.0] for size in sizes}, "B": {size: [2.0] for size in sizes}}] * 2
    links = [{"F": {4: [0.1]}, "B": {4: [0.1]}}]
    again = [{"F": {4: [0.75]}, "B": {3: [2.5], 4: [2.75]}, "T": {}}] * 2
    out = calibrated(document, problem, stages, links, ["r"], [0.25, 0.5], again)
    entry = out["source"]["calibration"]["recompute"][1]
    assert entry["forward"]["table"]["sizes"] == sizes
    assert entry["forward"]["table"]["times"] == pytest.approx([1.25] * len(sizes))  # 0.75 + 0.5
    assert entry["backward"]["table"]["sizes"] == sorted({*sizes, 3})
    want = {3: 3.0, 4: 3.25} | {size: 3.25 for size in sizes if size > 4}
    want |= {size: 3.0 for size in sizes if size < 3}
    table = entry["backward"]["table"]
    backward = dict(zip(table["sizes"], table["times"], strict=True))
    assert backward == pytest.approx(want)
    assert "recompute, per stage" in out["source"]["calibration"]["rule"]
    loaded = Problem.from_dict(out).recompute_times
    assert loaded is not None and loaded[0].forward(4) == pytest.approx(1.0)
    assert (
        "recompute"
        not in calibrated(document, problem, stages, links, ["r"])["source"]["calibration"]
    )


def test_measured_sizes_replace_the_tables_and_the_others_scale() -> None:
    """Stage tables: measured medians, unmeasured sizes scaled by the nearest measured
    ratio, non-decreasing; links: tables over the measured sizes, the unit and the cap."""
    document = table_document()
    problem = Problem.from_dict(document)
    sizes = document["stages"][0]["forward"]["table"]["sizes"]
    stage0 = problem.stages[0]
    stages = [
        {"F": {sizes[0]: [1.5, 1.4, 1.6]}, "B": {sizes[-1]: [2 * stage0.backward(sizes[-1])]}},
        {"F": {size: [1.0] for size in sizes}, "B": {size: [1.0] for size in sizes}},
    ]
    links = [{"F": {4: [0.5, 0.7, 0.6]}, "B": {2: [0.2]}}]
    document["source"]["timing"] = {"recompute": True}
    out = calibrated(document, problem, stages, links, ["GPipe(2)", "GPipe(4)"])
    assert out["source"]["timing"]["recompute"] is False
    forward = out["stages"][0]["forward"]["table"]
    ratio = 1.5 / stage0.forward(sizes[0])
    want = [1.5] + [stage0.forward(size) * ratio for size in sizes[1:]]
    assert forward["times"] == pytest.approx(want, rel=1e-3)
    backward = out["stages"][0]["backward"]["table"]["times"]
    assert backward == pytest.approx([2 * stage0.backward(size) for size in sizes], rel=1e-3)
    assert out["stages"][1]["forward"]["table"]["times"] == [1.0] * len(sizes)
    link = out["links"][0]["forward"]["table"]
    assert link["sizes"] == [1, 4, 8] and link["times"][1] == 0.6
    assert link["times"][0] == pytest.approx(
        problem.links[0].forward(1) * 0.6 / problem.links[0].forward(4), rel=1e-3
    )
    assert out["links"][0]["backward"]["table"]["sizes"] == [1, 2, 8]
    assert out["source"]["calibration"]["runs"] == ["GPipe(2)", "GPipe(4)"]
    assert document["stages"][1]["forward"] == table_document()["stages"][1]["forward"]  # a copy
    assert document["source"]["timing"]["recompute"] is True
    assert Problem.from_dict(out).links[0].forward(4) == pytest.approx(0.6)


def test_every_size_adds_each_multiple_of_the_unit_up_to_the_largest_microbatch() -> None:
    document = table_document()
    document["stages"][1]["max_microbatch"] = 6
    problem = Problem.from_dict(document)
    tables = table_sizes(document, "p.json")
    assert calibration_sizes(document, problem, "p.json", False) == tables == [1, 2, 4, 8]
    every = calibration_sizes(document, problem, "p.json", True)
    assert every == [1, 2, 3, 4, 5, 6, 8]
    held = {size for _, plan in calibration_plans(problem, every) for size in plan.forward[0]}
    assert set(every) <= held


def test_an_affine_problem_is_refused_naming_the_field() -> None:
    with pytest.raises(InputError) as caught:
        table_sizes(synth_problem(0, 2, 8), "p.json")
    assert str(caught.value).startswith("p.json: stages[0].forward: is not a table")


QUICK = ["--iterations", "2", "--warmup", "0", "--timeout", "60", "--split", "1"]


#: The calibration plans of :func:`table_document`, their 1F1B(m), and their recomputing
#: twins.
GPIPES = [f"GPipe({m})" for m in (1, 2, 4, 8)]
ALTERNATING = [f"1F1B({m})" for m in (2, 4, 8)]
TWINS = [f"GPipe({m}) recomputing" for m in (1, 2, 4)]


def assert_calibrated(out: Path, extras: bool) -> None:
    """``out`` holds the calibrated problem of :func:`table_document` measured twice over
    GPipe(1, 2, 4, 8) (and with ``extras`` their 1F1B(m) and recomputing twins) on the
    split at layer 1: every table re-timed, and the split recorded."""
    fitted = json.loads(out.read_text())
    before = table_document()
    assert fitted["source"]["calibration"]["runs"] == (GPIPES + (ALTERNATING + TWINS) * extras) * 2
    assert fitted["source"]["calibration"]["transport"] == "gloo"  # auto, on the CPU
    for was, now in zip(before["stages"], fitted["stages"], strict=True):
        for direction in ("forward", "backward"):
            assert now[direction]["table"]["sizes"] == was[direction]["table"]["sizes"]
            assert now[direction]["table"]["times"] != was[direction]["table"]["times"]
            times = now[direction]["table"]["times"]
            assert times == sorted(times) and times[0] > 0
    loaded = load_problem(out)
    assert (loaded.order_times is not None) == extras
    for times in loaded.order_times or []:
        for size in range(1, 9):
            assert times.forward_after_backward(size) > 0
            assert times.backward_after_forward(size) > 0
    again = loaded.recompute_times
    assert (again is not None) == extras
    for s, times in enumerate(again or []):
        for size in range(1, 9):
            assert times.forward(size) > 0 and times.backward(size) > 0
        assert fitted["source"]["calibration"]["recompute"][s]["backward"]["table"]["sizes"] == [
            1, 2, 3, 4, 7, 8  # the tables' and the twins' first chunks (8 - 1, 4 - 1)
        ]  # fmt: skip
    assert fitted["source"]["split"] == {
        "method": "given by tidgap calibrate --split",
        "boundaries": [1],
        "stages": {"0": ["0"], "1-4": ["1", "2", "3", "4"]},
    }
    assert [stage["name"] for stage in fitted["stages"]] == ["0", "1-4"]


def test_calibrate_end_to_end_writes_a_loadable_problem(tmp_path: Path) -> None:
    """Calibrated on another split than the profile's: the problem records the one its
    times were measured on, names the stages after it, and leaves out the profiled
    stages' bytes (they were kept, describing other stages)."""
    document = table_document()
    for stage, held in zip(document["stages"], (400, 300), strict=True):
        stage.update(activation_bytes=held, memory_limit=4000)
    document["source"]["memory"] = {"input_bytes_per_sample": [0, 48]}
    document["source"]["links"] = {"bytes_per_sample": [48], "rule": "affine"}
    problem = write_json(tmp_path / "problem.json", document)
    out = tmp_path / "calibrated.json"
    result = run_cli("calibrate", str(problem), *MODEL, *QUICK, "--rounds", "2", "--out", str(out))
    assert result.exit_code == 0, describe(result)
    # the profiled split's bytes described other stages: left out, saying so
    assert (
        "tidgap: warning: --split: activation_bytes, memory_limit, source.memory, "
        "source.links.bytes_per_sample left out" in result.stderr
    )
    fitted = json.loads(out.read_text())
    assert not any({"activation_bytes", "memory_limit"} & set(stage) for stage in fitted["stages"])
    assert "memory" not in fitted["source"] and fitted["source"]["links"] == {"rule": "affine"}
    assert "calibrated problem written to" in result.output
    assert "; chunks over gloo)" in result.output
    assert f"running {', '.join(GPIPES + ALTERNATING + TWINS)} in turn (round 2)" in result.stderr
    assert "recomputing F" in result.output
    # QUICK's 2 iterations after no warm-up: a cold first one stays in the medians
    assert "tidgap: warning: --warmup 0 with --iterations 2: the first timed" in result.stderr
    assert_calibrated(out, extras=True)


def test_calibrate_under_torchrun_runs_each_rank_and_rank_0_writes(tmp_path: Path) -> None:
    """Two processes under torchrun, each running its stage of both rounds (in turn, in
    the one process group); rank 0 alone reports and writes. Without the 1F1B(m) runs and
    the recomputing twins, the problem has no order or recomputing op times."""
    problem = write_json(tmp_path / "problem.json", table_document())
    out = tmp_path / "calibrated.json"
    args = ["calibrate", str(problem), *MODEL, *QUICK, "--rounds", "2", "--no-recompute"]
    args += ["--no-order"]
    args += ["--out", str(out)]
    (done,) = tidgap_under_torchrun(args, processes=2)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("calibrated problem written to") == 1
    assert done.stderr.count("in turn (2 rounds in the same processes)") == 1
    assert_calibrated(out, extras=False)


def test_calibrate_skips_the_recomputing_twins_of_a_problem_recording_batch_statistics(
    tmp_path: Path,
) -> None:
    """No search of it recomputes (``source.batch_statistics``), so no recomputing op times
    are measured for it: only GPipe(m), once."""
    document = table_document()
    document["source"]["batch_statistics"] = {"layers": ["1 (BatchNorm1d)"]}
    problem = write_json(tmp_path / "problem.json", document)
    out = tmp_path / "calibrated.json"
    args = [str(problem), *MODEL, *QUICK, "--no-order", "--out", str(out)]
    result = run_cli("calibrate", *args)
    assert result.exit_code == 0, describe(result)
    fitted = json.loads(out.read_text())
    assert fitted["source"]["calibration"]["runs"] == GPIPES
    assert "recompute" not in fitted["source"]["calibration"]
    assert fitted["source"]["batch_statistics"]["layers"] == ["1 (BatchNorm1d)"]


def test_calibrate_refuses_an_affine_problem_before_running(tmp_path: Path) -> None:
    document = synth_problem(0, 2, 8)
    document["source"] = {"split": {"boundaries": [2]}}
    problem = write_json(tmp_path / "problem.json", document)
    result = run_cli("calibrate", str(problem), *MODEL, "--out", str(tmp_path / "c.json"))
    assert result.exit_code == 2, describe(result)
    assert "table" in result.output and not (tmp_path / "c.json").exists()


def test_calibrate_refuses_another_model_than_the_profiled_one(tmp_path: Path) -> None:
    """Its times would be another model's, under the profiled model's name: refused
    before any worker starts (it wrote them, silently)."""
    document = table_document()
    document["source"]["model"] = {"name": "tests.runtime.pipeline_models:MLP", "input_shape": [6]}
    problem = write_json(tmp_path / "problem.json", document)
    out = tmp_path / "c.json"
    other = [*MODEL[:-1], "7"]  # --input-shape 7
    result = run_cli("calibrate", str(problem), *other, *QUICK, "--out", str(out))
    assert result.exit_code == 2, describe(result)
    assert result.stderr == (
        f"tidgap: error: --model: {problem} was profiled with input_shape [6], not input_shape "
        "[7] (source.model): calibrate times the profiled model\n"
    )
    assert not out.exists()


def test_calibrate_refuses_a_model_option_the_profile_did_not_have(tmp_path: Path) -> None:
    """A setting only one side has (a vocab the profile recorded and the command leaves
    out, or the reverse) is another model too: the workers failed on float inputs to an
    embedding (exit 1) or ran another model's times."""
    document = table_document()
    recorded = {"name": "tests.runtime.pipeline_models:MLP", "input_shape": [6], "vocab": 100}
    document["source"]["model"] = recorded
    problem = write_json(tmp_path / "problem.json", document)
    out = tmp_path / "c.json"
    result = run_cli("calibrate", str(problem), *MODEL, *QUICK, "--out", str(out))
    assert result.exit_code == 2, describe(result)
    assert result.stderr == (
        f"tidgap: error: --model: {problem} was profiled with vocab 100, not vocab unset "
        "(source.model): calibrate times the profiled model\n"
    )
    document["source"]["model"] = {k: v for k, v in recorded.items() if k != "vocab"}
    problem = write_json(tmp_path / "problem.json", document)
    result = run_cli("calibrate", str(problem), *MODEL, "--vocab", "10", *QUICK, "--out", str(out))
    assert result.exit_code == 2, describe(result)
    assert "was profiled with vocab unset, not vocab 10 (source.model)" in result.stderr
    assert not out.exists()


def test_a_failed_worker_is_named_as_calibrates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose model fails in its first real forward: the line says calibrate (it
    said run)."""
    monkeypatch.setenv("TIDGAP_TEST_RANK1", "blow")  # the workers inherit it
    problem = write_json(tmp_path / "problem.json", table_document())
    fused = ["--model", "tests.runtime.pipeline_models:FUSED", "--input-shape", "6"]
    result = run_cli("calibrate", str(problem), *fused, *QUICK, "--out", str(tmp_path / "c.json"))
    assert result.exit_code == 1, describe(result)
    line = result.stderr.splitlines()[-1]
    shutil.rmtree(line.rpartition("(the workers' logs: ")[2].rstrip(")"))
    assert line.startswith("tidgap: error: calibrate: GPipe(1), ") and "Fuse blew" in line
    assert not (tmp_path / "c.json").exists()


def test_calibrate_warns_of_stages_sharing_a_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its times would be of stages taking turns on one core (the first forward fails: the
    warning came before any run)."""
    from tidgap.cli import run_caveats

    monkeypatch.setattr(run_caveats, "usable_cores", lambda: 1)
    monkeypatch.setenv("TIDGAP_TEST_RANK1", "blow")
    problem = write_json(tmp_path / "problem.json", table_document())
    fused = ["--model", "tests.runtime.pipeline_models:FUSED", "--input-shape", "6"]
    result = run_cli("calibrate", str(problem), *fused, *QUICK, "--out", str(tmp_path / "c.json"))
    assert result.exit_code == 1, describe(result)
    shutil.rmtree(result.stderr.splitlines()[-1].rpartition("(the workers' logs: ")[2].rstrip(")"))
    assert "tidgap: warning: 2 stage processes of 1 thread share 1 usable core" in result.stderr


def test_calibrate_on_cuda_without_one_exits_2_before_running(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is usable here: calibrating on it is not bad input")
    problem = write_json(tmp_path / "problem.json", table_document())
    out = tmp_path / "c.json"
    result = run_cli("calibrate", str(problem), *MODEL, "--device", "cuda", "--out", str(out))
    assert result.exit_code == 2, describe(result)
    assert result.stderr.startswith("tidgap: error: --device: CUDA is not usable")
    assert result.stderr.count("\n") == 1 and not out.exists()


def records_of(timeline: Any) -> list[list[tuple]]:
    """A run that behaved exactly as ``timeline`` (the model's, in ms) says: per rank its
    records (seconds), computes from the stage steps, sends and receives from the links."""
    ranks: list[list[tuple]] = [[] for _ in timeline.stages]
    kinds = {"F": "forward", "B": "backward", "T": "tail"}
    for s, steps in enumerate(timeline.stages):
        for step in steps:
            if step.kind in kinds:
                lo, hi = (0, 0) if step.samples is None else (step.samples[0] - 1, step.samples[1])
                ranks[s].append((kinds[step.kind], step.microbatch, lo, hi, step.start / 1e3,
                                 step.end / 1e3))  # fmt: skip
    for link, steps in enumerate(timeline.links):
        for step in steps:
            sender, receiver = (link, link + 1) if step.kind == "F" else (link + 1, link)
            lo, hi = step.samples[0] - 1, step.samples[1]
            name = kinds[step.kind]
            ranks[sender].append((f"send_{name}", step.microbatch, lo, hi, step.start / 1e3,
                                  step.start / 1e3))  # fmt: skip
            ranks[receiver].append((f"recv_{name}", step.microbatch, lo, hi, step.start / 1e3,
                                    step.end / 1e3))  # fmt: skip
    return ranks


@pytest.mark.parametrize("shape", ["affine", "table"])
def test_replaying_a_run_that_behaved_as_the_model_gives_the_prediction(shape: str) -> None:
    """With the run's own op and transfer times, the model reproduces a run whose ops took
    exactly the model's times: replay checks the dependencies, not the op times."""
    from tidgap.runtime.replay import replays
    from tidgap.schedules.families import SCHEDULES, evaluate, plan_timeline

    document = synth_problem(3, 3, 12, 1, 0.5, shape, "replay")
    problem = Problem.from_dict(document)
    for plan in (SCHEDULES["1f1b"].baseline(problem, 4), SCHEDULES["gpipe"].baseline(problem, 3)):
        ranks = records_of(plan_timeline(problem, plan))
        results = [{"iterations": [rows]} for rows in ranks]
        want = evaluate(problem, plan).iteration_time
        found = replays(document, problem, plan, results)
        assert found.medians == pytest.approx(want, rel=1e-3)
        assert found.drawn == found.each[0]  # one iteration: every draw is it


def test_the_measured_optimizer_step_becomes_each_stages_tail() -> None:
    """A run whose steps took twice the problem's tails: the calibrated tails are the
    measured medians, and the replay counts them."""
    from tidgap.runtime.calibrate import measured_problem
    from tidgap.runtime.replay import replays
    from tidgap.schedules.families import SCHEDULES, evaluate, plan_timeline

    document = synth_problem(3, 3, 12, 1, 0.5, "table", "tails")
    problem = Problem.from_dict(document)
    plan = SCHEDULES["1f1b"].baseline(problem, 4)
    ranks = records_of(plan_timeline(problem, plan))
    slower = [
        [row if row[0] != "tail" else (*row[:5], row[4] + 2 * (row[5] - row[4])) for row in rows]
        for rows in ranks
    ]
    out = measured_problem(document, problem, [slower], ["1F1B(4)"])
    for stage, given in zip(out["stages"], problem.stages, strict=True):
        assert stage["tail"] == pytest.approx(2 * given.tail, rel=1e-9)
    assert "tail" in out["source"]["calibration"]["rule"]
    results = [{"iterations": [rows]} for rows in ranks]
    assert replays(document, problem, plan, results)[0] == pytest.approx(
        evaluate(problem, plan).iteration_time, rel=1e-3
    )


def varied_times(problem: Problem, seed: int) -> tuple[Any, Any]:
    """An ``OpTime`` and a ``LinkTime`` whose every op and transfer takes a random share
    (0.5-1.5) of the model's time."""
    draw, shares = random.Random(seed), {}

    def share(*key: Any) -> float:
        return shares.setdefault(key, draw.uniform(0.5, 1.5))

    def op_time(s: int, op: str, k: int, size: int) -> float:
        stage = problem.stages[s]
        return share(s, op, k) * (stage.forward(size) if op == "F" else stage.backward(size))

    def link_time(link: int, op: str, k: int, size: int) -> float:
        carry = problem.links[link]
        duration = carry.forward(size) if op == "F" else carry.backward(size)
        return share("link", link, op, k) * duration

    return op_time, link_time


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_each_iteration_replays_to_its_own_time_when_op_times_vary(schedule: str) -> None:
    """Two iterations whose ops and transfers each took a different random share (0.5-1.5)
    of the model's time: each replays to its own measured time exactly, the replay with
    the run's median op times to neither, and the drawn replay (seeded) between the model
    fed every op's faster time and the one fed every op's slower."""
    from tidgap.runtime.calibrate import measured_problem, stage_overheads
    from tidgap.runtime.replay import fed, own_times, replays
    from tidgap.runtime.report import unit_per_second
    from tidgap.schedules.families import SCHEDULES
    from tidgap.schedules.simulate import order_timeline

    document = synth_problem(7, 3, 12, 1, 0.5, "affine", "vary")
    problem = Problem.from_dict(document)
    plan = SCHEDULES[schedule].baseline(problem, 4)
    runs = []
    for seed in (1, 2):
        times = varied_times(problem, seed)
        timeline = order_timeline(
            problem, plan.forward, plan.backward, plan.stage_order(), "run", *times
        )
        runs.append((records_of(timeline), timeline.iteration_time))
    results = [{"iterations": [ranks[rank] for ranks, _ in runs]} for rank in range(3)]
    measured = [time for _, time in runs]
    median, each, drawn = replays(document, problem, plan, results)
    assert each == pytest.approx(measured)
    assert min(abs(median - time) for time in measured) > 1e-3 * max(measured)
    # every draw lies between the model fed each op's faster and each op's slower time
    iterations = list(zip(*(result["iterations"] for result in results), strict=True))
    scale = unit_per_second(problem.time_unit)
    overheads = stage_overheads(iterations, scale)
    own = [own_times(ranks, scale, overheads) for ranks in iterations]
    low, high = (
        [{key: pick(times[j][key] for times in own) for key in own[0][j]} for j in (0, 1)]
        for pick in (min, max)
    )
    replay = Problem.from_dict(measured_problem(document, problem, iterations, ["r"], overheads))
    order = plan.stage_order()
    assert fed(replay, plan, *low, order) < drawn < fed(replay, plan, *high, order)
    assert replays(document, problem, plan, results).drawn == drawn  # seeded
    assert replays(document, problem, plan, results, seed=1).drawn != drawn


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_a_gap_before_every_op_becomes_each_stages_overhead(schedule: str) -> None:
    """A run that behaved as the model of a problem whose ops each take ``gap`` ms longer,
    except that each op's record starts ``gap`` late (the runtime's own work before it):
    every stage's overhead is ``gap``, each op's calibrated time its record's plus ``gap``,
    and the replay is that slower problem's prediction (without the overhead it would be
    the faster one's)."""
    from tidgap.runtime.calibrate import dispatch_gaps, measured_problem
    from tidgap.runtime.replay import replays
    from tidgap.schedules.families import SCHEDULES, evaluate, plan_timeline

    gap = 0.25
    document = synth_problem(5, 3, 12, 1, 0.5, "affine", "gaps")
    slower = json.loads(json.dumps(document))
    for stage in slower["stages"]:
        for direction in ("forward", "backward"):
            stage[direction]["affine"]["base"] += gap
    problem, slow = Problem.from_dict(document), Problem.from_dict(slower)
    plan = SCHEDULES[schedule].baseline(problem, 4)
    ranks = [
        [row if row[0] not in ("forward", "backward") else (*row[:4], row[4] + gap / 1e3, row[5])
         for row in rows]
        for rows in records_of(plan_timeline(slow, plan))
    ]  # fmt: skip
    gaps = dispatch_gaps([ranks], 1e3)
    assert all(found and max(found) == pytest.approx(gap) for found in gaps)
    assert min(min(found) for found in gaps) == pytest.approx(gap)
    out = measured_problem(document, problem, [ranks], [schedule])
    assert out["source"]["calibration"]["overhead"] == pytest.approx([gap] * 3)
    results = [{"iterations": [rows]} for rows in ranks]
    replay = replays(document, problem, plan, results)[0]
    assert replay == pytest.approx(evaluate(slow, plan).iteration_time, rel=1e-4)
    assert replay > evaluate(problem, plan).iteration_time + gap


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_a_send_that_takes_time_is_its_ops_cost(schedule: str) -> None:
    """A run that behaved as the model of a problem whose sending ops (forwards but the last
    stage's, backwards but the first's) each take ``cost`` ms longer, that time spent in
    the send record after the op (the copy and ``isend`` on the stage's thread): each
    sending op's calibrated time is its record's plus its send's, no gap is left for the
    overhead, the links keep their times, and the replay is that slower problem's
    prediction (counting sends as gaps or as transfers would miss it)."""
    from tidgap.runtime.calibrate import dispatch_gaps, measured_problem
    from tidgap.runtime.replay import replays
    from tidgap.schedules.families import SCHEDULES, evaluate, plan_timeline

    cost = 0.25
    document = synth_problem(5, 3, 12, 1, 0.5, "affine", "sends")
    slower = json.loads(json.dumps(document))
    for s, stage in enumerate(slower["stages"]):
        for direction, sends in (("forward", s < 2), ("backward", s > 0)):
            stage[direction]["affine"]["base"] += cost * sends
    problem, slow = Problem.from_dict(document), Problem.from_dict(slower)
    plan = SCHEDULES[schedule].baseline(problem, 4)
    ranks = []
    for rows in records_of(plan_timeline(slow, plan)):
        posted = {(row[0][5:], row[1]): row[4] for row in rows if row[0].startswith("send_")}
        edited = []
        for row in rows:
            if row[0].startswith("send_"):
                row = (*row[:4], row[4] - cost / 1e3, row[5])
            elif (row[0], row[1]) in posted:
                assert row[5] == pytest.approx(posted[row[0], row[1]])
                row = (*row[:5], row[5] - cost / 1e3)
            edited.append(row)
        ranks.append(edited)
    assert max(max(found) for found in dispatch_gaps([ranks], 1e3)) < 1e-9
    out = measured_problem(document, problem, [ranks], [schedule])
    assert out["source"]["calibration"]["overhead"] == pytest.approx([0.0] * 3, abs=1e-9)
    fitted = Problem.from_dict(out)
    for given, measured in zip(slow.stages, fitted.stages, strict=True):
        assert measured.forward(3) == pytest.approx(given.forward(3), rel=1e-4)
        assert measured.backward(3) == pytest.approx(given.backward(3), rel=1e-4)
    assert fitted.links[0].forward(3) == pytest.approx(slow.links[0].forward(3), rel=1e-4)
    results = [{"iterations": [rows]} for rows in ranks]
    median, each, _ = replays(document, problem, plan, results)
    want = evaluate(slow, plan).iteration_time
    assert median == pytest.approx(want, rel=1e-4) and each == pytest.approx([want], rel=1e-4)


def test_op_contexts_name_forwards_after_backwards_and_the_last_stages_own_backwards() -> None:
    """1F1B(4) on 3 stages: each forward after a backward; on the last stage every
    backward (right after its own forward); GPipe(4): none, GPipe(1): the last stage's
    backward."""
    from tidgap.runtime.calibrate import (
        AFTER_BACKWARD,
        AFTER_OWN_FORWARD,
        op_contexts,
        op_durations,
    )
    from tidgap.schedules.families import SCHEDULES, plan_timeline

    problem = Problem.from_dict(synth_problem(3, 3, 12, 1, 0.5, "affine", "contexts"))
    ranks = records_of(plan_timeline(problem, SCHEDULES["1f1b"].baseline(problem, 4)))
    found = [op_contexts(rows, s == 2) for s, rows in enumerate(ranks)]
    assert found[0] == {("forward", 3): AFTER_BACKWARD}  # F F F B F B B B
    assert found[1] == {("forward", 2): AFTER_BACKWARD, ("forward", 3): AFTER_BACKWARD}
    assert found[2] == {("forward", k): AFTER_BACKWARD for k in (1, 2, 3)} | {
        ("backward", k): AFTER_OWN_FORWARD for k in range(4)
    }
    gpipe = records_of(plan_timeline(problem, SCHEDULES["gpipe"].baseline(problem, 4)))
    assert all(op_contexts(rows, s == 2) == {} for s, rows in enumerate(gpipe))
    one = records_of(plan_timeline(problem, SCHEDULES["gpipe"].baseline(problem, 1)))
    assert op_contexts(one[2], True) == {("backward", 0): AFTER_OWN_FORWARD}
    assert op_contexts(one[1], False) == {}
    # 1F1B(5) of 12 samples: a forward after a backward of another size is left out
    five = SCHEDULES["1f1b"].baseline(problem, 5)
    rows = records_of(plan_timeline(problem, five))[2]
    named = op_contexts(rows, True)
    computes = sorted((r for r in rows if r[0] in ("forward", "backward")), key=lambda r: r[4])
    unequal = 0
    for previous, row in itertools.pairwise(computes):
        if (previous[0], row[0]) == ("backward", "forward"):
            same = row[3] - row[2] == previous[3] - previous[2]
            assert named[("forward", row[1])] == (AFTER_BACKWARD if same else None)
            unequal += not same
    assert unequal
    timed = op_durations([records_of(plan_timeline(problem, five))], 1.0, contexts=True)[2]
    ops = sum(
        len(times) for kind, sizes in timed.items() if kind != "T" for times in sizes.values()
    )
    assert ops == len(computes) - unequal  # timed in neither order: left out of every table


def test_ops_timed_by_the_op_before_them_are_calibrated_and_priced() -> None:
    """A GPipe(4) and a 1F1B(4) iteration of a problem whose forwards after a backward and
    whose last stage's backwards after their own forward take ``share`` of the model's
    time: those ops become ``source.calibration.order`` (``share`` of the model's time),
    the stages' tables keep the model's, and the calibrated problem prices 1F1B(4) at its
    measured time where the model alone prices it at the slower GPipe-order time."""
    from tidgap.runtime.calibrate import measured_problem
    from tidgap.runtime.pricing import run_evaluation
    from tidgap.schedules.families import SCHEDULES, evaluate, plan_timeline
    from tidgap.schedules.simulate import order_timeline

    share = 0.8
    document = synth_problem(3, 3, 12, 1, 0.5, "table", "order")
    problem = Problem.from_dict(document)
    gpipe = SCHEDULES["gpipe"].baseline(problem, 4)
    plan = SCHEDULES["1f1b"].baseline(problem, 4)
    letters = plan.stage_order().stages

    def op_time(s: int, op: str, k: int, size: int) -> float:
        stage = problem.stages[s]
        index = [i for i, letter in enumerate(letters[s]) if letter == op][k - 1]
        before = letters[s][index - 1] if index else None
        faster = (op, before) == ("F", "B") or (op, before, s) == ("B", "F", 2)
        return (share if faster else 1.0) * (
            stage.forward(size) if op == "F" else stage.backward(size)
        )

    ran = order_timeline(problem, plan.forward, plan.backward, plan.stage_order(), "run", op_time)
    iterations = [records_of(plan_timeline(problem, gpipe)), records_of(ran)]
    out = measured_problem(document, problem, iterations, ["GPipe(4)", "1F1B(4)"], order=True)
    fitted = Problem.from_dict(out)
    assert fitted.order_times is not None
    for given, stage, times in zip(problem.stages, fitted.stages, fitted.order_times, strict=True):
        assert stage.forward(3) == pytest.approx(given.forward(3), rel=1e-4)
        assert stage.backward(3) == pytest.approx(given.backward(3), rel=1e-4)
        assert times.forward_after_backward(3) == pytest.approx(share * given.forward(3), rel=1e-4)
    last = fitted.order_times[2].backward_after_forward(3)
    assert last == pytest.approx(share * problem.stages[2].backward(3), rel=1e-4)
    assert run_evaluation(fitted, plan).iteration_time == pytest.approx(
        ran.iteration_time, rel=1e-4
    )
    assert evaluate(fitted, plan).iteration_time > ran.iteration_time * 1.01
    assert run_evaluation(fitted, gpipe) == evaluate(fitted, gpipe)  # GPipe's order: as modelled


def test_a_stage_whose_every_backward_followed_its_own_forward_still_gets_its_table() -> None:
    """GPipe(1) alone (a batch of one microbatch): the last stage's one backward follows its
    own forward; the stage's backward table is timed by it, and by the order entry too."""
    from tidgap.runtime.calibrate import measured_problem
    from tidgap.schedules.families import SCHEDULES, plan_timeline

    document = synth_problem(3, 2, 4, 1, 0.5, "table", "one")
    problem = Problem.from_dict(document)
    ranks = records_of(plan_timeline(problem, SCHEDULES["gpipe"].baseline(problem, 1)))
    fitted = Problem.from_dict(measured_problem(document, problem, [ranks], ["x"], order=True))
    want = problem.stages[1].backward(4)
    assert fitted.stages[1].backward(4) == pytest.approx(want, rel=1e-4)
    assert fitted.order_times is not None
    assert fitted.order_times[1].backward_after_forward(4) == pytest.approx(want, rel=1e-4)


def test_calibrate_prints_names_escaped(tmp_path: Path) -> None:
    """A stage name's control characters reached the terminal raw (every other command
    escapes them)."""
    document = table_document()
    document["stages"][0]["name"] = "evil\nname\u202e"
    problem = write_json(tmp_path / "problem.json", document)
    out = tmp_path / "calibrated.json"
    quick = [*QUICK[:-2], "--no-order", "--no-recompute"]
    result = run_cli("calibrate", str(problem), *MODEL, *quick, "--out", str(out))
    assert result.exit_code == 0, describe(result)
    assert "  evil\\nname\\u202e: " in result.stdout
    assert "\u202e" not in result.stdout
