"""Hostile input (issue 9, item 5): every finding gives one error line and exit status 2, or
output with names escaped and every number finite; never a traceback.

The rules are docs/formats.md, "Bad input: what every file must be".
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.cli_helpers import crashed, describe, run_cli
from tests.support.strategies import plans, problems
from tidgap import Problem, best_baselines, evaluate
from tidgap.cli.options import describe_problem
from tidgap.model.examples import example_path
from tidgap.model.fileio import MAX_DEPTH, MAX_INTEGER_DIGITS, read_json
from tidgap.model.problem import MAX_SAMPLES, MAX_TIME, MIN_ITERATION, load_problem, time_range
from tidgap.model.text import brief, printable
from tidgap.model.timefn import table

ESC = "\x1b[31mred\x1b[0m"
#: Characters that must never reach the terminal raw: ANSI ESC, CR, LF, TAB, DEL, a C1
#: control, a bidi override, the line separator.
HOSTILE = "\x1b\r\n\t\x7f\x9b\u202e\u2028"


def tiny() -> dict[str, Any]:
    """The built-in ``tiny-2`` problem (B = 8, two stages, no caps) as a fresh document."""
    return json.loads(example_path("tiny-2").read_text(encoding="utf-8"))


PLAN = {"format": "tidgap.plan/1", "forward": [[4, 4], [8]], "backward": [[8], [2, 6]]}


def write(folder: Path, name: str, content: Any) -> str:
    """Write ``content`` (bytes, text, or a document as JSON) to ``folder/name``."""
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    return str(path)


def commands(problem: str, plan: str | None = None) -> list[list[str]]:
    """``evaluate``, ``compare --json`` and a cheap ``search`` on ``problem``."""
    evaluate_args = [plan] if plan else ["--schedule", "gpipe", "-m", "2"]
    return [
        ["evaluate", problem, *evaluate_args],
        ["compare", problem, *([plan] if plan else []), "--json"],
        [
            "search",
            problem,
            "--generations",
            "1",
            "--population",
            "8",
            "--backend",
            "numpy",
            "--quiet",
        ],
    ]


def error_line(result: Result) -> str:
    """The one ``tidgap: error:`` line of a run that must exit 2."""
    assert not crashed(result), describe(result)
    assert result.exit_code == 2, describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, describe(result)
    assert lines[0].startswith("tidgap: error: "), describe(result)
    return lines[0]


def assert_rejected(path: str, field: str | None, reason: str, plan: str | None = None) -> None:
    """Every command on ``path`` (with ``plan``) exits 2 naming ``field`` and ``reason``."""
    source = plan if plan else path
    prefix = f"tidgap: error: {source}: " + (f"{field}: " if field else "")
    for args in commands(path, plan):
        line = error_line(run_cli(*args))
        assert line.startswith(prefix), line
        assert reason in line, line


def assert_safe_output(result: Result) -> None:
    """Exit 0; no raw control or format character and no ``inf``/``nan`` on stdout."""
    assert result.exit_code == 0, describe(result)
    assert all(ch == "\n" or ch.isprintable() for ch in result.output), describe(result)
    assert not re.search(r"\b(inf|nan)\b", result.stdout, re.IGNORECASE), describe(result)


# --- 1. reading: huge integers, deep nesting, invalid UTF-8, lone surrogates ----------


def test_integer_over_python_digit_limit_is_bad_input(tmp_path: Path) -> None:
    text = json.dumps(tiny()).replace('"batch_size": 8', '"batch_size": ' + "9" * 5000)
    assert_rejected(write(tmp_path, "p.json", text), "batch_size", "5000 digits")


def test_long_integer_in_source_is_named(tmp_path: Path) -> None:
    document = tiny() | {"source": {"id": 0}}
    digits = MAX_INTEGER_DIGITS + 1
    text = json.dumps(document).replace('"id": 0', '"id": ' + "7" * digits)
    assert_rejected(write(tmp_path, "p.json", text), "source.id", f"{digits} digits")


def test_integer_of_the_longest_length_is_read(tmp_path: Path) -> None:
    document = tiny() | {"source": {"id": 0}}
    text = json.dumps(document).replace('"id": 0', '"id": ' + "7" * MAX_INTEGER_DIGITS)
    assert read_json(write(tmp_path, "p.json", text))["source"]["id"] == int(
        "7" * MAX_INTEGER_DIGITS
    )


def test_nesting_past_the_parser_limit_in_source_is_bad_input(tmp_path: Path) -> None:
    deep = "[" * 5000 + "]" * 5000
    text = json.dumps(tiny() | {"source": 0}).replace('"source": 0', '"source": ' + deep)
    path = write(tmp_path, "p.json", text)
    assert_rejected(path, None, f"nested deeper than {MAX_DEPTH} levels (line 1, column")


def test_nesting_just_past_the_limit_names_the_field(tmp_path: Path) -> None:
    # the top-level object is level 1, so source's outermost list is level 2
    deep: Any = []
    for _ in range(MAX_DEPTH - 1):
        deep = [deep]
    path = write(tmp_path, "p.json", tiny() | {"source": deep})
    field = "source" + "[0]" * (MAX_DEPTH - 1)
    assert_rejected(path, field, f"nested deeper than {MAX_DEPTH} levels")
    assert read_json(write(tmp_path, "ok.json", tiny() | {"source": deep[0]}))


def test_deep_nesting_in_an_ignored_plan_key_is_bad_input(tmp_path: Path) -> None:
    problem = write(tmp_path, "p.json", tiny())
    plan = write(tmp_path, "plan.json", json.dumps(PLAN)[:-1] + ', "search": ' + "[" * 3000)
    for args in (["evaluate", problem, plan], ["compare", problem, plan]):
        line = error_line(run_cli(*args))
        assert line.startswith(f"tidgap: error: {plan}: nested deeper than"), line


def test_a_file_past_the_size_limit_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read no further than the limit: ``/dev/zero`` as a problem would fill the memory."""
    monkeypatch.setattr("tidgap.model.fileio.MAX_FILE_BYTES", 64)
    path = write(tmp_path, "p.json", json.dumps(tiny()))
    assert_rejected(path, None, "larger than 0 MiB: not a tidgap file")
    monkeypatch.setattr("tidgap.model.fileio.MAX_FILE_BYTES", len(Path(path).read_bytes()))
    assert read_json(path)["name"] == "tiny-2"


def test_dev_zero_is_refused_without_reading_it_all() -> None:
    line = error_line(run_cli("evaluate", "/dev/zero", "--schedule", "gpipe", "-m", "2"))
    assert line == "tidgap: error: /dev/zero: larger than 256 MiB: not a tidgap file"


def test_an_empty_file_name_is_bad_input(tmp_path: Path) -> None:
    """``Path("")`` is the current folder: an empty argument is named as one, and ``tidgap
    search ""`` does not search the default example."""
    problem = write(tmp_path, "p.json", tiny())
    for args in (["evaluate", "", "--schedule", "gpipe", "-m", "2"], ["evaluate", problem, ""],
                 ["search", "", "--generations", "1"]):  # fmt: skip
        assert error_line(run_cli(*args)) == 'tidgap: error: "": no file name (an empty argument)'


def test_an_empty_output_name_is_bad_input_before_any_work(tmp_path: Path) -> None:
    problem = write(tmp_path, "p.json", tiny())
    for option in ("--out", "--gantt", "--trace"):
        result = run_cli("search", problem, "--generations", "1", option, "")
        assert error_line(result) == f"tidgap: error: {option}: no file name (an empty argument)"


def test_an_empty_export_or_folder_name_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export --to pytorch-csv --out ""`` (its sidecar's name came from it) and an empty
    ``--out-dir`` (it wrote into the current folder) are refused, writing nothing."""
    problem = write(tmp_path, "p.json", tiny())
    plan = tmp_path / "plan.json"
    assert run_cli("search", problem, "--generations", "1", "--out", str(plan)).exit_code == 0
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    result = run_cli("export", problem, str(plan), "--to", "pytorch-csv", "--out", "")
    assert error_line(result) == "tidgap: error: --out: no file name (an empty argument)"
    for args in (["sweep", problem, "--generations", "1"], ["synth", "--count", "2"]):
        result = run_cli(*args, "--out-dir", "")
        assert error_line(result) == "tidgap: error: --out-dir: no folder name (an empty argument)"
    assert sorted(tmp_path.iterdir()) == before


def test_a_long_value_quoted_in_a_message_is_cut() -> None:
    assert brief("x" * 61) == "x" * 60 + "..."
    assert brief([1] * 3) == "[1, 1, 1]"


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda d: d["stages"][0].update(max_microbatch=None), "stages[0].max_microbatch"),
        (lambda d: d["stages"][1]["forward"].update(table=None), "stages[1].forward.table"),
        (lambda d: d.update(name=None), "name"),
    ],
)
def test_a_null_key_is_refused_not_taken_as_absent(tmp_path: Path, edit: Any, path: str) -> None:
    """``"max_microbatch": null`` dropped the stage's cap silently (formats.md refuses
    unknown keys so that a typo cannot drop one); ``source`` stays free-form."""
    document = tiny()
    edit(document)
    assert_rejected(write(tmp_path, "p.json", document), path, "is null; leave the key out")
    document = tiny()
    document["source"] = {"note": None}
    assert load_problem(write(tmp_path, "q.json", document)).source == {"note": None}


def test_a_byte_order_mark_is_allowed(tmp_path: Path) -> None:
    """Notepad begins UTF-8 files with one: refused as `Unexpected UTF-8 BOM (decode using
    utf-8-sig)`."""
    path = write(tmp_path, "p.json", b"\xef\xbb\xbf" + json.dumps(tiny()).encode())
    assert load_problem(path).batch_size == tiny()["batch_size"]
    bad = write(tmp_path, "bad.json", b'\xef\xbb\xbf{"a\xff": 1}')  # 0xff at byte 6
    assert_rejected(bad, None, "not UTF-8 text (byte 6: invalid start byte)")


def test_invalid_utf8_is_bad_input(tmp_path: Path) -> None:
    data = json.dumps(tiny()).encode().replace(b'"tiny-2"', b'"tiny\xff"')
    assert_rejected(write(tmp_path, "p.json", data), None, "not UTF-8 text (byte")


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d | {"name": "a\ud800b"}, "name"),
        (lambda d: d["stages"][1].update(name="\udfff") or d, "stages[1].name"),
        (lambda d: d | {"source": {"notes": ["fine", "\ud83d"]}}, "source.notes[1]"),
        (lambda d: d | {"time_unit": "m\udc00s"}, "time_unit"),
    ],
)
def test_lone_surrogate_is_rejected_naming_the_string(
    tmp_path: Path, edit: Any, field: str
) -> None:
    assert_rejected(write(tmp_path, "p.json", edit(tiny())), field, "lone surrogate '\\u")


def test_lone_surrogate_in_a_key_names_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, "p.json", tiny() | {"source": {"x\ud800": 1}})
    assert_rejected(path, 'source["x\\ud800"]', "key holds a lone surrogate")


def test_names_from_bytes_that_are_not_utf8_are_written_readable(tmp_path: Path) -> None:
    """A file name or ``--name`` holding a byte that is not UTF-8 (a lone surrogate to
    Python) becomes U+FFFD in what tidgap writes: it wrote files it then refused to read."""
    document = tiny()
    del document["name"]
    problem = write(tmp_path, "\udcfe.json", document)  # the file's name is the byte 0xfe
    assert load_problem(problem).name == "\ufffd"
    plan = str(tmp_path / "plan.json")
    searched = run_cli("search", problem, "--generations", "2", "-q", "--out", plan)
    assert searched.exit_code == 0, describe(searched)
    assert read_json(plan)["problem"] == "\ufffd"
    assert run_cli("evaluate", problem, plan).exit_code == 0
    synth = str(tmp_path / "s.json")
    made = run_cli("synth", "--name", "a\udcffb", "--out", synth)
    assert made.exit_code == 0, describe(made)
    assert load_problem(synth).name == "a\ufffdb"


def test_surrogate_pair_is_text(tmp_path: Path) -> None:
    document = tiny() | {"name": "snake \U0001f40d"}
    text = json.dumps(document)  # ensure_ascii writes the pair as "\ud83d\udc0d"
    assert "\\ud83d\\udc0d" in text
    assert load_problem(write(tmp_path, "p.json", text)).name == "snake \U0001f40d"


def test_lone_surrogate_never_reaches_the_picture(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    document = tiny()
    document["stages"][0]["name"] = "\ud800"
    path = write(tmp_path, "p.json", document)
    picture = tmp_path / "g.png"
    line = error_line(run_cli("compare", path, "--gantt", str(picture)))
    assert "stages[0].name" in line
    assert not picture.exists()


@pytest.mark.parametrize(
    ("literal", "reason"),
    [("NaN", "got NaN"), ("-Infinity", "got -Infinity"), ("1e400", "got 1e400, out of range")],
)
def test_non_finite_numbers_are_rejected_even_in_source(
    tmp_path: Path, literal: str, reason: str
) -> None:
    text = json.dumps(tiny() | {"source": {"x": [0]}}).replace('"x": [0]', f'"x": [{literal}]')
    assert_rejected(write(tmp_path, "p.json", text), "source.x[0]", reason)


# --- 2. times whose sums overflow -----------------------------------------------------


def test_time_near_the_largest_double_names_the_value(tmp_path: Path) -> None:
    document = tiny()
    document["stages"][0]["forward"] = {"affine": {"base": 1e308, "per_sample": 0.0}}
    path = write(tmp_path, "p.json", document)
    assert_rejected(path, "stages[0].forward.affine.base", f"must be < {MAX_TIME:g}")


def test_finite_times_whose_iteration_overflows_name_the_function(tmp_path: Path) -> None:
    # each value is below the limit, but 8 microbatches of 0.2e300 are not
    document = tiny()
    document["stages"][1]["backward"] = {"affine": {"base": 0.2 * MAX_TIME, "per_sample": 0.0}}
    path = write(tmp_path, "p.json", document)
    assert_rejected(
        path,
        "stages[1].backward",
        f"times too large: an iteration could take longer than {MAX_TIME:g} ms",
    )


def test_table_time_outside_the_sizes_asked_for_still_counts(tmp_path: Path) -> None:
    document = tiny()
    document["stages"][1]["max_microbatch"] = 4  # size 8 is never asked of stage 1
    document["stages"][1]["forward"]["table"]["times"][-1] = 1e305
    path = write(tmp_path, "p.json", document)
    assert_rejected(path, "stages[1].forward.table.times[3]", "must be < ")


def test_times_just_inside_the_limit_print_finite_numbers(tmp_path: Path) -> None:
    document = tiny()
    for stage in document["stages"]:
        stage["forward"] = stage["backward"] = {"affine": {"base": 1e297, "per_sample": 0.0}}
    path = write(tmp_path, "p.json", document)
    for args in commands(path):
        assert_safe_output(run_cli(*args))
    result = run_cli("compare", path, "--json")
    rows = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(name))["rows"]
    assert all(math.isfinite(row["iteration_time"]) for row in rows)


@pytest.mark.parametrize("time", [0.0, 5e-324, 1e-300, MIN_ITERATION / 10])
def test_problem_that_can_take_no_time_is_bad_input(tmp_path: Path, time: float) -> None:
    document = tiny()
    free = {"affine": {"base": time, "per_sample": 0.0}}
    for stage in document["stages"]:
        stage.update(forward=free, backward=free, tail=0.0)
    document["links"] = [{"forward": free, "backward": free}]
    assert_rejected(write(tmp_path, "p.json", document), "stages", "could take less than")


def test_problem_taking_the_least_time_allowed_prints_finite_numbers(tmp_path: Path) -> None:
    document = tiny()
    free = {"affine": {"base": 0.0, "per_sample": 0.0}}
    for stage in document["stages"]:
        stage.update(forward=free, backward=free, tail=0.0)
    document["stages"][1]["tail"] = MIN_ITERATION
    document["links"] = [{"forward": free, "backward": free}]
    path = write(tmp_path, "p.json", document)
    for args in commands(path):
        assert_safe_output(run_cli(*args))


def test_table_size_over_the_limit_is_bad_input(tmp_path: Path) -> None:
    document = tiny()
    document["stages"][1]["forward"]["table"]["sizes"][-1] = 2**63
    path = write(tmp_path, "p.json", document)
    assert_rejected(path, "stages[1].forward.table.sizes[3]", f"must be <= {MAX_SAMPLES}")


def test_batch_size_over_the_limit_is_bad_input(tmp_path: Path) -> None:
    document = tiny() | {"batch_size": 2 * (MAX_SAMPLES + 1), "unit": MAX_SAMPLES + 1}
    for stage in document["stages"]:
        stage["forward"] = stage["backward"] = {"affine": {"base": 1.0, "per_sample": 0.0}}
    path = write(tmp_path, "p.json", document)
    assert_rejected(path, "batch_size", f"must be <= {MAX_SAMPLES}")


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_iteration_bounds_hold_for_every_plan_and_baseline(data: st.DataObject) -> None:
    problem = data.draw(problems())
    plan = data.draw(plans(problem))
    least = problem.least_iteration()
    longest = sum(time for _, time in problem.longest_iteration_parts())
    times = [evaluate(problem, plan).iteration_time]
    times += [result.iteration_time for result in best_baselines(problem).values()]
    for time in times:
        assert least * (1 - 1e-12) <= time <= longest * (1 + 1e-12) + 1e-300


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(data=st.data(), unit=st.integers(1, 4))
def test_time_range_is_the_exact_extremes_over_the_sizes_asked_for(
    data: st.DataObject, unit: int
) -> None:
    inner = data.draw(st.sets(st.integers(2, 99), max_size=6))
    sizes = sorted({1, 100, *inner})
    times = data.draw(st.lists(st.floats(0, 100), min_size=len(sizes), max_size=len(sizes)))
    function = table(sizes, times)
    largest = unit * data.draw(st.integers(1, 100 // unit))
    asked = [function(k * unit) for k in range(1, largest // unit + 1)]
    assert time_range(function, unit, largest) == (min(asked), max(asked))


# --- 3. names and quoted values are escaped --------------------------------------------


def test_printable_escapes_what_a_terminal_would_obey() -> None:
    assert printable(HOSTILE) == "\\x1b\\r\\n\\t\\x7f\\x9b\\u202e\\u2028"
    assert printable("conv1_1 → fc8, Größe 中 \\x1b") == "conv1_1 → fc8, Größe 中 \\x1b"


@given(st.text())
def test_printable_output_is_printable_and_keeps_printable_text(text: str) -> None:
    shown = printable(text)
    assert shown.isprintable()
    assert (shown == text) == text.isprintable()


def test_names_with_control_characters_are_printed_escaped(tmp_path: Path) -> None:
    document = tiny() | {"name": ESC + HOSTILE}
    document["stages"][0]["name"] = "\x1b]0;title\x07"
    path = write(tmp_path, "p.json", document)
    plan = write(tmp_path, "plan.json", PLAN)
    runs = [
        run_cli("evaluate", path, plan),
        run_cli("evaluate", path, "--schedule", "1f1b", "-m", "4"),
        run_cli("compare", path, plan),
        run_cli("search", path, "--generations", "1", "--population", "8", "--backend", "numpy"),
    ]
    for result in runs:
        assert_safe_output(result)
        assert "\\x1b[31mred\\x1b[0m\\x1b\\r\\n\\t\\x7f\\x9b\\u202e\\u2028:" in result.stdout
    for result in (runs[0], runs[1], runs[3]):
        assert "\\x1b]0;title\\x07" in result.stdout, describe(result)


def test_describe_problem_and_stage_name_escape() -> None:
    document = tiny() | {"name": "a\nb"}
    document["stages"][0]["name"] = "\x1b[2J"
    problem = Problem.from_dict(document)
    assert describe_problem(problem).startswith("a\\nb: 2 stage(s)")
    assert problem.stage_name(0) == "\\x1b[2J"
    assert problem.stage_name(1) == "s1"
    assert problem.stages[0].name == "\x1b[2J"  # the value itself is kept


def test_error_quoting_a_value_escapes_it(tmp_path: Path) -> None:
    path = write(tmp_path, "p.json", tiny() | {"batch_size": ESC + "\u202e"})
    line = error_line(run_cli("compare", path))
    # C0 controls in JSON's escapes, the rest as repr writes them
    assert line.endswith('batch_size: must be an integer (got "\\u001b[31mred\\u001b[0m\\u202e")')


def test_error_naming_a_key_escapes_it(tmp_path: Path) -> None:
    # a key that is not an identifier is quoted in JSON, whose escapes cover C0 controls
    path = write(tmp_path, "p.json", tiny() | {"\x1b[2Jkey\n": 1})
    line = error_line(run_cli("evaluate", path, "--schedule", "gpipe", "-m", "1"))
    assert line == f'tidgap: error: {path}: ["\\u001b[2Jkey\\n"]: unknown key'


@pytest.mark.parametrize("key", ["x" * 100_000, "a b" * 30_000])
def test_a_long_key_is_cut_in_the_error_line(tmp_path: Path, key: str) -> None:
    path = write(tmp_path, "p.json", tiny() | {key: 1})
    line = error_line(run_cli("evaluate", path, "--schedule", "gpipe", "-m", "1"))
    shown = json.dumps(key)[:37]
    assert line == f"tidgap: error: {path}: [{shown}...]: unknown key"


def test_plan_for_another_problem_warns_with_the_names_escaped(tmp_path: Path) -> None:
    path = write(tmp_path, "p.json", tiny())
    plan = write(tmp_path, "pl\nan.json", PLAN | {"problem": ESC})  # its path escaped too
    result = run_cli("evaluate", path, plan)
    assert result.exit_code == 0, describe(result)
    assert "plan is for '\\x1b[31mred\\x1b[0m'" in result.stderr
    assert "\x1b" not in result.stderr
    assert result.stderr.count("\n") == 1 and "pl\\nan.json: problem: plan is for" in result.stderr


def test_time_unit_with_control_characters_is_bad_input(tmp_path: Path) -> None:
    path = write(tmp_path, "p.json", tiny() | {"time_unit": "ms\x1b[8m"})
    assert_rejected(path, "time_unit", "must be printable text (got 'ms\\x1b[8m')")


def test_picture_draws_hostile_names_literally(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    document = tiny() | {"name": "$\\foo$", "time_unit": "$\\bar$"}
    document["stages"][0]["name"] = "$\\frac{$" + ESC
    path = write(tmp_path, "p.json", document)
    for suffix in ("png", "svg"):
        picture = tmp_path / f"g.{suffix}"
        result = run_cli(
            "compare", path, write(tmp_path, "plan.json", PLAN), "--gantt", str(picture)
        )
        assert_safe_output(result)
        assert picture.stat().st_size > 0


def test_trace_names_stages_escaped(tmp_path: Path) -> None:
    document = tiny()
    document["stages"][1]["name"] = "\u202eevil"
    path = write(tmp_path, "p.json", document)
    trace = tmp_path / "t.json"
    assert_safe_output(
        run_cli("evaluate", path, "--schedule", "gpipe", "-m", "2", "--trace", str(trace))
    )
    names = [
        event["args"]["name"]
        for event in json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
        if event["name"] == "thread_name"
    ]
    assert "stage 1: \\u202eevil" in names


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('"batch_size": 8', "batch_size"),
        ('"notes": {"a": 1, "a": 2}', "notes.a"),
    ],
)
def test_a_key_given_twice_is_bad_input(tmp_path: Path, text: str, field: str) -> None:
    """JSON leaves a repeated key to the reader; tidgap names it rather than keep one."""
    path = write(tmp_path, "p.json", json.dumps(tiny())[:-1] + ", " + text + "}")
    assert_rejected(path, field, "key given more than once")
