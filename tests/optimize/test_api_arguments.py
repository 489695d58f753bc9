"""The Python API refuses arguments of the wrong kind with one clear error (an
:class:`InputError` naming the argument, or a ``TypeError`` saying what it wants), never
a ``ZeroDivisionError``, a screen of pydantic errors or a search that runs anyway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tidgap
from tidgap import InputError


@pytest.fixture(scope="module")
def tiny() -> tidgap.Problem:
    return tidgap.load_problem("example:tiny-2")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"seed": "a"}, "seed: must be an integer (got 'a')"),
        ({"generations": 1.5}, "generations: must be an integer (got 1.5)"),
        ({"generations": True}, "generations: must be an integer (got True)"),
        ({"population": 8.0}, "population: must be an integer (got 8.0)"),
        ({"stagnation": 0}, "stagnation: must be at least 1 (got 0)"),
        ({"seed": None}, "seed: must be an integer (got None)"),
        ({"time_limit": "1"}, "time_limit: must be a number of seconds >= 0 (got '1')"),
        ({"max_memory": 0}, "max_memory: must be at least 1 (got 0)"),
        ({"max_memory": "1G"}, "max_memory: must be an integer (got '1G')"),
        ({"population": None}, "population: must be an integer (got None)"),
        ({"resume": 5}, "resume: must be a state file's path or a SavedState (got int)"),
        ({"resume": b"s.npz"}, "resume: must be a state file's path or a SavedState (got bytes)"),
        (
            {"checkpoint_every": "x"},
            "checkpoint_every: must be a positive number of seconds (got 'x')",
        ),
        ({"checkpoint_every": 0}, "checkpoint_every: must be a positive number of seconds (got 0)"),
        # found after the whole search (a folder), naming no argument
        ({"checkpoint": ""}, "checkpoint: no file name (an empty argument)"),
        ({"resume": ""}, "resume: no file name (an empty argument)"),
        # the plan and state files it wrote could not be read back
        (
            {"seed": 10**101},
            "seed: has 102 digits, at most 100 (the longest integer a plan or state file keeps)",
        ),
        (
            {"max_memory": 10**101},
            "max_memory: has 102 digits, at most 100 (the longest integer a plan or state file "
            "keeps)",
        ),
        # an OverflowError from the driver
        (
            {"time_limit": 10**400},
            "time_limit: is too large for a float (at most about 1.8e308 seconds; math.inf for "
            "no limit)",
        ),
        (
            {"initial_plans": [tidgap.Plan.of([[8]] * 3, [[8]] * 3)]},
            "initial_plans[0]: forward: has 3 stage(s), the problem has 2",
        ),
        (
            {"initial_plans": [tidgap.Plan.of([[4, 3]] * 2, [[8]] * 2)]},
            "initial_plans[0]: forward[0]: sizes sum to 7, batch_size is 8",
        ),
        (
            {"initial_plans": [tidgap.Plan.of([[8]] * 2, [[8]] * 2, order=["FFB", "FB"])]},
            "initial_plans[0]: order[0]: breaks rule count: 2 F and 1 B; forward[0] has 1 "
            "microbatches, backward[0] has 1",
        ),
    ],
)
def test_search_refuses_arguments_of_the_wrong_kind(
    tiny: tidgap.Problem, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError) as caught:
        tidgap.search(tiny, **{"generations": 1, **options})
    assert str(caught.value) == message


@pytest.mark.parametrize("plans", [[1], "x", [None]])
def test_search_wants_plans_as_seeds(tiny: tidgap.Problem, plans: Any) -> None:
    with pytest.raises(TypeError, match=r"initial_plans\[0\] must be a tidgap.Plan"):
        tidgap.search(tiny, generations=1, initial_plans=plans)


def test_a_seed_whose_order_breaks_a_rule_the_repair_mends_is_taken(tiny: tidgap.Problem) -> None:
    """Backward 1 before forward 1 breaks rule 1; a windowed search repairs its seeds."""
    seed = tidgap.Plan.of([[8]] * 2, [[8]] * 2, order=["BF", "FB"])
    with pytest.raises(InputError, match="rule 1"):
        tidgap.check_plan(seed, tiny)
    found = tidgap.search(tiny, generations=1, initial_plans=[seed])
    assert found.evaluation == tidgap.evaluate(tiny, found.plan)


@pytest.mark.parametrize("problem", [None, "example:tiny-2"])
def test_search_wants_a_problem(problem: Any) -> None:
    with pytest.raises(TypeError, match="problem must be a tidgap.Problem"):
        tidgap.search(problem, generations=1)


@pytest.mark.parametrize("m", [0, 9])
@pytest.mark.parametrize("baseline", [tidgap.gpipe, tidgap.one_f_one_b])
def test_a_baseline_count_outside_the_batch_is_one_error(
    tiny: tidgap.Problem, baseline: Any, m: int
) -> None:
    with pytest.raises(InputError) as caught:
        baseline(tiny, m)
    assert str(caught.value) == f"m: {m} is outside 1..8 (batch_size 8, unit 1)"


def _capped() -> tidgap.Problem:
    """2 stages of 8 samples, stage 0 taking microbatches of at most 4."""
    ops = tidgap.affine(1, 1)
    return tidgap.Problem(
        name="capped",
        batch_size=8,
        unit=1,
        stages=[
            tidgap.Stage(name="a", forward=ops, backward=ops, max_microbatch=4),
            tidgap.Stage(name="b", forward=ops, backward=ops),
        ],
        links=[tidgap.Link(forward=ops, backward=ops)],
    )


@pytest.mark.parametrize(
    "function",
    [
        tidgap.gpipe,
        tidgap.one_f_one_b,
        tidgap.pipedream,
        tidgap.gpipe_plan,
        tidgap.one_f_one_b_plan,
    ],
)
def test_a_baseline_count_that_breaks_a_cap_is_refused_naming_m(function: Any) -> None:
    """``gpipe(problem, 1)`` timed 8-sample microbatches on a stage that takes at most 4
    (54.0, where ``baseline(problem, "gpipe", 1)`` refused and ``evaluate`` refused the
    plan ``gpipe_plan`` made)."""
    with pytest.raises(InputError) as caught:
        function(_capped(), 1)
    assert str(caught.value).startswith("m: 1 microbatches of up to 8 samples break a cap")
    assert function(_capped(), 2) is not None


def test_baseline_names_m_and_gives_a_plain_count(tiny: tidgap.Problem) -> None:
    with pytest.raises(InputError, match="^m: 0 is outside 1..8"):  # was microbatches:
        tidgap.baseline(tiny, "gpipe", 0)
    assert type(tidgap.baseline(tiny, "gpipe", np.int64(2)).microbatches) is int


@pytest.mark.parametrize(
    "counts",
    [np.array([], np.int64), np.array([3, 2]), [0], [9], [True], "12", [2, 2], {2: 1}],
)
def test_best_baselines_refuses_counts_that_are_not_ascending_feasible_ones(
    tiny: tidgap.Problem, counts: Any
) -> None:
    """NumPy's ``ValueError``s, a ``TypeError`` for a list, and for ``[0]`` a time of 0
    came before."""
    with pytest.raises(InputError, match="^counts: must be"):
        tidgap.best_baselines(tiny, counts)


def test_best_baselines_takes_a_list_of_counts(tiny: tidgap.Problem) -> None:
    assert tidgap.best_baselines(tiny, [2, 3]) == tidgap.best_baselines(tiny, np.array([2, 3]))


def test_a_plan_of_the_wrong_shape_is_one_line() -> None:
    with pytest.raises(InputError) as caught:
        tidgap.Plan.of([[1, 2]], [[3, "x"]])
    assert str(caught.value) == 'plan: backward[0][1]: must be an integer (got "x")'


@pytest.mark.parametrize(
    "call",
    [
        lambda tiny: tidgap.evaluate(None, tidgap.gpipe_plan(tiny, 2)),
        lambda tiny: tidgap.check_plan(tidgap.gpipe_plan(tiny, 2), "example:tiny-2"),
        lambda tiny: tidgap.gpipe(None, 2),
        lambda tiny: tidgap.best_baselines(None),
        lambda tiny: tidgap.feasible_microbatch_counts({}),
        lambda tiny: tidgap.local_greedy(None),
        lambda tiny: tidgap.global_dp("example:tiny-2"),
    ],
    ids=["evaluate", "check_plan", "gpipe", "best_baselines", "counts", "greedy", "dp"],
)
def test_every_function_that_takes_a_problem_wants_one(tiny: tidgap.Problem, call: Any) -> None:
    with pytest.raises(TypeError, match="problem must be a tidgap.Problem"):
        call(tiny)


@pytest.mark.parametrize("plan", [None, {"forward": [[8]], "backward": [[8]]}])
@pytest.mark.parametrize("function", [tidgap.evaluate, tidgap.run_evaluation])
def test_evaluating_wants_a_plan(tiny: tidgap.Problem, function: Any, plan: Any) -> None:
    with pytest.raises(TypeError, match="plan must be a tidgap.Plan"):
        function(tiny, plan)


def test_search_many_wants_an_executor(tiny: tidgap.Problem) -> None:
    """An AttributeError ('int' object has no attribute 'submit') before."""
    with pytest.raises(TypeError, match=r"executor must be a concurrent.futures.Executor \(got 3"):
        tidgap.search_many([tiny], executor=3, generations=1)


def test_result_wants_a_reason(tiny: tidgap.Problem) -> None:
    optimizer = tidgap.Optimizer(tiny, population=8, backend="numpy")
    with pytest.raises(TypeError, match=r"stop_reason must be a str \(got 5\)"):
        optimizer.result(stop_reason=5)


def test_search_many_wants_a_list_of_problems(tiny: tidgap.Problem) -> None:
    with pytest.raises(TypeError, match="problems must be a list of tidgap.Problem"):
        tidgap.search_many(tiny, generations=1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda tiny: tidgap.gpipe(tiny, 2.5), "m: must be an integer (got 2.5)"),
        (lambda tiny: tidgap.one_f_one_b(tiny, True), "m: must be an integer (got True)"),
        (lambda tiny: tidgap.pipedream(tiny, "2"), "m: must be an integer (got '2')"),
        (lambda tiny: tidgap.affine(-1, 1), "affine: base: must be >= 0.0 (got -1)"),
        (lambda tiny: tidgap.table([], []), "table: sizes: must not be empty"),
        (lambda tiny: tidgap.Plan.of(None, [[8]]), "plan: forward: must be a list (got null)"),
    ],
    ids=["gpipe", "1f1b", "pipedream", "affine", "table", "plan"],
)
def test_values_of_the_wrong_kind_are_one_line(
    tiny: tidgap.Problem, call: Any, message: str
) -> None:
    with pytest.raises(InputError) as caught:
        call(tiny)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda f: tidgap.Stage(forward=f, backward=f, activation_bytes=-1),
            "Stage: activation_bytes: must be >= 0.0 (got -1)",
        ),
        (lambda f: tidgap.Stage(forward=f), "Stage: backward: required field is missing"),
        (lambda f: tidgap.Stage(forward=f, backward=f, bogus=1), "Stage: bogus: unknown key"),
        (
            lambda f: tidgap.Stage(forward=f, backward={"affine": {"base": -1, "per_sample": 0}}),
            "Stage: backward.affine.base: must be >= 0.0 (got -1)",
        ),
        (lambda f: tidgap.Link(forward=f), "Link: backward: required field is missing"),
        (lambda f: tidgap.Problem(stages=[], batch_size=4), "Problem: stages: must not be empty"),
        (
            lambda f: tidgap.Problem(stages=[{"forward": f, "backward": f}], batch_size=0),
            "Problem: batch_size: must be > 0 (got 0)",
        ),
        (lambda f: tidgap.Plan(forward=[[1]], backward="x"), "Plan: backward: must be a list"),
    ],
    ids=[
        "stage-bytes",
        "stage-missing",
        "stage-key",
        "stage-nested",
        "link",
        "problem-empty",
        "problem-batch",
        "plan",
    ],
)
def test_a_model_built_with_a_bad_value_is_one_input_error(call: Any, message: str) -> None:
    """pydantic's multi-line ValidationError before."""
    with pytest.raises(InputError) as caught:
        call(tidgap.affine(1.0, 1.0))
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_a_numpy_count_is_a_count(tiny: tidgap.Problem) -> None:
    assert tidgap.gpipe(tiny, np.int64(2)) == tidgap.gpipe(tiny, 2)
    assert tidgap.one_f_one_b_plan(tiny, np.int32(3)) == tidgap.one_f_one_b_plan(tiny, 3)


def test_an_unknown_baseline_is_named(tiny: tidgap.Problem) -> None:
    with pytest.raises(ValueError, match="unknown baseline 'zb'; baselines: gpipe, 1f1b"):
        tidgap.baseline(tiny, "zb", 2)


def test_a_numpy_integer_seed_is_the_seed(tiny: tidgap.Problem, tmp_path) -> None:
    """``np.int64(3)`` searches as ``3`` does, and its checkpoint saves a plain integer."""
    as_numpy = tidgap.search(tiny, seed=np.int64(3), generations=2, checkpoint=tmp_path / "s")
    plain = tidgap.search(tiny, seed=3, generations=2)
    assert as_numpy.plan == plain.plan and as_numpy.seed == 3
    resumed = tidgap.search(tiny, seed=np.int32(3), generations=2, resume=tmp_path / "s")
    assert resumed.plan == plain.plan


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((None, None), "table: sizes: must be a list (got null)"),
        (({1: 2, 3: 4}, [1, 2]), "table: sizes: must be a list"),  # was read as its keys
        (([1, 2], None), "table: times: must be a list (got null)"),
        (((1, 2), np.array([1.0, -2.0])), "table: times[1]: must be >= 0"),
    ],
)
def test_a_table_of_the_wrong_kind_is_one_input_error(arguments: tuple, message: str) -> None:
    with pytest.raises(InputError) as caught:
        tidgap.table(*arguments)
    assert str(caught.value).startswith(message)


def test_numpy_integers_are_integers(tiny: tidgap.Problem) -> None:
    """NumPy's integers (a planner's ``np.arange``) are the integers they are: they were
    refused in plans and problems ('must be an integer (got np.int64(4))'); a NumPy bool
    is still no integer."""
    from tidgap.optimize.limits import checked_memory_limit
    from tidgap.profiling.synth import synth_problem

    four = np.int64(4)
    assert tidgap.Plan.of([[four, four]] * 2, [[np.int64(8)]] * 2) == tidgap.Plan.of(
        [[4, 4]] * 2, [[8]] * 2
    )
    windowed = tidgap.Plan.of(np.array([[4, 4], [4, 4]]), [[8], [8]], windows=[np.int64(8), 4])
    assert windowed.windows == [8, 4] and type(windowed.windows[0]) is int
    with pytest.raises(InputError, match=r"forward\[0\]\[0\]: must be an integer"):
        tidgap.Plan.of([[np.bool_(True)]], [[8]])
    document = tiny.model_dump(exclude_none=True) | {"format": "tidgap.problem/1"}
    assert tidgap.Problem.from_dict(document | {"batch_size": np.int64(8)}) == tiny
    limit = checked_memory_limit(np.int64(2**32))
    assert limit == 2**32 and type(limit) is int
    assert synth_problem(np.int64(2), 2, 8) == synth_problem(2, 2, 8)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: tidgap.Optimizer(t, fitness=5), r"fitness must be a function or None"),
        (lambda t: tidgap.search(t, generations=1, on_progress=5), r"on_progress must be a"),
        (lambda t: tidgap.search(t, generations=1, interrupted=5), r"interrupted must be a"),
        (lambda t: tidgap.search(t, generations=1, on_phase=5), r"on_phase must be a"),
        (lambda t: tidgap.Optimizer(t, stopping=5), r"stopping must be a tidgap.Stopping"),
        (lambda t: tidgap.per_plan(lambda p, q: 0.0, None), r"problem must be a tidgap.Problem"),
        (lambda t: tidgap.per_plan(5, t), r"objective must be a function"),
        (lambda t: tidgap.load_plan("plan.json", "example:tiny-2"), r"problem must be a"),
    ],
    ids=["fitness", "on_progress", "interrupted", "on_phase", "stopping", "per_plan-problem",
         "per_plan-objective", "load_plan"],
)  # fmt: skip
def test_what_must_be_called_or_a_problem_is_refused_before_any_work(
    tiny: tidgap.Problem, call: Any, message: str
) -> None:
    """Each failed deep inside (on_progress only after the whole search ran)."""
    with pytest.raises(TypeError, match=message):
        call(tiny)


@pytest.mark.parametrize("spec", [None, 3, 2.5])
def test_loading_wants_a_path_and_names_the_argument(spec: Any) -> None:
    """``load_problem(None)`` raised ``open``'s TypeError, naming no argument."""
    with pytest.raises(TypeError, match="^spec must be a file path"):
        tidgap.load_problem(spec)
    with pytest.raises(TypeError, match="^path must be a file path"):
        tidgap.load_plan(spec, tidgap.load_problem("example:tiny-2"))


def test_a_path_named_like_an_example_is_a_file(tmp_path, monkeypatch) -> None:
    """``load_problem(Path("example:tiny-2"))`` loaded the built-in example, not the file
    of that name; the text ``example:tiny-2`` names the example."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="cannot read file"):
        tidgap.load_problem(Path("example:tiny-2"))
    assert tidgap.load_problem("example:tiny-2").name == "tiny-2"
