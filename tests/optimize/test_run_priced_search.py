"""Searches priced as ``tidgap run`` runs their plans (``pricing="run"``, the default for a
windowed search of a calibrated problem): the result's times are the runtime pricing's, the
result is never slower than the best 1F1B or GPipe priced so, the same seed gives the same
plan on every backend, and flush searches refuse it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tidgap
from tests.conftest import golden_cases
from tests.support.backends import install_fake_cupy
from tests.support.calibrations import order_tables
from tests.support.state_files import same_search, stopped_once_saved
from tidgap import InputError, Problem, evaluate, search
from tidgap.optimize.anneal_checkpoint import ga_part
from tidgap.optimize.checkpoint import ANNEAL_PHASE, MIRRORED_PHASE, load_state, write_state
from tidgap.optimize.results import SearchResult
from tidgap.runtime.pricing import run_evaluation, run_priced_baselines
from tidgap.schedules.baselines import best_baselines

OPTIONS: dict[str, Any] = {"seed": 2, "generations": 30, "population": 32}


def calibrated(name: str, order: bool = False) -> Problem:
    """Golden problem ``name`` with a calibration's recompute tables, as ``tidgap
    calibrate`` writes them: here the stage's own (recomputing then costs nothing more, so
    the runtime's prices differ from the model's in stored-graph merges); with ``order``,
    its order tables too (:func:`tests.support.calibrations.order_tables`)."""
    data = next(c["problem"] for c in golden_cases() if c["problem"]["name"] == name)
    recompute = [{"forward": st["forward"], "backward": st["backward"]} for st in data["stages"]]
    data["source"] = {"calibration": {"recompute": recompute}}
    if order:
        data["source"]["calibration"]["order"] = order_tables(data["stages"])
    return Problem.from_dict(data)


def run_priced(problem: Problem, result: SearchResult) -> list[float]:
    """Each trade-off plan's time as the runtime pricing gives it."""
    return [
        run_evaluation(problem, p.plan).iteration_time
        for p in result.tradeoff
        if p.plan is not None
    ]


@pytest.mark.parametrize(
    ("name", "order"), [("tiny7_2", False), ("med7_1", False), ("med7_1", True)]
)
def test_a_calibrated_problem_is_priced_as_the_runtime_runs_it(name: str, order: bool) -> None:
    problem = calibrated(name, order)
    result = search(problem, **OPTIONS)
    assert result.pricing == "run"
    times = [p.evaluation.iteration_time for p in result.tradeoff if p.evaluation is not None]
    assert times == pytest.approx(run_priced(problem, result), rel=1e-9)
    assert result.plan_document()["search"]["pricing"] == "run"
    # the baselines as the runtime prices them (with order tables, not the model's costs)
    baselines = run_priced_baselines(problem, best_baselines(problem))
    for name in ("gpipe", "1f1b"):
        assert result.baselines[name] == baselines[name]
        assert result.evaluation.iteration_time <= baselines[name].iteration_time * (1 + 1e-9)
    assert (baselines != best_baselines(problem)) == order


def test_other_problems_and_flush_searches_are_priced_by_the_model() -> None:
    plain = next(Problem.from_dict(c["problem"]) for c in golden_cases())
    assert search(plain, **OPTIONS).pricing == "model"
    assert search(calibrated("tiny7_2"), schedule="flush", **OPTIONS).pricing == "model"
    assert search(calibrated("tiny7_2"), pricing="model", **OPTIONS).pricing == "model"
    assert search(plain, pricing="run", **OPTIONS).pricing == "run"


def test_flush_and_unknown_pricings_are_refused() -> None:
    with pytest.raises(ValueError, match="searches ordered plans"):
        search(calibrated("tiny7_2"), schedule="flush", pricing="run", **OPTIONS)
    with pytest.raises(ValueError, match="pricing must be one of auto, model, run"):
        search(calibrated("tiny7_2"), pricing="cheap", **OPTIONS)


def test_same_seed_same_plan_on_every_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = calibrated("med7_1")
    runs = [search(problem, backend=b, **OPTIONS) for b in ("numba", "numba", "numpy")]
    install_fake_cupy(monkeypatch)
    runs.append(search(problem, backend="cuda", **OPTIONS))
    plans = [(r.plan.forward, r.plan.backward, r.plan.order) for r in runs]
    assert all(plan == plans[0] for plan in plans)
    assert len({r.evaluation.iteration_time for r in runs}) == 1


def test_a_state_resumes_only_with_its_pricing(tmp_path) -> None:
    problem = calibrated("tiny7_2")
    path = tmp_path / "s.state"
    search(problem, checkpoint=path, **OPTIONS)
    with pytest.raises(InputError, match="was saved with pricing 'run', not 'model'"):
        search(problem, pricing="model", resume=path, **OPTIONS)
    assert tidgap.search(problem, resume=path, **OPTIONS).pricing == "run"


def in_the_mirrored_search(generation: int) -> Callable[[dict], bool]:
    """Whether a state's ``meta`` is the mirrored first search's at ``generation`` or later."""
    return lambda meta: (
        meta["phase"] == MIRRORED_PHASE and meta["counters"]["generation"] >= generation
    )


def test_a_search_stopped_in_its_mirrored_first_search_resumes_there(tmp_path: Path) -> None:
    """The mirrored first search checkpoints too: a search stopped there saves that
    search's state (not the GA's, which the signal stops at once), and resuming it with the
    generations left gives the plan of one unbroken search."""
    problem = calibrated("med7_1", order=True)
    options = {**OPTIONS, "backend": "numba"}
    full = search(problem, **{**options, "generations": 80}, checkpoint=tmp_path / "full")
    assert load_state(tmp_path / "full").meta["phase"] is None  # the GA's, at the end
    path = tmp_path / "s.state"
    stopped = stopped_once_saved(
        problem, path, in_the_mirrored_search(5), **{**options, "generations": 80}
    )
    assert stopped.stop_reason == "SIGINT"
    saved = load_state(path)
    assert (saved.meta["phase"], saved.meta["counters"]["generation"]) == (MIRRORED_PHASE, 5)
    assert saved.where() == "generation 5 of its mirrored first search"
    left = 80 - saved.generations_run(problem)
    rest = search(problem, **{**options, "generations": left}, resume=path)
    assert same_search(rest, full)


def test_a_run_priced_search_stopped_in_its_annealing_resumes_there(tmp_path: Path) -> None:
    """After its mirrored first search, the search's own annealing checkpoints: the state
    keeps that first search's plan, and the resume (no first search, no generations) ends
    on the plan of one unbroken search."""
    problem = calibrated("med7_1", order=True)
    options = {**OPTIONS, "backend": "numba", "generations": 40}
    full = search(problem, **options)
    path = tmp_path / "s.state"

    def in_the_annealing(meta: dict) -> bool:
        return meta["phase"] == ANNEAL_PHASE and meta["anneal"]["step"] >= 7

    stopped = stopped_once_saved(problem, path, in_the_annealing, **options)
    assert stopped.stop_reason == "SIGINT"
    saved = load_state(path)
    assert saved.meta["first_search"] is not None and saved.meta["anneal"]["step"] == 7
    rest = search(problem, **{**options, "generations": 0}, resume=path)
    assert same_search(rest, full)


def in_the_mirrored_annealing(step: int) -> Callable[[dict], bool]:
    """Whether a state's ``meta`` is the mirrored first search's annealing at ``step`` or
    later."""
    return lambda meta: (
        meta["phase"] == MIRRORED_PHASE and meta.get("anneal", {}).get("step", -1) >= step
    )


def test_a_search_stopped_in_its_mirrored_annealing_resumes_there(tmp_path: Path) -> None:
    """The mirrored first search's annealing checkpoints (in that search's phase): a search
    stopped there resumes it, with the generations left, to the plan of one unbroken
    search; asked for more generations, its GA goes on and anneals afresh, as from its GA's
    state alone."""
    problem = calibrated("med7_1", order=True)
    options = {**OPTIONS, "backend": "numba", "generations": 80}
    full = search(problem, **options)
    path = tmp_path / "s.state"
    stopped = stopped_once_saved(problem, path, in_the_mirrored_annealing(7), **options)
    assert stopped.stop_reason == "SIGINT"
    saved = load_state(path)
    assert (saved.meta["phase"], saved.meta["anneal"]["step"]) == (MIRRORED_PHASE, 7)
    generation = saved.meta["counters"]["generation"]
    assert saved.where() == (
        f"step 7 of its mirrored first search's annealing, after {generation} generations"
    )
    left = 80 - saved.generations_run(problem)
    rest = search(problem, **{**options, "generations": left}, resume=path)
    assert same_search(rest, full)
    ga_alone = tmp_path / "ga.state"
    write_state(ga_alone, ga_part(saved))
    more = {**options, "generations": left + 10}
    assert same_search(
        search(problem, **more, resume=path), search(problem, **more, resume=ga_alone)
    )


def test_a_signal_in_the_mirrored_seed_polish_keeps_that_searchs_state(tmp_path: Path) -> None:
    """A signal in the mirrored first search's seed polish leaves that search's GA state
    (the search after it, stopped at once, saves nothing over it), which resumes to the
    plan of one unbroken search."""
    problem = calibrated("med7_1", order=True)
    options = {**OPTIONS, "backend": "numba", "generations": 80}
    full = search(problem, **options)
    path = tmp_path / "s.state"
    begun: list[str] = []
    stopped = search(
        problem,
        **options,
        checkpoint=path,
        on_phase=begun.append,
        interrupted=lambda: "SIGINT" if "mirrored seed polish" in begun else None,
    )
    assert stopped.stop_reason == "SIGINT"
    saved = load_state(path)
    assert saved.meta["phase"] == MIRRORED_PHASE and "anneal" not in saved.meta
    left = 80 - saved.generations_run(problem)
    assert same_search(search(problem, **{**options, "generations": left}, resume=path), full)


def test_the_first_search_is_mirrored_under_run_pricing() -> None:
    """A free plan may recompute, so the run-priced search first searches mirrored plans
    (windowed ones: :func:`~tidgap.optimize.windowed_driver.mirrored_first_search`), and
    an ask/tell optimizer, with no stopping rule, is still built."""
    from tidgap.optimize.optimizer import Optimizer

    for pricing, mirrored in (("run", True), ("model", False)):
        optimizer = Optimizer(calibrated("med7_1"), seed=1, population=32, pricing=pricing)
        plan = optimizer.run.flush_plan
        assert plan is not None and (plan.backward == plan.forward) == mirrored


@pytest.mark.parametrize("backward", ["free", "aligned"])
def test_a_search_that_may_recompute_is_never_slower_than_its_mirrored_first_search(
    backward: str,
) -> None:
    """Its first search is the mirrored search of half its generations (at most
    ``FLUSH_GENERATIONS``; the same seed and options), whose plan seeds it: its result is
    never slower than that search's."""
    problem = calibrated("med7_1", order=True)
    options = {**OPTIONS, "generations": 40}
    mirrored = search(problem, **{**options, "generations": 20}, backward="mirrored")
    result = search(problem, **options, backward=backward)
    assert result.evaluation.iteration_time <= mirrored.evaluation.iteration_time * (1 + 1e-9)
    assert result.generations == options["generations"]


def test_a_mirrored_first_search_that_finds_no_plan_gives_none() -> None:
    """Within 6 MB a stage storing the GPT's graphs holds at most 2-3 samples: two
    mirrored microbatches cannot split the batch, so there is no first plan (the search
    falls back to the flush first search)."""
    from tests.optimize.test_run_memory import GPT_MEMORY, profiled
    from tidgap.optimize.windowed_driver import mirrored_first_search
    from tidgap.profiling.synth import synth_problem

    problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
    options = dict(seed=5, population=16, memory_limit=6_000_000)
    assert mirrored_first_search(problem, 20, None, max_microbatches=2, **options) is None
    found = mirrored_first_search(problem, 20, None, **options)
    assert found is not None and found.plan.forward == found.plan.backward


def test_a_run_priced_plan_file_predicts_what_evaluate_prints() -> None:
    """formats.md: a plan's ``predicted`` is the evaluation ``tidgap evaluate --json``
    prints; a run-priced search's own figure goes to ``search.predicted_run`` (it was
    ``predicted``: 2237 ms for a recomputing vgg16 plan that evaluate gives 1747 ms)."""
    import dataclasses

    problem = tidgap.load_problem("example:vgg16")
    result = search(problem, pricing="run", generations=1, population=16)
    plan = tidgap.Plan.of([[16] * 4] * 5, [[24, 24, 16]] * 5)  # every stage recomputes
    run_priced = run_evaluation(problem, plan)
    document = dataclasses.replace(result, plan=plan, evaluation=run_priced).plan_document()
    assert document["predicted"] == tidgap.evaluate(problem, plan).as_dict()
    assert document["search"]["predicted_run"] == run_priced.as_dict()
    assert document["predicted"]["iteration_time"] < run_priced.iteration_time
    model = search(problem, generations=1, population=16, pricing="model").plan_document()
    assert "predicted_run" not in model["search"]


def test_summaries_give_the_model_s_time_and_price_every_row_alike() -> None:
    """A run-priced search's sweep row gave ``tidgap run``'s prediction as ``plan_time``
    (documented as the model's, what ``tidgap evaluate`` gives), with run-held bytes as
    its peaks; its summary table priced the local greedy and global DP rows by the model
    beside the plan and baselines priced as run."""
    from tidgap.analysis.compare import compare
    from tidgap.analysis.sweep_summary import COLUMNS, summary_csv, sweep_row

    problem = calibrated("med7_1", order=True)
    result = search(problem, seed=0, generations=3, population=16)
    assert result.pricing == "run"
    model, run = evaluate(problem, result.plan), run_evaluation(problem, result.plan)
    assert model.iteration_time != pytest.approx(run.iteration_time)  # the test has teeth
    row = sweep_row("p.json", "p.plan.json", result, run.iteration_time)
    assert row["plan_time"] == model.iteration_time
    assert row["peak_held"] == model.peak_held
    one_f_one_b = result.baselines["1f1b"].iteration_time
    assert row["gain_over_1f1b_pct"] == pytest.approx(
        (one_f_one_b / result.evaluation.iteration_time - 1) * 100
    )
    cells = summary_csv([row]).splitlines()[1].split(",")
    assert cells[COLUMNS.index("gpipe_over_limit")] == str(row["gpipe_over_limit"]).lower()
    rows = compare(
        problem,
        result.plan,
        baselines=result.baselines,
        heuristics=result.heuristics,
        price=run_evaluation,
    )
    timed = {row.schedule: row.iteration_time for row in rows}
    for name, plan in result.heuristics.items():
        assert timed[name] == run_evaluation(problem, plan).iteration_time
