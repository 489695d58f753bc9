"""The ``tidgap`` command line on valid input: every command, checked against the golden values.

``docs/formats.md`` (Command line) is the contract: ``evaluate --json`` prints one JSON
object, ``--schedule`` evaluates a baseline, ``compare`` sets a plan against the best
baselines, ``example:NAME`` works wherever a PROBLEM is taken.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Any

import pytest

import tidgap
from tests.support.cli_helpers import (
    Case,
    case_named,
    case_names,
    describe,
    golden_cases,
    json_output,
    plan_document,
    run_cli,
    write_json,
)
from tidgap import Problem, evaluate
from tidgap.cli import cli
from tidgap.model.examples import example_names
from tidgap.optimize.heuristics import HEURISTICS

REL = 1e-9
SCHEDULES = ("gpipe", "1f1b", "pipedream")
EVALUATION_KEYS = ("iteration_time", "forward_end", "forward_ends", "backward_ends", "peak_held")
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _plan_params() -> list[Any]:
    """(case name, plan index) for every golden plan."""
    return [
        pytest.param(case["problem"]["name"], i, id=f"{case['problem']['name']}-plan{i}")
        for case in golden_cases()
        for i in range(len(case["plans"]))
    ]


def _schedule_params() -> list[Any]:
    """(case, schedule, m) for the first, last and best feasible ``m`` of every case."""
    params = []
    for case in golden_cases():
        name = case["problem"]["name"]
        counts = sorted(int(m) for m in case["baselines"])
        for schedule in SCHEDULES:
            best = case["best_baselines"][schedule]["microbatches"]
            for m in sorted({counts[0], best, counts[-1]}):
                params.append(pytest.param(name, schedule, m, id=f"{name}-{schedule}-{m}"))
    return params


def _numbers(text: str) -> list[float]:
    """Every number written in ``text``."""
    return [float(match) for match in NUMBER.findall(text)]


def _mentions_value(text: str, value: float, rel: float = 1e-5) -> bool:
    """Whether ``text`` shows ``value`` to about six significant digits."""
    return any(n == pytest.approx(value, rel=rel, abs=1e-4) for n in _numbers(text))


def _files(tmp_path: Path, case: Case, index: int = 0, **extra: Any) -> tuple[str, str]:
    """Write ``case``'s problem and plan ``index`` to ``tmp_path``; return their paths."""
    problem = write_json(tmp_path / "problem.json", case["problem"])
    plan = write_json(tmp_path / "plan.json", plan_document(case, index, **extra))
    return str(problem), str(plan)


def _assert_evaluation(document: Any, expected: dict[str, Any]) -> None:
    """``document`` is an ``evaluate --json`` object matching the golden ``expected``."""
    assert isinstance(document, dict)
    assert set(EVALUATION_KEYS) <= set(document)
    for key in EVALUATION_KEYS:
        assert document[key] == pytest.approx(expected[key], rel=REL), key


# --- evaluate PROBLEM PLAN -------------------------------------------------------------------


@pytest.mark.parametrize(("name", "index"), _plan_params())
def test_evaluate_json_matches_golden(tmp_path: Path, name: str, index: int) -> None:
    """``evaluate PROBLEM PLAN --json`` prints one object with the golden evaluation."""
    case = case_named(name)
    problem, plan = _files(tmp_path, case, index)
    result = run_cli("evaluate", problem, plan, "--json")
    document = json_output(result)
    assert result.stdout.strip().count("\n") == 0, "expected exactly one line of JSON"
    assert len(document["forward_ends"]) == len(case["problem"]["stages"])
    assert len(document["backward_ends"]) == len(case["problem"]["stages"])
    _assert_evaluation(document, case["plans"][index]["expected"])
    assert result.stderr == ""


@pytest.mark.parametrize("name", case_names())
def test_evaluate_text_shows_the_times(tmp_path: Path, name: str) -> None:
    """Without ``--json``, the text names the problem and shows the golden times."""
    case = case_named(name)
    problem, plan = _files(tmp_path, case)
    result = run_cli("evaluate", problem, plan)
    assert result.exit_code == 0, describe(result)
    expected = case["plans"][0]["expected"]
    assert name in result.stdout
    assert _mentions_value(result.stdout, expected["iteration_time"])
    assert _mentions_value(result.stdout, expected["forward_end"])
    for value in expected["backward_ends"]:
        assert _mentions_value(result.stdout, value), value
    assert result.stderr == ""


def test_evaluate_accepts_search_output_keys(tmp_path: Path) -> None:
    """``predicted``, ``baselines`` and ``search`` (written by ``tidgap search``) are ignored."""
    case = case_named("bwdcaps7")
    extra = {
        "problem": "bwdcaps7",
        "predicted": {"iteration_time": 1.0},
        "baselines": {"gpipe": {"microbatches": 4, "iteration_time": 2.0}},
        "search": {"backend": "cpu", "seed": 1, "generations": 3},
    }
    problem, plan = _files(tmp_path, case, **extra)
    result = run_cli("evaluate", problem, plan, "--json")
    _assert_evaluation(json_output(result), case["plans"][0]["expected"])
    assert result.stderr == ""


@pytest.mark.parametrize("command", ["evaluate", "compare"])
def test_plan_for_another_problem_warns_and_still_runs(tmp_path: Path, command: str) -> None:
    """A plan whose ``problem`` differs from the problem's name: a warning, then exit 0."""
    case = case_named("tiny7_0")
    problem, plan = _files(tmp_path, case, problem="some-other-problem")
    result = run_cli(command, problem, plan, "--json")
    document = json_output(result)
    if command == "evaluate":
        _assert_evaluation(document, case["plans"][0]["expected"])
    else:
        rows = {row["schedule"]: row for row in document["rows"]}
        assert rows["plan"]["iteration_time"] == pytest.approx(
            case["plans"][0]["expected"]["iteration_time"], rel=REL
        )
    warning = result.stderr.strip()
    assert warning.startswith("tidgap: warning:"), describe(result)
    assert "some-other-problem" in warning
    assert "tiny7_0" in warning
    assert plan in warning
    assert "error" not in warning


def test_plan_for_this_problem_does_not_warn(tmp_path: Path) -> None:
    """A plan that names the problem it is evaluated on prints nothing on stderr."""
    case = case_named("tiny7_0")
    problem, plan = _files(tmp_path, case, problem="tiny7_0")
    result = run_cli("evaluate", problem, plan, "--json")
    _assert_evaluation(json_output(result), case["plans"][0]["expected"])
    assert result.stderr == ""


def test_problem_name_defaults_to_file_stem(tmp_path: Path) -> None:
    """A problem without ``name`` is called after its file; a plan naming the stem is silent."""
    case = case_named("tiny7_1")
    del case["problem"]["name"]
    problem = str(write_json(tmp_path / "mypipe.json", case["problem"]))
    plan = str(write_json(tmp_path / "plan.json", plan_document(case, problem="mypipe")))
    result = run_cli("evaluate", problem, plan, "--json")
    _assert_evaluation(json_output(result), case["plans"][0]["expected"])
    assert result.stderr == ""
    compared = json_output(run_cli("compare", problem, "--json"))
    assert compared["problem"] == "mypipe"


# --- evaluate PROBLEM --schedule S --microbatches M --------------------------------------------


@pytest.mark.parametrize(("name", "schedule", "m"), _schedule_params())
def test_evaluate_schedule_json_matches_golden(name: str, schedule: str, m: int, tmp_path: Path):
    """``--schedule S --microbatches M --json`` gives the golden ``baselines[M][S]``."""
    case = case_named(name)
    problem, _ = _files(tmp_path, case)
    result = run_cli(
        "evaluate", problem, "--schedule", schedule, "--microbatches", str(m), "--json"
    )
    document = json_output(result)
    assert isinstance(document, dict)
    assert document["iteration_time"] == pytest.approx(case["baselines"][str(m)][schedule], rel=REL)
    assert result.stderr == ""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_evaluate_schedule_short_option_and_text(tmp_path: Path, schedule: str) -> None:
    """``-m M`` is ``--microbatches M``; the text output names the schedule and its time."""
    case = case_named("med7_1")
    problem, _ = _files(tmp_path, case)
    m = case["best_baselines"][schedule]["microbatches"]
    result = run_cli("evaluate", problem, "--schedule", schedule, "-m", str(m))
    assert result.exit_code == 0, describe(result)
    assert schedule in result.stdout
    assert _mentions_value(result.stdout, case["baselines"][str(m)][schedule])
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("m", "message"),
    [
        (0, "0 is outside 1..1000000"),
        (1_000_001, "1000001 is outside 1..1000000"),
        (500_001, "500001 microbatches on 2 stage(s) are 1000002 forward steps, more than the"),
    ],
)
def test_evaluate_schedule_refuses_counts_it_cannot_run(tmp_path: Path, m: int, message: str):
    """A count outside ``1..U``, or one whose run would take minutes and gigabytes: one
    line naming ``--microbatches``, at once."""
    problem = tmp_path / "wide.json"
    made = run_cli("synth", "--stages", "2", "--batch-size", "1000000", "--out", str(problem))
    assert made.exit_code == 0, describe(made)
    result = run_cli("evaluate", str(problem), "--schedule", "1f1b", "--microbatches", str(m))
    assert result.exit_code == 2, describe(result)
    assert result.stderr.startswith(f"tidgap: error: --microbatches: {message}"), describe(result)
    assert result.stderr.count("\n") == 1 and result.stdout == ""


# --- compare PROBLEM [PLAN] ----------------------------------------------------------------------


def _assert_baseline_rows(rows: dict[str, dict[str, Any]], case: Case) -> None:
    """The best-baseline rows match the golden ``best_baselines``; speedup is over GPipe."""
    gpipe_time = case["best_baselines"]["gpipe"]["iteration_time"]
    batch = case["problem"]["batch_size"]
    for schedule in SCHEDULES:
        best = case["best_baselines"][schedule]
        row = rows[schedule]
        assert str(row["microbatches"]) == str(best["microbatches"]), schedule
        assert row["iteration_time"] == pytest.approx(best["iteration_time"], rel=REL), schedule
        assert row["speedup"] == pytest.approx(gpipe_time / row["iteration_time"], rel=REL)
        assert row["throughput"] == pytest.approx(batch / row["iteration_time"], rel=REL)


def _assert_heuristic_rows(rows: dict[str, dict[str, Any]], case: Case) -> None:
    """The local greedy and global DP rows hold those plans' oracle times."""
    problem = Problem.from_dict(case["problem"])
    for name, build in HEURISTICS.items():
        expected = evaluate(problem, build(problem)).iteration_time
        assert rows[name]["iteration_time"] == pytest.approx(expected, rel=REL), name


@pytest.mark.parametrize("name", case_names())
def test_compare_json_with_plan(tmp_path: Path, name: str) -> None:
    """``compare PROBLEM PLAN --json``: the plan's row and the best of each baseline."""
    case = case_named(name)
    problem, plan = _files(tmp_path, case, 1)
    result = run_cli("compare", problem, plan, "--json")
    document = json_output(result)
    assert document["problem"] == name
    rows = {row["schedule"]: row for row in document["rows"]}
    assert len(rows) == len(document["rows"]) == 6
    assert set(rows) == {"plan", *SCHEDULES, *HEURISTICS}
    _assert_baseline_rows(rows, case)
    _assert_heuristic_rows(rows, case)
    plan_time = case["plans"][1]["expected"]["iteration_time"]
    gpipe_time = case["best_baselines"]["gpipe"]["iteration_time"]
    assert rows["plan"]["iteration_time"] == pytest.approx(plan_time, rel=REL)
    assert rows["plan"]["speedup"] == pytest.approx(gpipe_time / plan_time, rel=REL)
    assert result.stderr == ""


@pytest.mark.parametrize("name", case_names())
def test_compare_json_without_plan(tmp_path: Path, name: str) -> None:
    """``compare PROBLEM --json``: just the three best baselines."""
    case = case_named(name)
    problem, _ = _files(tmp_path, case)
    document = json_output(run_cli("compare", problem, "--json"))
    rows = {row["schedule"]: row for row in document["rows"]}
    assert sorted(rows) == sorted([*SCHEDULES, *HEURISTICS])
    assert len(document["rows"]) == 5
    _assert_baseline_rows(rows, case)
    _assert_heuristic_rows(rows, case)
    assert rows["gpipe"]["speedup"] == pytest.approx(1.0, rel=REL)


def test_compare_text_table(tmp_path: Path) -> None:
    """The text table has a line per schedule with its best microbatch count and time."""
    case = case_named("linkheavy7")
    problem, plan = _files(tmp_path, case)
    result = run_cli("compare", problem, plan)
    assert result.exit_code == 0, describe(result)
    lines = result.stdout.splitlines()
    for schedule in SCHEDULES:
        best = case["best_baselines"][schedule]
        matching = [line for line in lines if line.split()[:1] == [schedule]]
        assert len(matching) == 1, (schedule, result.stdout)
        assert matching[0].split()[1] == str(best["microbatches"])
        assert _mentions_value(matching[0], best["iteration_time"], rel=1e-3)
    plan_lines = [line for line in lines if line.startswith("plan")]
    assert len(plan_lines) == 1, result.stdout
    assert _mentions_value(plan_lines[0], case["plans"][0]["expected"]["iteration_time"], 1e-3)
    assert result.stderr == ""


#: Seconds per time unit, for the table's samples/s (other units: samples per unit).
SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def _table_rows(stdout: str) -> tuple[list[str], list[list[str]]]:
    """The comparison table in ``stdout``: header cells and row cells (cells are two or more
    spaces apart; a cell holds single spaces at most)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("schedule "))
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith("lower bound"))
    header, *rows = [re.split(r" {2,}", line.strip()) for line in lines[start:end]]
    return header, rows


def _decimals(cell: str) -> int:
    """Digits after the decimal point of a table cell."""
    return len(cell.partition(".")[2])


def _significant_digits(cell: str) -> int:
    """Significant digits of a table cell (``0.04808`` -> 4)."""
    return len(cell.replace(".", "").lstrip("0"))


def _precision_cases() -> list[Any]:
    """Every example (times in ms), and a golden case with its times in s, us and cycles."""
    return [
        *(pytest.param(f"example:{name}", None, id=name) for name in example_names()),
        *(pytest.param("linkheavy7", unit, id=f"linkheavy7-{unit}") for unit in ("s", "us", "cyc")),
    ]


@pytest.mark.parametrize(("source", "time_unit"), _precision_cases())
def test_compare_table_precision(tmp_path: Path, source: str, time_unit: str | None) -> None:
    """A column has one precision: 6 significant digits of its largest time, 5 of its largest
    throughput; the cells are the ``--json`` values rounded; throughput is in samples/s for
    us, ms and s; rows whose times differ by 0.1% or more show different throughputs."""
    if time_unit is not None:
        case = case_named(source)
        case["problem"]["time_unit"] = time_unit
        source, _ = _files(tmp_path, case)
    result = run_cli("compare", source)
    assert result.exit_code == 0, describe(result)
    document = json_output(run_cli("compare", source, "--json"))
    unit = document["time_unit"]
    header, rows = _table_rows(result.stdout)
    assert [row[0] for row in rows] == [entry["schedule"] for entry in document["rows"]]
    rate = "samples/s" if unit in SECONDS else f"samples/{unit}"
    assert header[2:4] == [f"iteration ({unit})", f"throughput ({rate})"]
    seconds = SECONDS.get(unit, 1.0)
    columns = (
        (2, [entry["iteration_time"] for entry in document["rows"]], 6),
        (3, [entry["throughput"] / seconds for entry in document["rows"]], 5),
    )
    for column, values, digits in columns:
        cells = [row[column] for row in rows]
        (places,) = {_decimals(cell) for cell in cells}
        largest = max(cells, key=float)
        assert _significant_digits(largest) == digits or (
            places == 0 and _significant_digits(largest) > digits
        ), cells
        for cell, value in zip(cells, values, strict=True):
            assert abs(float(cell) - value) <= 0.5 * 10.0**-places * (1 + 1e-9), (cell, value)
    times = [entry["iteration_time"] for entry in document["rows"]]
    for i, row in enumerate(rows):
        for j, other in enumerate(rows):
            if abs(times[i] / times[j] - 1) >= 1e-3:
                assert row[3] != other[3], (row, other)


# --- example:NAME ---------------------------------------------------------------------------------


def _example(name: str) -> tidgap.Problem:
    return tidgap.load_problem(f"example:{name}")


@pytest.mark.parametrize("name", example_names())
def test_example_evaluate_schedule(name: str) -> None:
    """``evaluate example:NAME --schedule ... --json`` agrees with the Python API."""
    problem = _example(name)
    m = tidgap.feasible_microbatch_counts(problem)[0]
    for schedule in SCHEDULES:
        result = run_cli(
            "evaluate", f"example:{name}", "--schedule", schedule, "-m", str(m), "--json"
        )
        expected = tidgap.baseline(problem, schedule, m).iteration_time
        assert json_output(result)["iteration_time"] == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("name", example_names())
def test_example_evaluate_plan(tmp_path: Path, name: str) -> None:
    """``evaluate example:NAME PLAN --json`` on the GPipe plan gives GPipe's time."""
    problem = _example(name)
    m = tidgap.feasible_microbatch_counts(problem)[-1]
    gpipe = tidgap.gpipe_plan(problem, m)
    plan = write_json(
        tmp_path / "plan.json",
        {
            "format": "tidgap.plan/1",
            "problem": problem.name,
            "forward": gpipe.forward,
            "backward": gpipe.backward,
        },
    )
    result = run_cli("evaluate", f"example:{name}", str(plan), "--json")
    document = json_output(result)
    assert document["iteration_time"] == pytest.approx(tidgap.gpipe(problem, m), rel=REL)
    assert len(document["forward_ends"]) == problem.num_stages
    assert result.stderr == ""


@pytest.mark.parametrize("name", example_names())
def test_example_compare(name: str) -> None:
    """``compare example:NAME --json`` reports the best baselines of the Python API."""
    problem = _example(name)
    document = json_output(run_cli("compare", f"example:{name}", "--json"))
    rows = {row["schedule"]: row for row in document["rows"]}
    for schedule, best in tidgap.best_baselines(problem).items():
        assert str(rows[schedule]["microbatches"]) == str(best.microbatches)
        assert rows[schedule]["iteration_time"] == pytest.approx(best.iteration_time, rel=REL)


def test_examples_json_lists_every_example() -> None:
    """``examples --json`` is a list with one entry per built-in example."""
    document = json_output(run_cli("examples", "--json"))
    assert isinstance(document, list)
    assert [item["name"] for item in document] == example_names()
    for item in document:
        problem = _example(item["name"])
        assert item["stages"] == problem.num_stages
        assert item["batch_size"] == problem.batch_size
        assert item["unit"] == problem.unit


def test_examples_text_lists_every_example() -> None:
    """``examples`` prints one line per example, written as ``example:NAME``."""
    result = run_cli("examples")
    assert result.exit_code == 0, describe(result)
    lines = result.stdout.splitlines()
    assert len(lines) == len(example_names())
    for name, line in zip(example_names(), lines, strict=True):
        assert line.split()[0] == f"example:{name}"
    assert result.stderr == ""


# --- --version and --help -------------------------------------------------------------------


def test_version() -> None:
    """``--version`` prints the installed package version."""
    result = run_cli("--version")
    assert result.exit_code == 0, describe(result)
    assert tidgap.__version__ == importlib.metadata.version("tidgap")
    assert tidgap.__version__ in result.stdout.split()[-1]
    assert "tidgap" in result.stdout


@pytest.mark.parametrize("flag", ["--help", "-h", None])
def test_group_help_lists_every_command(flag: str | None) -> None:
    """The group's help shows usage and names every command; a bare ``tidgap`` too (click
    8.2 made it a usage error: the 23 lines of help on stderr after ``tidgap: error:``,
    exit 2)."""
    result = run_cli(*([flag] if flag else []))
    assert result.exit_code == 0, describe(result)
    assert "Usage:" in result.stdout
    for name in cli.commands:
        assert re.search(rf"^\s+{re.escape(name)}\b", result.stdout, re.MULTILINE), name
    assert result.stderr == ""


HELP_OPTIONS = {
    "evaluate": ("PROBLEM", "--schedule", "--microbatches", "--json"),
    "compare": ("PROBLEM", "--json"),
    "examples": ("--json",),
}


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_command_help(command: str) -> None:
    """Every command's ``--help`` exits 0 and shows its usage and options."""
    result = run_cli(command, "--help")
    assert result.exit_code == 0, describe(result)
    assert f"Usage: cli {command}" in result.stdout or f"{command} [OPTIONS]" in result.stdout
    for option in HELP_OPTIONS.get(command, ()):
        assert option in result.stdout, option
    assert result.stderr == ""


@pytest.mark.parametrize("with_plan", [False, True])
def test_evaluate_gives_throughput_in_samples_per_second_as_compare_does(
    tmp_path: Path, with_plan: bool
) -> None:
    """``evaluate``'s text said samples/ms on a problem in ms; ``compare`` and ``search``
    say samples/s (the ``--json`` value stays per time unit)."""
    problem = tidgap.load_problem("example:vgg16")
    args = ["evaluate", "example:vgg16", "--schedule", "gpipe", "-m", "3"]
    if with_plan:
        path = write_json(tmp_path / "plan.json", tidgap.gpipe_plan(problem, 3).document())
        args = ["evaluate", "example:vgg16", str(path)]
    text = run_cli(*args).stdout
    seconds = tidgap.gpipe(problem, 3) / 1000
    assert f"throughput {problem.batch_size / seconds:.6g} samples/s" in text, text
