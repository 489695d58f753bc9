"""Bad input through the command line: exit status 2, one line on stderr naming file and field.

Each case starts from a valid golden problem and plan written to files and breaks one
thing (``docs/formats.md``: "Errors go to stderr as one line that names the file and the
field as a JSON path"; ``docs/model.md``: Inputs, A plan).  Every case runs through each
command that reads the broken file, with and without ``--json``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from click.testing import Result

import tidgap
from tests.support.cli_helpers import case_named as _case_named
from tests.support.cli_helpers import crashed, describe, plan_document, run_cli, write_json

PROBLEM = "in/problem.json"
PLAN = "in/plan.json"
BASE = "bwdcaps7"  # B=24, unit 2; caps: s0 bcap 8, s1 fcap 6 / bcap 8, s2 bcap 12
CAPPED = "linkheavy7"  # U=32; stage 0 caps microbatches at 16, so M=1 is infeasible

Document = Any
Edit = Callable[[Document], Document]
JsonPath = tuple[str | int, ...]


class Raw(str):
    """Text written to the file as is (not JSON-encoded)."""


class Missing:
    """No file at all."""


class Directory:
    """A directory where the file should be."""


def _at(document: Document, path: JsonPath) -> tuple[Any, str | int]:
    """The container holding ``path`` and the last key of ``path``."""
    for key in path[:-1]:
        document = document[key]
    return document, path[-1]


def setting(path: JsonPath, value: Any) -> Edit:
    """An edit that sets the field at ``path`` to ``value``."""

    def edit(document: Document) -> Document:
        container, key = _at(document, path)
        container[key] = value
        return document

    return edit


def deleting(path: JsonPath) -> Edit:
    """An edit that removes the field at ``path``."""

    def edit(document: Document) -> Document:
        container, key = _at(document, path)
        del container[key]
        return document

    return edit


def appending(path: JsonPath, value: Any) -> Edit:
    """An edit that appends ``value`` to the list at ``path``."""

    def edit(document: Document) -> Document:
        container, key = _at(document, path)
        container[key].append(copy.deepcopy(value))
        return document

    return edit


def popping(path: JsonPath) -> Edit:
    """An edit that drops the last entry of the list at ``path``."""

    def edit(document: Document) -> Document:
        container, key = _at(document, path)
        container[key].pop()
        return document

    return edit


def replacing(value: Any) -> Edit:
    """An edit that replaces the whole document."""
    return lambda _document: value


def both(*edits: Edit) -> Edit:
    """Several edits in turn."""

    def edit(document: Document) -> Document:
        for each in edits:
            document = each(document)
        return document

    return edit


@dataclass(frozen=True)
class Bad:
    """One broken input: which file, how it is broken, and the field the error must name.

    ``field`` is the JSON path the message must give right after the file name (a longer
    path below it is accepted, e.g. ``sizes[2]`` for ``sizes``); ``None`` for a file that
    cannot be read as a JSON object at all.
    """

    id: str
    target: Literal["problem", "plan"]
    edit: Edit
    field: str | None
    base: str = BASE


AFFINE = {"affine": {"base": 1.0, "per_sample": 0.1}}
LINK = {"forward": AFFINE, "backward": AFFINE}


def table(*sizes: Any) -> dict[str, Any]:
    """A table time function over ``sizes`` (times rising from 1)."""
    return {"table": {"sizes": list(sizes), "times": [1.0 + i for i in range(len(sizes))]}}


def _file_cases(target: Literal["problem", "plan"]) -> list[Bad]:
    """Files that are not a JSON object of any kind."""
    return [
        Bad(f"{target}-missing-file", target, replacing(Missing()), None),
        Bad(f"{target}-is-a-directory", target, replacing(Directory()), None),
        Bad(f"{target}-not-json", target, replacing(Raw("this is not JSON\n")), None),
        Bad(f"{target}-truncated-json", target, replacing(Raw('{"format": "tidgap.')), None),
        Bad(f"{target}-empty-file", target, replacing(Raw("")), None),
        Bad(f"{target}-top-level-array", target, replacing([{"format": "x"}]), None),
        Bad(f"{target}-top-level-string", target, replacing("tidgap"), None),
        Bad(f"{target}-missing-format", target, deleting(("format",)), "format"),
        Bad(f"{target}-format-null", target, setting(("format",), None), "format"),
    ]


PROBLEM_CASES: list[Bad] = [
    *_file_cases("problem"),
    Bad("unknown-format", "problem", setting(("format",), "tidgap.problem/2"), "format"),
    Bad("plan-given-as-problem", "problem", setting(("format",), "tidgap.plan/1"), "format"),
    # batch_size and unit
    Bad("missing-batch-size", "problem", deleting(("batch_size",)), "batch_size"),
    Bad("batch-size-string", "problem", setting(("batch_size",), "24"), "batch_size"),
    Bad("batch-size-float", "problem", setting(("batch_size",), 24.0), "batch_size"),
    Bad("batch-size-true", "problem", setting(("batch_size",), True), "batch_size"),
    Bad("batch-size-null", "problem", setting(("batch_size",), None), "batch_size"),
    Bad("batch-size-zero", "problem", setting(("batch_size",), 0), "batch_size"),
    Bad("batch-size-negative", "problem", setting(("batch_size",), -24), "batch_size"),
    Bad("batch-size-not-multiple-of-unit", "problem", setting(("batch_size",), 25), "batch_size"),
    Bad("unit-zero", "problem", setting(("unit",), 0), "unit"),
    Bad("unit-negative", "problem", setting(("unit",), -2), "unit"),
    Bad("unit-float", "problem", setting(("unit",), 2.0), "unit"),
    Bad("name-not-string", "problem", setting(("name",), 7), "name"),
    Bad("time-unit-not-string", "problem", setting(("time_unit",), 1), "time_unit"),
    # times: finite and non-negative
    Bad(
        "nan-in-table-time",
        "problem",
        setting(("stages", 0, "backward", "table", "times", 1), math.nan),
        "stages[0].backward.table.times[1]",
    ),
    Bad(
        "nan-affine-per-sample",
        "problem",
        setting(("stages", 2, "forward", "affine", "per_sample"), math.nan),
        "stages[2].forward.affine.per_sample",
    ),
    Bad(
        "infinity-link-base",
        "problem",
        setting(("links", 1, "forward", "affine", "base"), math.inf),
        "links[1].forward.affine.base",
    ),
    Bad("infinity-tail", "problem", setting(("stages", 2, "tail"), math.inf), "stages[2].tail"),
    Bad("nan-tail", "problem", setting(("stages", 1, "tail"), math.nan), "stages[1].tail"),
    Bad(
        "negative-per-sample",
        "problem",
        setting(("stages", 1, "forward", "affine", "per_sample"), -0.1),
        "stages[1].forward.affine.per_sample",
    ),
    Bad(
        "negative-base",
        "problem",
        setting(("stages", 2, "backward", "affine", "base"), -1.0),
        "stages[2].backward.affine.base",
    ),
    Bad(
        "negative-table-time",
        "problem",
        setting(("stages", 1, "backward", "table", "times", 0), -1.0),
        "stages[1].backward.table.times[0]",
    ),
    Bad("negative-tail", "problem", setting(("stages", 0, "tail"), -0.5), "stages[0].tail"),
    Bad(
        "time-as-string",
        "problem",
        setting(("stages", 0, "forward", "affine", "base"), "1.6"),
        "stages[0].forward.affine.base",
    ),
    # unknown keys are named
    Bad("unknown-top-level-key", "problem", setting(("batchsize",), 24), "batchsize"),
    Bad(
        "typo-max-microbach-in-stage",
        "problem",
        setting(("stages", 1, "max_microbach"), 4),
        "stages[1].max_microbach",
    ),
    Bad(
        "unknown-key-in-link",
        "problem",
        setting(("links", 0, "forwards"), AFFINE),
        "links[0].forwards",
    ),
    Bad(
        "unknown-key-in-affine",
        "problem",
        setting(("stages", 2, "forward", "affine", "slope"), 0.1),
        "stages[2].forward.affine.slope",
    ),
    # stages and time functions
    Bad(
        "empty-stages", "problem", both(setting(("stages",), []), setting(("links",), [])), "stages"
    ),
    Bad("stages-not-a-list", "problem", setting(("stages",), {"s0": {}}), "stages"),
    Bad("stage-not-an-object", "problem", setting(("stages", 1), "s1"), "stages[1]"),
    Bad(
        "stage-missing-backward",
        "problem",
        deleting(("stages", 1, "backward")),
        "stages[1].backward",
    ),
    Bad(
        "time-function-both-kinds",
        "problem",
        setting(("stages", 2, "forward", "table"), table(2, 24)["table"]),
        "stages[2].forward",
    ),
    Bad(
        "time-function-neither-kind",
        "problem",
        setting(("stages", 2, "backward"), {}),
        "stages[2].backward",
    ),
    Bad(
        "time-function-a-number",
        "problem",
        setting(("stages", 2, "backward"), 3.0),
        "stages[2].backward",
    ),
    Bad(
        "table-lengths-differ",
        "problem",
        appending(("stages", 0, "backward", "table", "times"), 20.0),
        "stages[0].backward.table",
    ),
    Bad(
        "table-sizes-decreasing",
        "problem",
        setting(("stages", 1, "backward", "table", "sizes"), [2, 8, 4, 16, 24]),
        "stages[1].backward.table.sizes",
    ),
    Bad(
        "table-sizes-repeated",
        "problem",
        setting(("stages", 1, "backward", "table", "sizes"), [2, 4, 4, 16, 24]),
        "stages[1].backward.table.sizes",
    ),
    Bad(
        "table-sizes-floats",
        "problem",
        setting(("stages", 0, "backward", "table", "sizes"), [2.0, 4.0, 8.0, 16.0, 24.0]),
        "stages[0].backward.table.sizes",
    ),
    Bad(
        "table-size-zero",
        "problem",
        setting(("stages", 0, "backward", "table", "sizes"), [0, 4, 8, 16, 24]),
        "stages[0].backward.table.sizes",
    ),
    Bad(
        "table-empty",
        "problem",
        setting(("stages", 0, "backward"), {"table": {"sizes": [], "times": []}}),
        "stages[0].backward.table",
    ),
    # tables must cover the sizes the problem can ask for
    Bad(
        "forward-table-starts-above-unit",
        "problem",
        setting(("stages", 0, "forward"), table(4, 8, 24)),
        "stages[0].forward.table.sizes",
    ),
    Bad(
        "forward-table-short-of-fcap",
        "problem",
        setting(("stages", 0, "forward"), table(2, 16)),
        "stages[0].forward.table.sizes",
    ),
    Bad(
        "backward-table-short-of-bcap",
        "problem",
        setting(("stages", 2, "backward"), table(2, 4, 8)),
        "stages[2].backward.table.sizes",
    ),
    Bad(
        "link-forward-table-short-of-sender-fcap",
        "problem",
        setting(("links", 0, "forward"), table(2, 16)),
        "links[0].forward.table.sizes",
    ),
    Bad(
        # reaches bcap_1 = 8 (the link's own index) but not bcap_2 = 12 (the sender's)
        "link-backward-table-short-of-next-bcap",
        "problem",
        setting(("links", 1, "backward"), table(2, 8)),
        "links[1].backward.table.sizes",
    ),
    # caps
    Bad(
        "cap-not-multiple-of-unit",
        "problem",
        setting(("stages", 1, "max_microbatch"), 5),
        "stages[1].max_microbatch",
    ),
    Bad(
        "backward-cap-not-multiple-of-unit",
        "problem",
        setting(("stages", 0, "max_microbatch_backward"), 7),
        "stages[0].max_microbatch_backward",
    ),
    Bad(
        "cap-zero",
        "problem",
        setting(("stages", 1, "max_microbatch"), 0),
        "stages[1].max_microbatch",
    ),
    Bad(
        "cap-float",
        "problem",
        setting(("stages", 1, "max_microbatch"), 6.0),
        "stages[1].max_microbatch",
    ),
    # links: S - 1 of them
    Bad("too-many-links", "problem", appending(("links",), LINK), "links"),
    Bad("too-few-links", "problem", popping(("links",)), "links"),
    Bad("links-missing", "problem", deleting(("links",)), "links"),
    Bad("link-for-one-stage", "problem", appending(("links",), LINK), "links", base="onestage7"),
]

PLAN_CASES: list[Bad] = [
    *_file_cases("plan"),
    Bad("plan-unknown-format", "plan", setting(("format",), "tidgap.plan/2"), "format"),
    Bad("problem-given-as-plan", "plan", setting(("format",), "tidgap.problem/1"), "format"),
    Bad("plan-problem-not-string", "plan", setting(("problem",), 3), "problem"),
    Bad("plan-unknown-key", "plan", setting(("foward",), [[24]] * 3), "foward"),
    Bad("forward-missing", "plan", deleting(("forward",)), "forward"),
    Bad("forward-not-a-list", "plan", setting(("forward",), 24), "forward"),
    Bad("partition-not-a-list", "plan", setting(("forward", 0), 24), "forward[0]"),
    # stage counts
    Bad("forward-fewer-stages", "plan", popping(("forward",)), "forward"),
    Bad("forward-more-stages", "plan", appending(("forward",), [24]), "forward"),
    Bad("backward-fewer-stages", "plan", popping(("backward",)), "backward"),
    Bad("backward-more-stages", "plan", appending(("backward",), [8, 8, 8]), "backward"),
    # partitions
    Bad("forward-sum-short", "plan", setting(("forward", 2), [12, 10]), "forward[2]"),
    Bad("backward-sum-over", "plan", appending(("backward", 1), 2), "backward[1]"),
    Bad("size-not-multiple-of-unit", "plan", setting(("forward", 0), [10, 3, 11]), "forward[0][1]"),
    Bad(
        "size-over-forward-cap",
        "plan",
        setting(("forward", 1), [2, 8, 2, 2, 2, 2, 2, 2, 2]),
        "forward[1][1]",
    ),
    Bad(
        # stage 0 has no forward cap: its backward cap comes from max_microbatch_backward
        "size-over-backward-cap",
        "plan",
        setting(("backward", 0), [8, 10, 6]),
        "backward[0][1]",
    ),
    Bad("size-over-backward-cap-s2", "plan", setting(("backward", 2), [14, 10]), "backward[2][0]"),
    Bad("empty-partition", "plan", setting(("forward", 1), []), "forward[1]"),
    Bad("zero-size", "plan", setting(("forward", 2), [0, 24]), "forward[2][0]"),
    Bad("negative-size", "plan", setting(("backward", 2), [-2, 12, 12, 2]), "backward[2][0]"),
    Bad("size-float", "plan", setting(("forward", 0), [12.0, 12]), "forward[0][0]"),
    Bad("size-true", "plan", setting(("forward", 0), [True, 22, 1]), "forward[0][0]"),
]

PROBLEM_COMMANDS: dict[str, tuple[str, ...]] = {
    "evaluate": ("evaluate", PROBLEM, PLAN),
    "evaluate-json": ("evaluate", PROBLEM, PLAN, "--json"),
    "schedule": ("evaluate", PROBLEM, "--schedule", "gpipe", "--microbatches", "4"),
    "compare-json": ("compare", PROBLEM, "--json"),
}
PLAN_COMMANDS: dict[str, tuple[str, ...]] = {
    "evaluate": ("evaluate", PROBLEM, PLAN),
    "evaluate-json": ("evaluate", PROBLEM, PLAN, "--json"),
    "compare": ("compare", PROBLEM, PLAN),
    "compare-json": ("compare", PROBLEM, PLAN, "--json"),
}


def _params(cases: list[Bad], commands: dict[str, tuple[str, ...]]) -> list[Any]:
    return [
        pytest.param(case, args, id=f"{case.id}-{name}")
        for case in cases
        for name, args in commands.items()
    ]


def _write(path: Path, document: Document) -> None:
    """Write ``document`` at ``path``: JSON, raw text, a directory, or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(document, Missing):
        return
    if isinstance(document, Directory):
        path.mkdir()
    elif isinstance(document, Raw):
        path.write_text(document, encoding="utf-8")
    else:
        write_json(path, document)


def _write_inputs(
    case_name: str, problem_edit: Edit | None = None, plan_edit: Edit | None = None
) -> None:
    """Write golden case ``case_name``'s problem and plan 0, each with an optional edit."""
    case = _case_named(case_name)
    problem: Document = case["problem"]
    plan: Document = plan_document(case, problem=problem["name"])
    _write(Path(PROBLEM), problem_edit(problem) if problem_edit else problem)
    _write(Path(PLAN), plan_edit(plan) if plan_edit else plan)


def assert_one_line_error(result: Result, file: str | None = None, field: str | None = None) -> str:
    """Exit 2, nothing on stdout, one ``tidgap: error:`` line naming ``file`` and ``field``."""
    assert not crashed(result), describe(result)
    assert result.exit_code == 2, describe(result)
    assert result.stdout == "", describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, describe(result)
    line = lines[0]
    assert line.startswith("tidgap: error: "), describe(result)
    rest = line.removeprefix("tidgap: error: ")
    if file is not None:
        assert rest.startswith(f"{file}: "), f"the error does not start with {file!r}: {line}"
        rest = rest.removeprefix(f"{file}: ")
        if field is not None:
            assert rest.startswith(field), f"the error does not name {field!r}: {line}"
            assert rest[len(field) : len(field) + 1] in (":", "[", "."), line
            assert rest.split(": ", 1)[-1].strip(), f"no reason after the field: {line}"
        else:
            assert rest.strip(), f"no reason given: {line}"
    return line


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every test in its own directory so files are named by relative paths."""
    monkeypatch.chdir(tmp_path)


def test_base_inputs_are_valid() -> None:
    """The unmutated inputs pass, so each failure below is due to its one mutation."""
    for name in {BASE, CAPPED, "onestage7"}:
        _write_inputs(name)
        for args in {*PROBLEM_COMMANDS.values(), *PLAN_COMMANDS.values()}:
            result = run_cli(*args)
            assert result.exit_code == 0, (name, args, describe(result))
            assert result.stderr == "", (name, args, describe(result))


def test_covering_tables_are_valid() -> None:
    """Tables exactly reaching what model.md asks for (link ``s`` backward: ``bcap_{s+1}``)."""
    edit = both(
        setting(("links", 1, "backward"), table(2, 12)),
        setting(("links", 1, "forward"), table(2, 6)),
        setting(("stages", 1, "backward"), table(2, 8)),
        setting(("stages", 2, "forward"), table(2, 24)),
    )
    _write_inputs(BASE, problem_edit=edit)
    result = run_cli("evaluate", PROBLEM, PLAN, "--json")
    assert result.exit_code == 0, describe(result)


@pytest.mark.parametrize(("case", "args"), _params(PROBLEM_CASES, PROBLEM_COMMANDS))
def test_bad_problem(case: Bad, args: tuple[str, ...]) -> None:
    """A broken problem file: one error line naming the problem file and the field."""
    _write_inputs(case.base, problem_edit=case.edit)
    assert_one_line_error(run_cli(*args), PROBLEM, case.field)


@pytest.mark.parametrize(("case", "args"), _params(PLAN_CASES, PLAN_COMMANDS))
def test_bad_plan(case: Bad, args: tuple[str, ...]) -> None:
    """A broken plan file: one error line naming the plan file and the field."""
    _write_inputs(case.base, plan_edit=case.edit)
    assert_one_line_error(run_cli(*args), PLAN, case.field)


def test_nan_is_written_literally() -> None:
    """The NaN cases really put ``NaN`` / ``Infinity`` in the file, as a user might."""
    _write_inputs(BASE, problem_edit=setting(("stages", 1, "tail"), math.nan))
    assert "NaN" in Path(PROBLEM).read_text(encoding="utf-8")
    _write_inputs(BASE, problem_edit=setting(("stages", 1, "tail"), math.inf))
    assert "Infinity" in Path(PROBLEM).read_text(encoding="utf-8")


# --- --schedule / --microbatches and other usage errors ---------------------------------------


def _capped_units() -> int:
    """``U`` of the capped case."""
    problem = _case_named(CAPPED)["problem"]
    return problem["batch_size"] // problem.get("unit", 1)


def test_capped_case_has_infeasible_small_m() -> None:
    """The premise of the cap case below: M=1 breaks a cap of ``linkheavy7``."""
    problem = tidgap.Problem.from_dict(_case_named(CAPPED)["problem"])
    assert problem.num_units == _capped_units()
    assert 1 not in tidgap.feasible_microbatch_counts(problem)
    assert 2 in tidgap.feasible_microbatch_counts(problem)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "pipedream"])
@pytest.mark.parametrize(
    "m",
    [
        pytest.param("0", id="zero"),
        pytest.param("-1", id="negative"),
        pytest.param(str(_capped_units() + 1), id="U+1"),
        pytest.param("1", id="breaks-cap"),
    ],
)
@pytest.mark.parametrize("json_flag", [(), ("--json",)], ids=["text", "json"])
def test_bad_microbatch_count(schedule: str, m: str, json_flag: tuple[str, ...]) -> None:
    """``--microbatches`` outside ``1..U`` or breaking a cap is bad input, named as such."""
    _write_inputs(CAPPED)
    result = run_cli("evaluate", PROBLEM, "--schedule", schedule, "--microbatches", m, *json_flag)
    line = assert_one_line_error(result)
    assert "--microbatches" in line, line


USAGE_CASES: list[Any] = [
    pytest.param(
        ("evaluate", PROBLEM, "--schedule", "gpipe"), "--microbatches", id="schedule-without-m"
    ),
    pytest.param(
        ("evaluate", PROBLEM, "--microbatches", "2"), "--schedule", id="m-without-schedule"
    ),
    pytest.param(
        ("evaluate", PROBLEM, PLAN, "--schedule", "gpipe", "--microbatches", "2"),
        "--schedule",
        id="plan-and-schedule",
    ),
    pytest.param(
        ("evaluate", PROBLEM, PLAN, "--schedule", "gpipe"), "", id="plan-and-schedule-no-m"
    ),
    pytest.param(("evaluate", PROBLEM, PLAN, "-m", "2"), "--microbatches", id="plan-and-m"),
    pytest.param(("evaluate", PROBLEM), "PLAN", id="neither-plan-nor-schedule"),
    pytest.param(
        ("evaluate", PROBLEM, "--schedule", "zb", "-m", "2"), "--schedule", id="unknown-schedule"
    ),
    pytest.param(
        ("evaluate", PROBLEM, "--schedule", "gpipe", "-m", "two"), "--microbatches", id="m-not-int"
    ),
    pytest.param(
        ("evaluate", PROBLEM, "--schedule", "gpipe", "-m", "2.0"), "--microbatches", id="m-float"
    ),
    pytest.param(("evaluate",), "PROBLEM", id="evaluate-no-problem"),
    pytest.param(("compare",), "PROBLEM", id="compare-no-problem"),
    pytest.param(("compare", PROBLEM, PLAN, PLAN), "", id="compare-extra-argument"),
    pytest.param(("examples", "extra"), "", id="examples-extra-argument"),
    pytest.param(("evaluate", PROBLEM, PLAN, "--jsn"), "--jsn", id="unknown-option"),
    pytest.param(("frobnicate",), "frobnicate", id="unknown-command"),
    pytest.param(("--nope",), "--nope", id="unknown-group-option"),
]


@pytest.mark.parametrize(("args", "mentions"), USAGE_CASES)
def test_usage_error(args: tuple[str, ...], mentions: str) -> None:
    """Bad usage: exit 2, nothing on stdout, one error line (no file name needed)."""
    _write_inputs(CAPPED)
    line = assert_one_line_error(run_cli(*args))
    assert mentions in line, line


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("evaluate", "example:no-such-example", PLAN), id="evaluate-plan"),
        pytest.param(
            ("evaluate", "example:no-such-example", "--schedule", "gpipe", "-m", "2"),
            id="evaluate-schedule",
        ),
        pytest.param(("compare", "example:no-such-example", "--json"), id="compare"),
    ],
)
def test_unknown_example(args: tuple[str, ...]) -> None:
    """An unknown ``example:NAME`` is bad input; the error names it as given."""
    _write_inputs(BASE)
    line = assert_one_line_error(run_cli(*args))
    assert "example:no-such-example" in line, line


def test_empty_example_name() -> None:
    """``example:`` with no name is bad input too."""
    _write_inputs(BASE)
    assert_one_line_error(run_cli("compare", "example:"))


@pytest.mark.parametrize("command", [["synth", "-s", "2", "-b", "8"], ["profile", "gpt"]])
def test_an_empty_name_is_refused(command: list[str]) -> None:
    """It was taken as none given: the problem got the default name, silently."""
    result = run_cli(*command, "--name", "")
    assert result.exit_code == 2
    assert result.stderr == "tidgap: error: --name: no name (an empty argument)\n"


def test_a_model_copied_with_an_update_is_validated() -> None:
    """pydantic's ``model_copy(update=...)`` skips validation: a problem copied with
    another batch size failed deep in a search (``size 16 lies outside the table 1..8``)."""
    problem = tidgap.load_problem("example:tiny-2")
    with pytest.raises(tidgap.InputError, match=r"^Problem: stages\[1\].forward.table.sizes: "):
        problem.model_copy(update={"batch_size": 16})
    with pytest.raises(tidgap.InputError, match="^Problem: bogus: unknown key"):
        problem.model_copy(update={"bogus": 1})
    with pytest.raises(tidgap.InputError, match="^Stage: tail: "):
        problem.stages[0].model_copy(update={"tail": -1.0})
    renamed = problem.model_copy(update={"name": "renamed"}, deep=True)
    assert renamed.name == "renamed" and renamed.stages == problem.stages
    assert problem.model_copy() == problem
