"""Bad input in a plan's ``order`` and ``windows`` (formats.md): one line naming the field,
exit status 2, nothing evaluated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import case_named, plan_document, run_cli, write_json
from tidgap import InputError, Plan

CASE = "tiny7_0"


def _flush_letters() -> list[str]:
    plan = case_named(CASE)["plans"][0]
    pairs = zip(plan["forward"], plan["backward"], strict=True)
    return ["F" * len(f) + "B" * len(b) for f, b in pairs]


def _with(**fields: Any) -> dict[str, Any]:
    return plan_document(case_named(CASE), **fields)


def _lower_first(letters: list[str]) -> list[str]:
    return [letters[0].lower(), *letters[1:]]


BAD = [
    (_with(windows=[0, 5, 5, 5]), "windows[0]", "must be > 0"),
    (_with(windows=[-3, 5, 5, 5]), "windows[0]", "must be > 0"),
    (_with(windows=[2.5, 5, 5, 5]), "windows[0]", "integer"),
    (_with(windows=[True, 5, 5, 5]), "windows[0]", "integer"),
    (_with(windows=[5, 5]), "windows", "has 2 stage(s), the problem has 4"),
    (_with(order=_flush_letters()[:3]), "order", "has 3 stage(s), the problem has 4"),
    (_with(order=["FxB", *_flush_letters()[1:]]), "order[0]", "letters other than F and B: 'x'"),
    (_with(order=_lower_first(_flush_letters())), "order[0]", "letters other than F and B"),
    (_with(order=[_flush_letters()[0] + "F", *_flush_letters()[1:]]), "order[0]", "rule count"),
    (_with(order=[7, *_flush_letters()[1:]]), "order[0]", "string"),
    (_with(order="FFBB"), "order", "list"),
    (_with(order=_flush_letters(), windows=[5, 5, 5, 5]), "windows", "give order or windows"),
    (_with(order=None), "order", "is null; leave it out for a flush plan"),
    (_with(windows=None), "windows", "is null"),
]


def test_sizes_are_checked_before_the_order(tmp_path: Path) -> None:
    """A plan with bad sizes and both order and windows reports the sizes (input-rules.md:
    the order is checked after the sizes)."""
    document = _with(order=_flush_letters(), windows=[5, 5, 5, 5])
    document["forward"][1][0] += 2  # a multiple of unit, but the sum is off
    problem = write_json(tmp_path / "problem.json", case_named(CASE)["problem"])
    plan = write_json(tmp_path / "plan.json", document)
    result = run_cli("evaluate", str(problem), str(plan))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"tidgap: error: {plan}: forward[1]: "), result.stderr


@pytest.mark.parametrize(("document", "field", "words"), BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_order_fields_are_one_line_naming_the_field(
    tmp_path: Path, document: dict[str, Any], field: str, words: str
) -> None:
    problem = write_json(tmp_path / "problem.json", case_named(CASE)["problem"])
    plan = write_json(tmp_path / "plan.json", document)
    result = run_cli("evaluate", str(problem), str(plan))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"tidgap: error: {plan}: {field}: "), result.stderr
    assert words in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_a_plans_source_is_free_form_and_kept(tmp_path: Path) -> None:
    """formats.md: free-form information goes under ``source``, kept as is (a plan with
    one was refused: 'source: unknown key')."""
    from tidgap.model.plan import load_plan
    from tidgap.model.problem import load_problem

    source = {"note": "from my planner", "run": [1, {"at": None}]}
    document = {"format": "tidgap.plan/1", "forward": [[4, 4], [8]], "backward": [[8], [8]]}
    path = write_json(tmp_path / "plan.json", document | {"source": source})
    plan = load_plan(path, load_problem("example:tiny-2"))
    assert plan.source == source and plan.document()["source"] == source


@pytest.mark.parametrize(("field", "value"), [("order", "FFBB"), ("order", 3), ("windows", 5)])
def test_an_order_built_in_python_that_is_no_list_is_refused_naming_it(
    field: str, value: object
) -> None:
    """``Plan.of(order="FFBB")`` made a stage of each letter (refused later as 'has 4
    stage(s)'); ``order=3`` raised ``TypeError: 'int' object is not iterable``."""
    with pytest.raises(InputError, match=rf"^plan: {field}: must be a list \(got "):
        Plan.of([[4, 4]], [[4, 4]], **{field: value})


def test_an_order_may_be_any_sequence_and_a_copy_may_drop_it() -> None:
    """``windows=range(...)`` and generators worked before the check above; a copy with
    ``order=None`` gives the flush plan (it hit the file's refusal of an explicit null)."""
    assert Plan.of([[4, 4]], [[4, 4]], windows=range(1, 2)).windows == [1]
    plan = Plan.of([[4, 4]], [[4, 4]], order=(row for row in ["FFBB"]))
    assert plan.order == ["FFBB"]
    assert plan.model_copy(update={"order": None}).order is None
