"""``no_recompute``: the windowed search returns only plans ``tidgap run`` executes without
recomputing forwards (every backward boundary a forward boundary)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tidgap
from tests.support.calibrations import order_tables
from tests.support.cli_helpers import describe, run_cli
from tidgap import load_problem
from tidgap.analysis.search_summary import summary_lines
from tidgap.model.examples import EXAMPLE_PREFIX, example_path
from tidgap.model.lists import stages_doing
from tidgap.model.problem import Problem
from tidgap.optimize.backward_rules import admitted_rule
from tidgap.optimize.driver import search
from tidgap.optimize.genome import decode_plan
from tidgap.optimize.order_genes import misaligned, recomputing_stages
from tidgap.runtime.lowering import recomputes


def random_sizes(rng: np.random.Generator, rows: int, total: int, width: int) -> np.ndarray:
    """``(rows, width)`` random compositions of ``total``, zero-padded."""
    out = np.zeros((rows, width), dtype=np.int32)
    for r in range(rows):
        parts = rng.integers(1, width + 1)
        cuts = np.sort(rng.choice(np.arange(1, total), parts - 1, replace=False))
        out[r, :parts] = np.diff(np.concatenate(([0], cuts, [total])))
    return out


def test_misaligned_and_recomputing_stages_agree_with_the_runtimes_recompute_rule() -> None:
    """On random partitions (and on aligned ones: backward = forward, or a coarsening)."""
    problem = load_problem(EXAMPLE_PREFIX + "tiny-2")
    rng = np.random.default_rng(7)
    S, U, K = problem.num_stages, problem.num_units, 6
    forward = random_sizes(rng, 64 * S, U, K).reshape(64, S, K)
    backward = random_sizes(rng, 64 * S, U, K).reshape(64, S, K)
    backward[:16] = forward[:16]
    flags = misaligned(forward, backward)
    stages = recomputing_stages(forward, backward)
    for p in range(len(forward)):
        plan = decode_plan(forward[p], backward[p], problem)
        assert stages[p].tolist() == recomputes(plan), p
        assert bool(flags[p]) == any(recomputes(plan)), p
    assert not flags[:16].any() and flags[16:].any()


@pytest.mark.parametrize("name", ["gpt1-14", "hetero-8"])
def test_the_constraint_binds_and_the_plan_needs_no_recompute(name: str) -> None:
    """Unconstrained, the same search returns a plan that recomputes; constrained, none does,
    and it is still never slower than the best 1F1B. The constraint only takes plans away:
    given the constrained plan, the free search returns one at least as fast (a free search
    alone may find a slower one: the GA is a heuristic)."""
    problem = load_problem(EXAMPLE_PREFIX + name)
    free = search(problem, generations=60, seed=0)
    held = search(problem, generations=60, seed=0, backward="aligned")
    assert any(recomputes(free.plan))
    assert not any(recomputes(held.plan))
    assert held.no_recompute and held.plan_document()["search"]["no_recompute"]
    assert held.evaluation.iteration_time <= held.baselines["1f1b"].iteration_time
    given = search(problem, generations=60, seed=0, initial_plans=[held.plan])
    assert given.evaluation.iteration_time <= held.evaluation.iteration_time


@pytest.mark.parametrize("name", ["vgg16", "gpt1-14", "hetero-8"])
@pytest.mark.parametrize("same_partition", [False, True])
def test_a_flush_search_returns_an_aligned_plan(name: str, same_partition: bool) -> None:
    """Flush, seeded and repaired: the best coarsening of a good forward; never slower than
    the best GPipe, never faster than the free flush search."""
    problem = load_problem(EXAMPLE_PREFIX + name)
    options = dict(schedule="flush", generations=60, seed=0, same_partition=same_partition)
    free = search(problem, **options)
    held = search(problem, backward="aligned", **options)
    assert not any(recomputes(held.plan))
    assert held.no_recompute and held.plan_document()["search"]["no_recompute"]
    assert held.evaluation.iteration_time <= held.baselines["gpipe"].iteration_time
    assert held.evaluation.iteration_time >= free.evaluation.iteration_time
    again = search(problem, backward="aligned", **options)
    assert again.plan == held.plan


def test_the_flush_constraint_binds_on_vgg16() -> None:
    """The free flush plan recomputes there; the aligned one does not and stays faster than
    the best GPipe (measured 1331.2 ms against 1897)."""
    problem = load_problem(EXAMPLE_PREFIX + "vgg16")
    free = search(problem, schedule="flush", generations=60, seed=0)
    held = search(problem, schedule="flush", generations=60, seed=0, backward="aligned")
    assert any(recomputes(free.plan)) and not any(recomputes(held.plan))
    assert held.evaluation.iteration_time < held.baselines["gpipe"].iteration_time


def test_the_cli_flush_search_without_recompute(tmp_path) -> None:
    out = tmp_path / "plan.json"
    result = run_cli(
        "search", "--schedule", "flush", "--no-recompute", "--generations", "20", "-q",
        "--out", str(out), EXAMPLE_PREFIX + "tiny-2",
    )  # fmt: skip
    assert result.exit_code == 0, describe(result)
    from tidgap.model.plan import load_plan

    problem = load_problem(EXAMPLE_PREFIX + "tiny-2")
    assert not any(recomputes(load_plan(out, problem)))


@pytest.mark.parametrize("extra", [[], ["--no-recompute"], ["--mirrored"]])
def test_the_summary_gives_tidgap_runs_prediction(tmp_path, extra: list[str]) -> None:
    """A plan that tidgap run runs at other op costs than the model's (recomputing stages,
    backwards over several stored forward chunks) gets a line with its prediction, in
    tidgap search's summary and in tidgap evaluate's report of the plan file; the
    --no-recompute one names no recomputing stage; a --mirrored one gets none."""
    from tidgap.model.plan import load_plan
    from tidgap.runtime.pricing import run_op_times, run_prediction

    out = tmp_path / "plan.json"
    result = run_cli(
        "search", "--generations", "30", "--seed", "0", "--out", str(out), *extra,
        EXAMPLE_PREFIX + "hetero-8",
    )  # fmt: skip
    assert result.exit_code == 0, describe(result)
    problem = load_problem(EXAMPLE_PREFIX + "hetero-8")
    plan = load_plan(out, problem)
    again = [s for s, flag in enumerate(recomputes(plan)) if flag]
    assert bool(again) == (not extra)
    lines = [line for line in result.stdout.splitlines() if line.startswith("  when run, ")]
    for command in ("evaluate", "compare"):  # compare's table and picture are the model's
        evaluated = run_cli(command, EXAMPLE_PREFIX + "hetero-8", str(out))
        assert evaluated.exit_code == 0, describe(evaluated)
        shown = [line for line in evaluated.stdout.splitlines() if line.startswith("  when run, ")]
        assert shown == lines, command
    if extra == ["--mirrored"]:
        assert not run_op_times(problem, plan)
    if not run_op_times(problem, plan):
        assert lines == []
        return
    priced = run_prediction(problem, plan, "run")[0].iteration_time
    assert len(lines) == 1 and f"tidgap run predicts {priced:.6g} ms" in lines[0]
    assert again == [] or f"{stages_doing(again, 'recompute')} (backward" in lines[0]
    assert ("recompute (backward" in lines[0] or "recomputes (backward" in lines[0]) == bool(again)


def with_batch_statistics(name: str, record: object) -> Problem:
    """Example ``name`` with ``source.batch_statistics`` set to ``record``."""
    document = json.loads(example_path(name).read_text())
    document["source"] = {"batch_statistics": record}
    return Problem.from_dict(document)


@pytest.mark.parametrize("schedule", ["flush", "windowed"])
def test_a_problem_recording_batch_statistics_is_searched_without_recompute(
    schedule: str,
) -> None:
    """``tidgap profile`` records the layers that normalise by their batch's statistics
    (``source.batch_statistics``); ``tidgap run`` refuses a recomputing stage holding one,
    so a free search of such a problem recomputes nowhere (it returned tiny-2's flush plan
    that recomputes on both stages), and says why."""
    name = "tiny-2" if schedule == "flush" else "hetero-8"  # each recomputes when free
    problem = load_problem(EXAMPLE_PREFIX + name)
    assert any(recomputes(search(problem, schedule=schedule, generations=10).plan))
    recorded = with_batch_statistics(name, {"layers": ["1 (BatchNorm1d)", "4\n(x)"]})
    assert recorded.batch_statistics_layers == ["1 (BatchNorm1d)", "4\\n(x)"]
    held = search(recorded, schedule=schedule, generations=10)
    assert not any(recomputes(held.plan))
    assert held.backward == "aligned" and held.plan_document()["search"]["no_recompute"]
    lines = summary_lines(held)
    assert (
        "  recomputing on no stage: layers 1 (BatchNorm1d) and 1 other normalise by their "
        "batch's statistics (source.batch_statistics), and tidgap run refuses a recomputing "
        "stage holding one"
    ) in lines
    assert not any(
        "recomputing on no stage" in line
        for line in summary_lines(
            search(problem, schedule=schedule, generations=10, backward="aligned")
        )
    )
    mirrored = search(recorded, schedule=schedule, generations=10, backward="mirrored")
    assert mirrored.backward == "mirrored"


def test_a_flush_fitness_refused_for_such_a_problem_says_why() -> None:
    """The caller gave no rule, so 'drop the rule' alone could not be followed."""
    recorded = with_batch_statistics("tiny-2", {"layers": ["1 (BatchNorm1d)"]})
    with pytest.raises(ValueError, match=r"takes no fitness .*source.batch_statistics"):
        tidgap.Optimizer(recorded, schedule="flush", fitness=lambda p, s: s.halves)


def test_a_calibration_with_order_tables_alone_is_run_priced() -> None:
    """calibrate skips the recomputing twins of such a problem: its order tables alone must
    still make auto pricing run pricing (it keyed on the recompute tables)."""
    document = json.loads(example_path("tiny-2").read_text())
    document["source"] = {
        "batch_statistics": {"layers": ["1 (BatchNorm1d)"]},
        "calibration": {"order": order_tables(document["stages"])},
    }
    problem = Problem.from_dict(document)
    assert problem.recompute_times is None and problem.order_times is not None
    assert search(problem, generations=2).pricing == "run"


@pytest.mark.parametrize("record", [None, [], {"layers": "1"}, {"layers": [1]}, {"layers": []}])
def test_a_malformed_or_empty_batch_statistics_record_is_left_out(record: object) -> None:
    """``source`` is free-form (formats.md): a record that names no layer changes nothing."""
    problem = with_batch_statistics("tiny-2", record)
    assert problem.batch_statistics_layers == []
    assert admitted_rule("free", problem) == "free"
