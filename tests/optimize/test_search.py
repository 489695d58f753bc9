"""The search: optimum on tiny golden cases, never worse than GPipe, reproducible."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import case_id, flush_searchable_cases
from tests.support.outliers import with_outlier
from tidgap import Plan, Problem, check_plan, evaluate, load_problem
from tidgap.cli import cli
from tidgap.model.examples import example_names
from tidgap.optimize.driver import search

SEARCHABLE = flush_searchable_cases()
TINY = [case for case in SEARCHABLE if "optimum" in case]


@pytest.mark.parametrize("case", TINY, ids=case_id)
def test_default_search_finds_the_proven_optimum(case: dict[str, Any]) -> None:
    problem = Problem.from_dict(case["problem"])
    result = search(problem, schedule="flush", time_limit=10)
    assert result.evaluation.iteration_time == pytest.approx(
        case["optimum"]["iteration_time"], rel=1e-9
    )


@pytest.mark.parametrize("case", SEARCHABLE, ids=case_id)
def test_never_worse_than_the_best_gpipe(case: dict[str, Any]) -> None:
    problem = Problem.from_dict(case["problem"])
    result = search(problem, generations=5, population=64)
    check_plan(result.plan, problem)
    gpipe = case["best_baselines"]["gpipe"]["iteration_time"]
    assert result.evaluation.iteration_time <= gpipe * (1 + 1e-9)
    assert result.evaluation == evaluate(problem, result.plan)


def test_same_seed_same_plan_across_runs_and_backends() -> None:
    problem = load_problem("example:hetero-8")
    runs = [
        search(problem, seed=3, generations=15, population=128, backend=backend)
        for backend in ("numpy", "numpy", "numba")
    ]
    plans = [(r.plan.forward, r.plan.backward) for r in runs]
    assert plans[0] == plans[1] == plans[2]


def test_plan_document_round_trips(tmp_path: Path) -> None:
    problem = load_problem("example:tiny-2")
    result = search(problem, generations=3, population=32)
    document = result.plan_document()
    assert set(document) >= {"format", "forward", "backward", "predicted", "baselines", "search"}
    assert document["search"]["generations"] == 3
    plan = Plan.from_dict(json.loads(json.dumps(document)))
    assert evaluate(problem, plan).iteration_time == document["predicted"]["iteration_time"]


@pytest.mark.parametrize("name", example_names())
def test_cli_search_on_every_example_writes_a_plan_evaluate_accepts(
    name: str, tmp_path: Path
) -> None:
    out = tmp_path / "plan.json"
    runner = CliRunner()
    result = runner.invoke(
        cli,
        [
            "search",
            f"example:{name}",
            "--generations",
            "3",
            "--population",
            "32",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "gpipe" in result.stdout and "global DP" in result.stdout
    written = json.loads(out.read_text())
    evaluated = runner.invoke(cli, ["evaluate", f"example:{name}", str(out), "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.stdout) == written["predicted"]


def test_cli_search_without_problem_uses_the_default_example() -> None:
    result = CliRunner().invoke(cli, ["search", "--generations", "1", "--population", "16", "-q"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("gpt1-14:")


def test_cli_search_json_is_one_plan_document() -> None:
    result = CliRunner().invoke(
        cli, ["search", "example:tiny-2", "--generations", "2", "--population", "16", "--json"]
    )
    assert result.exit_code == 0
    assert json.loads(result.stdout)["format"] == "tidgap.plan/1"


def test_cli_search_refuses_an_unwritable_out_before_searching(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "plan.json"
    result = CliRunner().invoke(cli, ["search", "example:tiny-2", "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and str(out) in result.stderr
    assert not out.parent.exists()


def test_cli_search_on_bad_input_leaves_an_existing_out_untouched(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    out.write_text("precious")
    bad = tmp_path / "problem.json"
    bad.write_text('{"format": "tidgap.problem/1", "batch_size": 0, "stages": []}')
    result = CliRunner().invoke(cli, ["search", str(bad), "--out", str(out)])
    assert result.exit_code == 2
    assert out.read_text() == "precious"
    assert list(tmp_path.iterdir()) == [bad, out] or sorted(tmp_path.iterdir()) == sorted(
        [bad, out]
    )


def test_progress_line_rewrites_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tidgap.cli.progress import ProgressLine
    from tidgap.optimize.driver import SearchProgress

    monkeypatch.setenv("COLUMNS", "200")
    line = ProgressLine("ms", refresh=1e9)
    line(SearchProgress(3, 3000, 0.5, 95.0, 100.0))
    line(SearchProgress(4, 4000, 1.0, 90.0, 100.0))
    line.close()
    err = capsys.readouterr().err
    assert err.count("\r") == 2 and err.endswith("\n") and err.count("\n") == 1
    last = err.split("\r")[-1]
    assert "generation      4" in last and "4e+03 evaluations/s" in last
    assert "best 90 ms" in last and "+11.11% vs GPipe" in last


@pytest.mark.parametrize("columns", ["30", "5"])
def test_progress_line_fits_the_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: str
) -> None:
    """A line wider than the terminal wrapped, and each redraw began a new row."""
    from tidgap.cli.progress import ProgressLine
    from tidgap.optimize.driver import SearchProgress

    monkeypatch.setenv("COLUMNS", columns)
    line = ProgressLine("ms", refresh=1e9)
    line.phase("baselines")
    line(SearchProgress(4, 4000, 1.0, 90.0, 100.0))
    line.stopping("SIGINT")
    line.close()
    drawn = capsys.readouterr().err.split("\r")[1:]
    assert len(drawn) == 2  # the notice is written straight to the descriptor
    assert [len(d.rstrip("\n").removesuffix("\x1b[K")) for d in drawn] == [int(columns) - 1] * 2
    assert drawn[1].startswith("generation      4"[: int(columns) - 1])


@pytest.mark.parametrize("columns", ["²", "0", "-3", "abc"])
def test_a_columns_that_is_no_width_is_ignored(
    monkeypatch: pytest.MonkeyPatch, columns: str
) -> None:
    """``COLUMNS=²`` made the progress line raise (``"²".isdigit()``, not ``int()``)."""
    from tidgap.cli.progress import terminal_columns

    monkeypatch.delenv("COLUMNS", raising=False)
    unset = terminal_columns()
    monkeypatch.setenv("COLUMNS", columns)
    assert terminal_columns() == unset


def test_progress_reaches_the_callback_every_generation() -> None:
    seen = []
    search(load_problem("example:tiny-2"), generations=7, population=16, on_progress=seen.append)
    assert [p.generation for p in seen] == list(range(1, 8))
    assert all(p.best_time <= p.gpipe_time * (1 + 1e-9) for p in seen)
    assert seen[-1].evaluations > seen[0].evaluations


def test_an_ordered_initial_plan_is_refused_not_taken_as_its_partitions() -> None:
    problem = load_problem("example:tiny-2")
    ordered = Plan.of([[4, 4]] * 2, [[4, 4]] * 2, order=["FFBB", "FBFB"])
    with pytest.raises(ValueError, match=r"initial_plans\[1\] has an order"):
        search(
            problem,
            schedule="flush",
            generations=1,
            initial_plans=[Plan.of([[8]] * 2, [[8]] * 2), ordered],
        )


def test_the_searched_family_is_separable_and_its_reference_gives_the_result() -> None:
    """The dual GA needs ``iteration = forward_end + backward_span``; the result's evaluation
    is the searched family's reference."""
    from tidgap.optimize.flush_driver import SEARCHED

    assert SEARCHED.separable and SEARCHED.has_flush
    problem = load_problem("example:tiny-2")
    result = search(problem, schedule="flush", generations=2)
    assert result.evaluation == SEARCHED.evaluate(problem, result.plan)


@pytest.mark.parametrize("schedule", ["flush", "windowed"])
def test_a_time_limited_search_runs_to_its_limit(schedule: str) -> None:
    """The polish ends early at a local optimum; the time left goes to more rounds (flush:
    generations; windowed: annealing), so the search ends within the last share of its
    limit, and the plan is never worse than the baselines it is compared with."""
    from tidgap.optimize.preparation import MORE_ROUNDS_SHARE

    problem = load_problem("example:gpt1-14")
    result = search(problem, seed=0, time_limit=2.0, backend="numba", schedule=schedule)
    compile_time = result.setup.get("flush compile", 0.0) + result.setup["compile"]
    assert result.wall_time - compile_time >= 2.0 * (1 - MORE_ROUNDS_SHARE)
    assert result.stop_reason == "time limit"
    assert result.evaluation.iteration_time <= result.baselines["gpipe"].iteration_time


def test_one_absurd_table_entry_does_not_blind_the_search() -> None:
    """1e14 ms at one size made the tick 8 ms, coarser than every op: the windowed search
    returned the best 1F1B (24.58 ms; 21.57-21.67 without the entry), the flush search a
    plan slower than the best GPipe (26.30 ms against 25.30)."""
    problem = with_outlier(1e14)
    windowed = search(problem, seed=0, generations=5, population=64)
    assert windowed.evaluation.iteration_time < 0.9 * windowed.baselines["1f1b"].iteration_time
    flush = search(problem, seed=0, generations=5, population=64, schedule="flush")
    assert flush.evaluation.iteration_time < flush.baselines["gpipe"].iteration_time


def test_a_memory_limit_keeps_the_table_entries_its_plans_need() -> None:
    """Stage 1 may hold 2 of 3 samples. The tables were clamped to 64 times the fastest
    serial equal plan, which holds the whole batch on one microbatch (0.01 ms at 3
    samples): 1000 and 10000 ms both became 129 ms, though every plan within the limit
    runs such ops, and the search returned a 13002 ms plan where 1F1B(3), within the
    limit, takes 6002 ms and a searched one 5002 ms."""
    from tidgap.optimize.limits import stage_level
    from tidgap.optimize.memory_seeds import fastest_one_f_one_b_within

    flat = {"affine": {"base": 1, "per_sample": 0}}
    free = {"affine": {"base": 0, "per_sample": 0}}
    problem = Problem.from_dict(
        {
            "format": "tidgap.problem/1",
            "batch_size": 3,
            "stages": [
                {"forward": flat, "backward": flat, "activation_bytes": 1},
                {
                    "forward": {"table": {"sizes": [1, 2, 3], "times": [1000, 10000, 0.01]}},
                    "backward": {"table": {"sizes": [1, 2, 3], "times": [1000, 1000, 0.01]}},
                    "activation_bytes": 1,
                    "memory_limit": 2,
                },
            ],
            "links": [{"forward": free, "backward": free}],
        }
    )
    within = fastest_one_f_one_b_within(problem, stage_level(problem))
    assert within is not None and within.iteration_time == pytest.approx(6002)
    for backend in ("numpy", "numba"):
        result = search(problem, seed=0, generations=5, population=32, backend=backend)
        assert result.evaluation.over_memory_limit == []
        assert result.evaluation.iteration_time <= 5002 * (1 + 1e-9)


def blinded_problem(entry: float) -> Problem:
    """4 stages of 8 samples, tabulated forwards of 0.01-0.06 ms, stage 0 holding at most 2
    samples (no 1F1B fits), stage 3's forward of all 8 samples ``entry`` ms."""
    sizes = list(range(1, 9))

    def stage(s: int) -> dict[str, Any]:
        times = [0.01 + 0.005 * b * (1 + 0.3 * (s % 2)) for b in sizes]
        if s == 3:
            times[-1] = entry
        backward = {"affine": {"base": 0.01, "per_sample": 0.01 * (1 + 0.2 * s)}}
        document = {"forward": {"table": {"sizes": sizes, "times": times}}, "backward": backward}
        return document | {"activation_bytes": 1} | ({"memory_limit": 2} if s == 0 else {})

    link = {"affine": {"base": 0.001, "per_sample": 0.0005}}
    return Problem.from_dict(
        {
            "format": "tidgap.problem/1",
            "batch_size": 8,
            "stages": [stage(s) for s in range(4)],
            "links": [{"forward": link, "backward": link}] * 3,
        }
    )


def test_an_absurd_entry_under_a_limit_no_1f1b_meets() -> None:
    """With no 1F1B within the limit the clamp was dropped: 1e14 ms made the tick 1 ms and
    the search returned 0.968 ms where it finds 0.712 without the entry. The capped 1F1B
    seed within the limit now bounds the entries."""
    plain = search(blinded_problem(1.0), seed=1, generations=5, population=64)
    blinded = search(blinded_problem(1e14), seed=1, generations=5, population=64)
    assert blinded.evaluation.over_memory_limit == []
    assert blinded.evaluation.iteration_time <= plain.evaluation.iteration_time * 1.01


def test_a_given_width_bounds_the_entries_by_a_1f1b_it_holds() -> None:
    """Stage 1 may hold 3 of 4 samples; its sizes 2 and 3 take 1e5 and 1e6 ms. The ceiling
    came from 1F1B(4), which a width of 2 cannot hold, and clamped both sizes alike: the
    search returned 2e6 ms where 1F1B(2), within the limit and the width, takes 400002."""
    flat = {"affine": {"base": 1, "per_sample": 0}}
    free = {"affine": {"base": 0, "per_sample": 0}}
    table = {"table": {"sizes": [1, 2, 3, 4], "times": [1, 1e5, 1e6, 0.01]}}
    problem = Problem.from_dict(
        {
            "format": "tidgap.problem/1",
            "batch_size": 4,
            "stages": [
                {"forward": flat, "backward": flat, "activation_bytes": 1},
                {"forward": table, "backward": table, "activation_bytes": 1, "memory_limit": 3},
            ],
            "links": [{"forward": free, "backward": free}],
        }
    )
    result = search(problem, seed=1, generations=5, population=64, max_microbatches=2)
    assert result.evaluation.iteration_time <= 400002 * (1 + 1e-9)


def test_a_lean_first_search_left_no_time_draws_no_random_population() -> None:
    """A windowed search's first (flush) search, lean, where the time left would not cover
    drawing its random chromosomes holds its :data:`LEAN_POPULATION` fittest seeds per
    side; on generations, or not lean, the whole population."""
    from tidgap.optimize import flush_driver
    from tidgap.optimize.ga import DEFAULT_POPULATION
    from tidgap.profiling.synth import synth_problem

    problem = Problem.from_dict(synth_problem(3, stages=16, batch_size=64))
    lean = flush_driver.prepare_flush(problem, seed=0, time_limit=1e-3, lean=True)
    assert [side.genes.shape[0] for side in lean.optimizer.sides] == [
        flush_driver.LEAN_POPULATION
    ] * 2
    for options in (dict(time_limit=1e-3), dict(generations=1, lean=True)):
        run = flush_driver.prepare_flush(problem, seed=0, **options)
        assert [side.genes.shape[0] for side in run.optimizer.sides] == [DEFAULT_POPULATION] * 2
