"""``tidgap compare --pricing``: the rows timed and their memory counted as ``tidgap run``
runs and holds plans, or as the model does; ``auto`` as ``tidgap search``'s default for the
plan's family, so the rows of a calibrated problem and its search's plan are the ones the
search's summary shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.optimize.test_run_memory import GPT_MEMORY, cheap_ops, profiled
from tests.optimize.test_run_priced_search import calibrated
from tests.support.cli_helpers import describe, json_output, run_cli, write_json
from tidgap import Plan, Problem, search
from tidgap.optimize.run_memory import run_evaluated
from tidgap.runtime.pricing import run_evaluation, run_priced_baselines
from tidgap.schedules.baselines import best_baselines
from tidgap.schedules.families import SCHEDULES, evaluate


def problem_file(tmp_path: Path, problem: Problem) -> str:
    """``problem`` written as a problem file; its path."""
    return str(write_json(tmp_path / "p.json", problem.model_dump(mode="json", exclude_none=True)))


def rows_of(*args: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``tidgap compare ARGS --json``: the document and its rows by schedule."""
    document = json_output(run_cli("compare", *args, "--json"))
    return document, {row["schedule"]: row for row in document["rows"]}


def test_run_pricing_counts_memory_as_the_run_holds_it(tmp_path: Path) -> None:
    """Stage 0 limited to the samples the best 1F1B holds there: within the limit by the
    model, over it as ``tidgap run`` holds it (its graphs), as a run-priced search's
    summary marks it; ``compare`` said within at every pricing."""
    limit = 2 * GPT_MEMORY["activation_bytes"][0]
    problem = profiled(cheap_ops(limit), GPT_MEMORY)
    path = problem_file(tmp_path, problem)
    plan = SCHEDULES["1f1b"].baseline(problem, 8)
    held = run_evaluated(problem, plan, evaluate(problem, plan)).peak_memory
    document, run = rows_of(path, "--pricing", "run")
    assert document["pricing"] == "run"
    assert run["1f1b"]["microbatches"] == "8" and run["1f1b"]["peak_memory"] == held
    assert run["1f1b"]["over_memory_limit"] == [0]
    for pricing in ("model", "auto"):  # not calibrated: auto is the model's
        document, model = rows_of(path, "--pricing", pricing)
        assert document["pricing"] == "model"
        assert model["1f1b"]["over_memory_limit"] == []
        assert model["1f1b"]["peak_memory"] == evaluate(problem, plan).peak_memory
    text = run_cli("compare", path, "--pricing", "run")
    assert text.exit_code == 0, describe(text)
    assert "priced as tidgap run runs and holds plans" in text.output
    assert "over (stage 0)" in text.output and "lower bound" not in text.output
    assert "priced as" not in run_cli("compare", path).output


def test_auto_pricing_gives_the_rows_of_the_search_summary(tmp_path: Path) -> None:
    """A calibrated problem with order tables: ``compare PROBLEM PLAN`` prices the plan and
    the best baselines as the (run-priced) search that found the plan did, and draws the
    run's timelines; ``--pricing model`` gives the model's."""
    problem = calibrated("med7_1", order=True)
    result = search(problem, seed=2, generations=30, population=32)
    assert result.pricing == "run"
    path = problem_file(tmp_path, problem)
    plan = str(write_json(tmp_path / "plan.json", result.plan_document()))
    gantt = tmp_path / "plan.svg"
    document, rows = rows_of(path, plan, "--gantt", str(gantt))
    assert document["pricing"] == "run" and gantt.stat().st_size > 0
    assert rows["plan"]["iteration_time"] == pytest.approx(result.evaluation.iteration_time)
    for name in ("gpipe", "1f1b"):
        best = result.baselines[name]
        assert rows[name]["microbatches"] == str(best.microbatches), name
        assert rows[name]["iteration_time"] == pytest.approx(best.iteration_time), name
    trace = tmp_path / "plan.trace.json"
    done = run_cli("compare", path, plan, "--trace", str(trace))
    assert done.exit_code == 0 and "priced as tidgap run" in done.output, describe(done)
    assert trace.stat().st_size > 0
    _, model = rows_of(path, plan, "--pricing", "model")
    model_best = best_baselines(problem)
    assert run_priced_baselines(problem, model_best) != model_best  # the two differ here
    for name in ("gpipe", "1f1b"):
        assert model[name]["iteration_time"] == pytest.approx(model_best[name].iteration_time)
    model_plan = evaluate(problem, result.plan).iteration_time
    assert model["plan"]["iteration_time"] == pytest.approx(model_plan)
    assert model_plan != pytest.approx(run_evaluation(problem, result.plan).iteration_time)


def test_auto_pricing_prices_a_flush_plan_as_its_search_did(tmp_path: Path) -> None:
    """A flush search of a calibrated problem is priced by the model (run pricing prices
    ordered plans): ``compare``'s ``auto`` gives its plan and baselines the model's times,
    as the search's summary did, where it gave them the run's (the baselines of an ordered
    plan's search)."""
    problem = calibrated("med7_1", order=True)
    result = search(problem, schedule="flush", seed=0, generations=10, population=16)
    assert result.pricing == "model"
    path = problem_file(tmp_path, problem)
    plan = str(write_json(tmp_path / "plan.json", result.plan_document()))
    document, rows = rows_of(path, plan)
    assert document["pricing"] == "model"
    assert rows["plan"]["iteration_time"] == pytest.approx(result.evaluation.iteration_time)
    for name in ("gpipe", "1f1b"):
        assert rows[name]["iteration_time"] == pytest.approx(result.baselines[name].iteration_time)
    assert rows_of(path)[0]["pricing"] == "run"  # no plan: as a windowed search
    assert "lower bound for any flush plan" in run_cli("compare", path, plan).output


def test_auto_pricing_prices_a_plan_with_the_flush_order_as_its_windowed_search_did(
    tmp_path: Path,
) -> None:
    """A windowed search writes ``order`` also where its plan runs in the flush order (a
    GPipe-like winner); ``compare``'s ``auto`` priced such a plan by the model, as a flush
    plan, so it read slower than its search's summary said."""
    problem = calibrated("med7_1", order=True)
    forward = SCHEDULES["gpipe"].baseline(problem, 8).forward
    backward = SCHEDULES["gpipe"].baseline(problem, 4).backward  # two graphs each, as run
    order = ["F" * len(f) + "B" * len(b) for f, b in zip(forward, backward, strict=True)]
    plan = Plan.of(forward, backward, order=order)
    run, model = run_evaluation(problem, plan), evaluate(problem, plan)
    assert run.iteration_time != pytest.approx(model.iteration_time)  # the two differ here
    path = problem_file(tmp_path, problem)
    plan_path = str(write_json(tmp_path / "plan.json", plan.document()))
    document, rows = rows_of(path, plan_path)
    assert document["pricing"] == "run"
    assert rows["plan"]["iteration_time"] == pytest.approx(run.iteration_time)
    flush = str(write_json(tmp_path / "flush.json", Plan.of(forward, backward).document()))
    assert rows_of(path, flush)[0]["pricing"] == "model"  # without order: a flush plan's


@pytest.mark.parametrize("limit", ["1f1b", "4MB"])
def test_run_memory_marks_the_rows_as_the_search_holds_plans(tmp_path: Path, limit: str) -> None:
    """Memory counted as ``tidgap run`` holds plans: the rows over the limit in force, by the
    run's bytes against what the search allows, are marked in the search's table and in
    ``compare --pricing run --memory-limit`` (neither marked any: GPipe(8)'s 17.2 MB stood
    unmarked beside a 4 MB limit); the plan and the best 1F1B are within."""
    path = problem_file(tmp_path, profiled(cheap_ops(), GPT_MEMORY))
    plan = str(tmp_path / "plan.json")
    limited = ("--pricing", "run", "--memory-limit", limit)
    searched = run_cli("search", path, *limited, "--generations", "5", "--out", plan)
    assert searched.exit_code == 0, describe(searched)
    table = {line.split()[0]: line for line in searched.output.splitlines()}
    assert table["gpipe"].endswith("over (stages 0, 1)")
    assert "over" not in table["tidgap"] and "over" not in table["1f1b"]
    _, rows = rows_of(path, plan, *limited)
    assert rows["gpipe"]["over_memory_limit"] == [0, 1]
    assert rows["plan"]["over_memory_limit"] == [] == rows["1f1b"]["over_memory_limit"]
    assert rows_of(path, plan, "--pricing", "run")[1]["gpipe"]["over_memory_limit"] == []


def test_an_unknown_pricing_is_one_line(tmp_path: Path) -> None:
    done = run_cli("compare", "example:tiny-2", "--pricing", "fast")
    assert done.exit_code == 2
    assert "'fast' is not one of 'auto', 'model', 'run'" in done.output


def test_a_memory_limit_marks_the_rows_as_the_search_summary_does(tmp_path: Path) -> None:
    """``--memory-limit`` marks the rows over it (model memory), as a search's table under
    that limit does; without it nothing is marked there; bytes need activation_bytes."""
    plan = str(tmp_path / "plan.json")
    searched = run_cli(
        "search", "example:tiny-2", "--memory-limit", "1f1b", "--generations", "5", "--out", plan
    )
    assert searched.exit_code == 0, describe(searched)
    summary = [line for line in searched.output.splitlines() if line.startswith("gpipe ")]
    _, rows = rows_of("example:tiny-2", plan, "--memory-limit", "1f1b")
    assert rows["gpipe"]["over_memory_limit"] == [1] and "over (stage 1)" in summary[0]
    assert not rows["1f1b"]["over_memory_limit"] and not rows["plan"]["over_memory_limit"]
    assert not rows_of("example:tiny-2", plan)[1]["gpipe"]["over_memory_limit"]
    text = run_cli("compare", "example:tiny-2", plan, "--memory-limit", "1f1b")
    assert [line for line in text.output.splitlines() if line.startswith("gpipe ")] == summary
    refused = run_cli("compare", "example:tiny-2", "--memory-limit", "5GB")
    assert refused.exit_code == 2 and "--memory-limit: a limit in bytes" in refused.stderr
