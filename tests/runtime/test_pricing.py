"""``tidgap run``'s prediction times each op as the runtime runs it: a recomputing stage's
backward pays its forward again, and a stored-graph backward over several forward chunks
pays each chunk's backward."""

from __future__ import annotations

from typing import Any

import pytest

from tidgap.model.errors import InputError
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.profiling.synth import synth_problem
from tidgap.runtime.lowering import recomputes
from tidgap.runtime.pricing import (
    covered_chunks,
    run_evaluation,
    run_op_times,
    run_prediction,
)
from tidgap.schedules.families import evaluate, plan_timeline
from tidgap.schedules.simulate import evaluate_order

#: Stage 0's backward boundary 3 is no forward boundary (it recomputes); stage 1's first
#: backward covers its forward chunks of 2 and 2.
PLAN = Plan.of([[4, 4], [2, 2, 4]], [[3, 5], [4, 4]])


@pytest.fixture
def problem() -> Problem:
    return Problem.from_dict(synth_problem(0, 2, 8, 1, 0.5, "table", "tiny"))


def test_covered_chunks() -> None:
    assert covered_chunks([1, 3, 4, 2], [4, 6]) == [[1, 3], [4, 2]]
    assert covered_chunks([2, 2], [2, 2]) == [[2], [2]]


def test_backwards_priced_as_the_runtime_runs_them(problem: Problem) -> None:
    assert recomputes(PLAN) == [True, False]
    first, second = problem.stages
    assert run_op_times(problem, PLAN) == {
        (0, "B", 1): first.forward(3) + first.backward(3),
        (0, "B", 2): first.forward(5) + first.backward(5),
        (1, "B", 1): second.backward(2) + second.backward(2),
    }
    evaluation, timeline = run_prediction(problem, PLAN, "run")
    assert evaluation.iteration_time > evaluate(problem, PLAN).iteration_time
    assert timeline.iteration_time == pytest.approx(evaluation.iteration_time)
    steps = [step for step in timeline.stages[1] if step.kind == "B"]
    assert steps[0].end - steps[0].start == pytest.approx(2 * second.backward(2))


def test_a_plan_the_runtime_runs_as_modelled_is_predicted_by_the_model(problem: Problem) -> None:
    aligned = Plan.of([[4, 4], [2, 2, 4]], [[4, 4], [2, 2, 4]], ["FFBB", "FBFBFB"])
    assert run_op_times(problem, aligned) == {}
    evaluation, timeline = run_prediction(problem, aligned, "run")
    assert evaluation == evaluate(problem, aligned)
    assert timeline == plan_timeline(problem, aligned, "run")


def test_a_recompute_profile_prices_only_the_merged_backwards(problem: Problem) -> None:
    profiled = problem.model_copy(update={"source": {"timing": {"recompute": True}}})
    assert set(run_op_times(profiled, PLAN)) == {(1, "B", 1)}


def recompute_entry(forward: float, backward: float) -> dict[str, Any]:
    """A stage's ``source.calibration.recompute`` entry: per-sample times."""
    sizes = list(range(1, 9))
    return {
        "forward": {"table": {"sizes": sizes, "times": [forward * b for b in sizes]}},
        "backward": {"table": {"sizes": sizes, "times": [backward * b for b in sizes]}},
    }


def test_calibrated_recompute_times_price_the_recomputing_stages_ops() -> None:
    """With ``source.calibration.recompute``, a recomputing stage's forwards and
    backwards take the calibrated times (over a ``--recompute`` profile too); a stage that
    does not recompute keeps its own."""
    document = synth_problem(0, 2, 8, 1, 0.5, "table", "tiny")
    document["source"] = {
        "timing": {"recompute": True},
        "calibration": {"recompute": [recompute_entry(0.5, 3.0), recompute_entry(9.0, 9.0)]},
    }
    problem = Problem.from_dict(document)
    second = problem.stages[1]
    assert run_op_times(problem, PLAN) == {
        (0, "F", 1): 2.0,
        (0, "F", 2): 2.0,
        (0, "B", 1): 9.0,
        (0, "B", 2): 15.0,
        (1, "B", 1): 2 * second.backward(2),
    }
    evaluation, timeline = run_prediction(problem, PLAN, "run")
    steps = [step for step in timeline.stages[0] if step.kind in "FB"]
    assert [step.kind for step in steps] == ["F", "F", "B", "B"]
    assert [step.end - step.start for step in steps] == pytest.approx([2.0, 2.0, 9.0, 15.0])
    assert evaluation.iteration_time == pytest.approx(timeline.iteration_time)


def test_the_model_op_times_given_explicitly_change_nothing(problem: Problem) -> None:
    """The simulator's ``op_time`` hook with the problem's own times is the plain model."""

    def model_time(s: int, op: str, k: int, size: int) -> float:
        stage = problem.stages[s]
        return stage.forward(size) if op == "F" else stage.backward(size)

    order = PLAN.stage_order()
    plain = evaluate_order(problem, PLAN.forward, PLAN.backward, order)
    assert evaluate_order(problem, PLAN.forward, PLAN.backward, order, model_time) == plain


def test_the_public_run_evaluation_prices_as_the_runtime_runs(problem: Problem) -> None:
    """``tidgap.run_evaluation``: the model's evaluation for a mirrored plan (run as
    modelled), a longer time for one that recomputes."""
    import tidgap

    mirrored = Plan.of(PLAN.forward, PLAN.forward)
    assert tidgap.run_evaluation(problem, mirrored) == evaluate(problem, mirrored)
    assert any(recomputes(PLAN))
    priced = tidgap.run_evaluation(problem, PLAN).iteration_time
    assert priced > evaluate(problem, PLAN).iteration_time


@pytest.mark.parametrize("evaluator", [evaluate, run_evaluation], ids=["evaluate", "run"])
@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (Plan.of([[8]], [[8]]), "plan: forward: has 1 stage(s), the problem has 2"),
        (Plan.of([[4, 4], [4, 4]], [[4, 4], [8, 1]]), "plan: backward[1]: sizes sum to 9"),
        (
            Plan.of([[4, 4], [4, 4]], [[4, 4], [4, 4]], order=["BBFF", "FBFB"]),
            "plan: order[0]: ",
        ),
    ],
    ids=["another problem", "sizes", "order"],
)
def test_a_plan_that_does_not_fit_is_one_input_error(
    problem: Problem, evaluator: Any, plan: Plan, message: str
) -> None:
    """The Python API checks the plan against the problem: an :class:`InputError` naming
    the field, never an ``IndexError`` or a deadlock."""
    with pytest.raises(InputError) as caught:
        evaluator(problem, plan)
    assert str(caught.value).startswith(message), str(caught.value)


def order_entry(forward: float, backward: float) -> dict[str, Any]:
    """A stage's ``source.calibration.order`` entry: per-sample times."""
    times = recompute_entry(forward, backward)
    return {
        "forward_after_backward": times["forward"],
        "backward_after_forward": times["backward"],
    }


def test_calibrated_order_times_price_ops_by_the_op_before_them() -> None:
    """With ``source.calibration.order``: a forward right after a backward of its size, and the last
    stage's backward right after its own forward, take the calibrated times; GPipe's order
    has neither; a recomputing stage keeps its own pricing; a merged backward its sum."""
    from tidgap.schedules.families import SCHEDULES

    document = synth_problem(0, 2, 8, 1, 0.5, "table", "tiny")
    document["source"] = {"calibration": {"order": [order_entry(0.5, 3.0), order_entry(0.25, 2.0)]}}
    problem = Problem.from_dict(document)
    one_f_one_b = SCHEDULES["1f1b"].baseline(problem, 4)  # FFBFBFBB, FBFBFBFB
    assert run_op_times(problem, one_f_one_b) == {
        (0, "F", 3): 1.0,
        (0, "F", 4): 1.0,
        (1, "F", 2): 0.5,
        (1, "F", 3): 0.5,
        (1, "F", 4): 0.5,
        **{(1, "B", k): 4.0 for k in range(1, 5)},
    }
    assert run_op_times(problem, SCHEDULES["gpipe"].baseline(problem, 4)) == {}
    own = Plan.of([[4, 4], [2, 2, 4]], [[4, 4], [4, 4]], ["FFBB", "FFBFB"])
    assert run_op_times(problem, own) == {
        (1, "B", 1): 2 * problem.stages[1].backward(2),  # over two stored chunks: not its own
        (1, "F", 3): 1.0,
        (1, "B", 2): 8.0,
    }
    again = run_op_times(problem, PLAN)
    assert (0, "B", 1) in again and not [key for key in again if key[:2] == (0, "F")]
    # the calibration timed forwards after backwards of their own size (1F1B(m)): the
    # forward of 5 samples after the backward of 3 costs what it costs in GPipe's order
    unequal = Plan.of([[3, 5], [3, 5]], [[3, 5], [3, 5]], ["FFBB", "FBFB"])
    assert run_op_times(problem, unequal) == {(1, "B", 1): 6.0, (1, "B", 2): 10.0}


def test_the_run_note_names_order_pricing_without_the_mirrored_advice() -> None:
    """A plan whose only other costs are the calibration's order times: the note says so and
    gives tidgap run's time, without advising --mirrored (a mirrored plan has them too)."""
    from tidgap.cli.options import run_note
    from tidgap.schedules.families import SCHEDULES

    document = synth_problem(0, 2, 8, 1, 0.5, "table", "tiny")
    document["source"] = {"calibration": {"order": [order_entry(0.5, 3.0), order_entry(0.25, 2.0)]}}
    problem = Problem.from_dict(document)
    plan = SCHEDULES["1f1b"].baseline(problem, 4)
    note = run_note(problem, plan)
    assert note is not None and "--mirrored" not in note
    assert "stages 0, 1 run ops timed by the op before them" in note
    assert f"{run_evaluation(problem, plan).iteration_time:.6g}" in note
    assert run_note(problem, SCHEDULES["gpipe"].baseline(problem, 4)) is None
    both = run_note(problem, PLAN)
    assert both is not None and "stage 1 runs backwards over several" in both
    assert "stage 0 recomputes" in both and "--mirrored" in both
    assert "run ops timed" not in both  # a flush order: no forward after a backward, and
    # the last stage's first backward (samples 0-4) follows the forward of samples 4-8
    # a run-priced search priced the recomputation, the merges and the order: nothing left
    assert run_note(problem, PLAN, "run") is None
    assert run_note(problem, plan, "run") is None


@pytest.mark.parametrize("name", ["tiny7_2", "med7_1", "linkheavy7", "bwdcaps7", "nounit7"])
def test_run_priced_baselines_are_the_best_counts_as_the_run_prices_them(name: str) -> None:
    """With order tables the best GPipe and 1F1B are found among every count by
    :func:`run_evaluation` (a search then compares against them), and no count runs faster
    than :func:`order_credit` of its model time (what lets the search skip counts)."""
    from tests.conftest import golden_cases
    from tests.support.calibrations import order_tables
    from tidgap.runtime.pricing import order_credit, run_priced_baselines
    from tidgap.schedules.baselines import baseline_times, best_baselines
    from tidgap.schedules.families import SCHEDULES

    data = next(c["problem"] for c in golden_cases() if c["problem"]["name"] == name)
    plain = Problem.from_dict(data)
    assert run_priced_baselines(plain, best_baselines(plain)) == best_baselines(plain)
    data["source"] = {"calibration": {"order": order_tables(data["stages"])}}
    problem = Problem.from_dict(data)
    credit = order_credit(problem)
    assert 0 < credit < 1
    ms, times = baseline_times(problem)
    found = run_priced_baselines(problem, best_baselines(problem))
    for row, schedule in enumerate(("gpipe", "1f1b")):
        every = {}
        for m, model in zip(ms, times[row], strict=True):
            plan = SCHEDULES[schedule].baseline(problem, int(m))
            every[int(m)] = run_evaluation(problem, plan).iteration_time
            assert every[int(m)] >= credit * model * (1 - 1e-12)
        best = min(every, key=lambda m: (every[m], m))
        assert (found[schedule].microbatches, found[schedule].iteration_time) == (best, every[best])
    assert found["1f1b"].iteration_time < best_baselines(problem)["1f1b"].iteration_time


def test_a_backward_cap_above_the_forwards_table_is_refused_where_run_pricing_needs_it() -> None:
    """A recomputing backward runs the forward again on its samples: with stage 0's
    backward capped at 8 and its forward tabulated to 4, pricing as tidgap run runs it
    asked the table for 5 samples (a ValueError traceback from ``search --pricing run``)."""
    from tidgap import Link, Stage, affine, table
    from tidgap.backends.ticks import tick_problem
    from tidgap.cli.options import run_note

    forward = table([1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0])
    stages = [
        Stage(forward=forward, backward=affine(1, 1), max_microbatch=4, max_microbatch_backward=8),
        Stage(forward=affine(1, 1), backward=affine(1, 1)),
    ]
    link = Link(forward=affine(0.1, 0), backward=affine(0.1, 0))
    problem = Problem(batch_size=8, stages=stages, links=[link])
    with pytest.raises(
        InputError, match="recomputing backwards take a table of sizes 1..4"
    ) as caught:
        tick_problem(problem, "run")
    assert caught.value.path == ("stages", 0)
    stored = Plan(forward=[[4, 4], [8]], backward=[[8], [8]])  # over two stored chunks
    assert run_evaluation(problem, stored).iteration_time > 0
    halves = Plan(forward=[[4, 4], [8]], backward=[[2, 6], [8]])  # recomputes 2 and 6
    with pytest.raises(InputError, match="at up to 6 samples"):
        run_evaluation(problem, halves)
    note = run_note(problem, halves)  # what search, compare and evaluate print
    assert note is not None and note.startswith("  when run, tidgap run cannot predict its time")
    fits = Plan(forward=[[4, 4], [8]], backward=[[1, 3, 4], [8]])  # recomputes 1, 3, 4
    assert run_evaluation(problem, fits).iteration_time > evaluate(problem, fits).iteration_time
