"""``tidgap search`` of both families (issue 11): the trade-off lines, ``--json`` and the
files it writes (plans ``tidgap evaluate`` accepts), ``--memory-limit``, and bad input
refused in one line before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_helpers import case_named, describe, json_output, run_cli, write_json
from tidgap.optimize.results import TRADEOFF_FIGURES
from tidgap.outputs import files as output_files

PROBLEM = "example:tiny-2"
#: A short search: few generations, a small population.
SHORT = ("--generations", "6", "--population", "32")
REL = 1e-9
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _search(*args: str, problem: str = PROBLEM) -> dict:
    """The ``--json`` document of a short search of ``problem``."""
    return json_output(run_cli("search", problem, *SHORT, *args, "--json"))


def _within(peaks: list[float], limits: list[float]) -> bool:
    return all(p <= h for p, h in zip(peaks, limits, strict=True))


def test_text_shows_the_tradeoff_and_marks_the_limit_in_force() -> None:
    result = run_cli("search", PROBLEM, *SHORT)
    assert result.exit_code == 0, describe(result)
    lines = result.stdout.splitlines()
    assert any(line.strip().startswith("time-memory trade-off") for line in lines)
    within = [line.strip() for line in lines if line.strip().startswith("within ")]
    assert within[0].startswith("within 1F1B ") and within[-1].startswith("within unlimited")
    marked = [line for line in within if line.endswith("<- limit in force")]
    assert marked == [within[-1]]
    assert all("x 1F1B" in line and "x GPipe" in line and " held " in line for line in within)


def test_text_marks_the_1f1b_level_under_memory_limit_1f1b() -> None:
    result = run_cli("search", PROBLEM, *SHORT, "--memory-limit", "1f1b")
    assert result.exit_code == 0, describe(result)
    marked = [line.strip() for line in result.stdout.splitlines() if "<- limit in force" in line]
    assert len(marked) == 1 and marked[0].startswith("within 1F1B ")


def test_json_has_the_order_and_the_tradeoff_rows() -> None:
    document = _search()
    assert document["order"] and document["search"]["schedule"] == "windowed"
    one_f_one_b = document["baselines"]["1f1b"]["iteration_time"]
    rows = document["search"]["tradeoff"]
    assert [row["limit"] for row in rows][-1] == "unlimited"
    assert document["search"]["memory_limit"] in [row["limit"] for row in rows]
    for row in rows:
        time = row["iteration_time"]
        assert row["speedup_over_1f1b"] == pytest.approx(one_f_one_b / time, rel=REL)
        assert _within(row["peak_held"], row["limit_held"])
    times = [row["iteration_time"] for row in rows]
    assert document["predicted"]["iteration_time"] == times[-1] == min(times)


def test_json_without_pictures_simulates_no_timeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's timeline serves the pictures and the text summary only (at 512 stages
    its simulation takes 2 s)."""

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a timeline was simulated")

    monkeypatch.setattr(output_files, "plan_timeline", refused)
    assert _search()["search"]["generations"] == 6


def test_a_level_without_a_plan_has_every_key_null() -> None:
    """Two microbatches at most: no plan within 1F1B(11)'s memory; the row kept only
    ``iteration_time`` (``row["peak_held"]`` raised KeyError)."""
    args = ("example:gpt1-14", "--generations", "3", "--max-microbatches", "2")
    result = run_cli("search", *args)
    rows = json.loads(run_cli("search", *args, "--json").stdout)["search"]["tradeoff"]
    empty = [row for row in rows if row["iteration_time"] is None]
    assert empty and "no plan" in result.stdout
    for row in empty:
        assert set(row) == {"limit", "limit_held", *TRADEOFF_FIGURES}
        assert [row[key] for key in TRADEOFF_FIGURES] == [None] * len(TRADEOFF_FIGURES)


def test_pricing_is_in_the_json_and_the_headline() -> None:
    assert _search()["search"]["pricing"] == "model"  # a built-in example: not measured
    assert _search("--pricing", "run")["search"]["pricing"] == "run"
    text = run_cli("search", PROBLEM, *SHORT, "--pricing", "run").stdout
    assert "priced as run" in text.splitlines()[1]


def test_flush_json_has_no_order() -> None:
    document = _search("--schedule", "flush")
    assert "order" not in document and document["search"]["schedule"] == "flush"


@pytest.mark.parametrize("schedule", ["windowed", "flush"])
def test_out_gantt_and_trace_are_written_and_evaluate_accepts_the_plan(
    tmp_path: Path, schedule: str
) -> None:
    out, gantt, trace = tmp_path / "plan.json", tmp_path / "x.png", tmp_path / "x.json"
    args = ("--schedule", schedule, "--out", str(out), "--gantt", str(gantt))
    result = run_cli("search", PROBLEM, *SHORT, *args, "--trace", str(trace))
    assert result.exit_code == 0, describe(result)
    written = json.loads(out.read_text(encoding="utf-8"))
    assert ("order" in written) == (schedule == "windowed")
    assert gantt.read_bytes().startswith(PNG_MAGIC)
    assert json.loads(trace.read_text(encoding="utf-8"))
    evaluated = json_output(run_cli("evaluate", PROBLEM, str(out), "--json"))
    assert evaluated == written["predicted"]


def test_memory_limit_1f1b_writes_a_plan_within_what_the_best_1f1b_holds(
    tmp_path: Path,
) -> None:
    problem = "example:vgg16"  # its fastest plan holds more than the best 1F1B
    unlimited = _search(problem=problem)
    out = tmp_path / "plan.json"
    result = run_cli("search", problem, *SHORT, "--memory-limit", "1f1b", "--out", str(out))
    assert result.exit_code == 0, describe(result)
    written = json.loads(out.read_text(encoding="utf-8"))
    m = str(written["baselines"]["1f1b"]["microbatches"])
    held = json_output(run_cli("evaluate", problem, "--schedule", "1f1b", "-m", m, "--json"))
    held = held["peak_held"]
    assert not _within(unlimited["predicted"]["peak_held"], held)  # the limit binds
    evaluated = json_output(run_cli("evaluate", problem, str(out), "--json"))
    assert evaluated == written["predicted"]
    assert _within(evaluated["peak_held"], held)
    assert written["search"]["memory_limit"] == "1F1B"
    assert written["search"]["memory_limit_held"] == held


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--memory-limit", "lots"), "--memory-limit"),
        (("--memory-limit", "0"), "--memory-limit"),
        (("--memory-limit", "8GB"), "--memory-limit"),  # tiny-2 gives no activation_bytes
        (("--schedule", "windowed", "--same-partition"), "--same-partition"),
        (("--schedule", "flush", "--memory-limit", "1f1b"), "--memory-limit"),
        (("--schedule", "flush", "--pricing", "run"), "--pricing"),
        (("--same-partition", "--pricing", "run"), "--pricing"),
        (("--pricing", "cheap"), "--pricing"),
        (("--checkpoint-every", "1"), "--checkpoint-every"),  # it was ignored: saved nowhere
    ],
    ids=[
        "unknown-word",
        "zero",
        "bytes-without-activation-bytes",
        "windowed-same",
        "flush-1f1b",
        "flush-run-pricing",
        "same-partition-run-pricing",
        "unknown-pricing",
        "checkpoint-every-alone",
    ],
)
def test_bad_input_exits_2_in_one_line_and_writes_nothing(
    tmp_path: Path, args: tuple[str, ...], named: str
) -> None:
    out = tmp_path / "plan.json"
    result = run_cli("search", PROBLEM, *SHORT, *args, "--out", str(out))
    assert result.exit_code == 2, describe(result)
    assert result.stderr.count("\n") == 1 and named in result.stderr, result.stderr
    assert result.stdout == ""
    assert not out.exists()


def test_stage_limits_no_plan_meets_are_blamed_on_the_stages(tmp_path: Path) -> None:
    """No --memory-limit given: the error names the file and the stage's memory_limit, not
    the option."""
    made = run_cli("synth", "--stages", "2", "--batch-size", "8", "--out", str(tmp_path / "p.json"))
    assert made.exit_code == 0, describe(made)
    document = json.loads((tmp_path / "p.json").read_text(encoding="utf-8"))
    for stage in document["stages"]:
        stage["activation_bytes"], stage["memory_limit"] = 1000, 500  # not one sample
    (tmp_path / "p.json").write_text(json.dumps(document), encoding="utf-8")
    result = run_cli("search", str(tmp_path / "p.json"), "--generations", "1", "--population", "8")
    assert result.exit_code == 2, describe(result)
    assert result.stderr.startswith(
        f"tidgap: error: {tmp_path / 'p.json'}: stages[0].memory_limit: a limit of 500 bytes "
        "holds 0 samples"
    ), describe(result)


def test_a_run_priced_searchs_trace_and_bubble_are_its_run_priced_times(tmp_path: Path) -> None:
    """Under --pricing run the summary gives tidgap run's times; the trace's timelines (the
    plan's and the baselines') and the bubble line are of the same run (they were the
    model's: 193.4 against the summary's 183.2 ms on a calibrated problem)."""
    from tests.support.calibrations import order_tables
    from tidgap import load_problem
    from tidgap.runtime.pricing import run_evaluation
    from tidgap.schedules.families import SCHEDULES, baseline_label

    document = case_named("med7_1")["problem"]  # ops after others timed apart: run prices
    document["source"] = {"calibration": {"order": order_tables(document["stages"])}}
    problem_file = write_json(tmp_path / "calibrated.json", document)
    trace = tmp_path / "run.trace.json"
    args = (str(problem_file), "--pricing", "run", *SHORT, "--trace", str(trace))
    result = run_cli("search", *args, "--json")
    assert result.exit_code == 0, describe(result)
    plan = json.loads(result.stdout)
    times = json.loads(trace.read_text())["otherData"]["iteration_times"]
    assert times["tidgap"] == pytest.approx(plan["search"]["predicted_run"]["iteration_time"])
    assert times["tidgap"] != pytest.approx(plan["predicted"]["iteration_time"])
    problem = load_problem(str(problem_file))
    for name in ("gpipe", "1f1b"):
        m = plan["baselines"][name]["microbatches"]
        label = baseline_label(name, m)
        run_time = run_evaluation(problem, SCHEDULES[name].baseline(problem, m)).iteration_time
        assert times[label] == pytest.approx(run_time), label


def test_the_table_marks_the_rows_over_the_memory_limit_in_force() -> None:
    """Only the stages' own limits were marked; the summary line alone said that a best
    baseline was over --memory-limit."""
    result = run_cli(
        "search",
        "example:gpt1-14",
        "--memory-limit",
        "1f1b",
        "--generations",
        "1",
        "--population",
        "16",
    )
    assert result.exit_code == 0, describe(result)
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[-6:]}
    assert rows["gpipe"].endswith("32 over (stages 0-3)")
    assert "over" not in rows["1f1b"] and "over" not in rows["tidgap"]


def test_a_level_without_a_plan_has_every_key_in_bytes_too(tmp_path: Path) -> None:
    """With activation_bytes the rows with a plan have peak_memory; those without left it
    out."""
    document = json.loads(
        (Path(__file__).parents[2] / "tidgap/data/examples/tiny-2.json").read_text()
    )
    for stage in document["stages"]:
        stage["activation_bytes"] = 1000
    problem = str(write_json(tmp_path / "bytes.json", document))
    rows = _search("--max-microbatches", "1", problem=problem)["search"]["tradeoff"]
    assert any(row["iteration_time"] is None for row in rows)
    assert any(row["iteration_time"] is not None for row in rows)
    for row in rows:
        assert set(row) == {"limit", "limit_held", *TRADEOFF_FIGURES, "peak_memory"}
        assert (row["peak_memory"] is None) == (row["iteration_time"] is None)


def test_a_limit_just_below_a_sample_is_shown_to_the_byte(tmp_path: Path) -> None:
    """It read 'a limit of 1 MB holds 0 samples of 1e+06 bytes'."""
    document = json.loads(
        (Path(__file__).parents[2] / "tidgap/data/examples/tiny-2.json").read_text()
    )
    for stage in document["stages"]:
        stage["activation_bytes"] = 1000000
    problem = str(write_json(tmp_path / "p.json", document))
    result = run_cli("search", problem, "--memory-limit", "999999", "--generations", "1")
    assert result.exit_code == 2, describe(result)
    assert result.stderr.startswith(
        "tidgap: error: --memory-limit: a limit of 999,999 bytes holds 0 samples of 1,000,000 "
        "bytes on stage 0;"
    )
