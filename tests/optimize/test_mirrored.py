"""The ``mirrored`` backward rule: plans whose backward partition is the forward one on
every stage, which ``tidgap run`` runs at the model's op costs (its prediction is the
searched time)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.cli_helpers import describe, run_cli
from tidgap import load_problem
from tidgap.model.examples import EXAMPLE_PREFIX
from tidgap.model.plan import Plan
from tidgap.optimize.backward_rules import ALIGNED, FREE, MIRRORED, breaks, rule_caps
from tidgap.optimize.driver import search
from tidgap.optimize.joint import mirror
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.order_genes import misaligned
from tidgap.optimize.windowed_seeds import growing_ramp_plans, ramp_size
from tidgap.runtime.pricing import run_evaluation, run_op_times
from tidgap.schedules.baselines import best_baselines
from tidgap.schedules.families import evaluate

EXAMPLES = ["gpt1-14", "hetero-8", "vgg16"]


def _mirrored(plan: Plan) -> bool:
    """Whether every stage's backward partition is its forward one."""
    return plan.forward == plan.backward


def test_what_each_rule_refuses() -> None:
    rng = np.random.default_rng(3)
    forward = rng.integers(1, 4, (64, 3, 5)).astype(np.int32)
    backward = forward.copy()
    backward[32:, 1, ::-1] = forward[32:, 1]  # a stage's partition reversed
    expected = (forward != backward).any(axis=(1, 2))
    assert expected[32:].any() and not expected[:32].any()
    np.testing.assert_array_equal(breaks(MIRRORED, forward, backward), expected)
    np.testing.assert_array_equal(breaks(ALIGNED, forward, backward), misaligned(forward, backward))
    assert not breaks(FREE, forward, backward).any()


def test_mirror_copies_the_forward_where_it_fits_the_caps() -> None:
    forward = np.array([[[2, 2]], [[4, 0]]], dtype=np.int32)
    backward = np.array([[[1, 3]], [[1, 3]]], dtype=np.int32)
    genes = mirror(JointGenes(forward, backward, np.zeros_like(forward)), np.array([3]))
    np.testing.assert_array_equal(genes.backward, [[[2, 2]], [[1, 3]]])
    np.testing.assert_array_equal(genes.forward, forward)
    caps = rule_caps(MIRRORED, np.array([5, 2]), np.array([3, 4]))
    assert [c.tolist() for c in caps] == [[3, 2], [3, 2]]
    assert rule_caps(ALIGNED, np.array([5]), np.array([3]))[0].tolist() == [5]


@pytest.mark.parametrize("name", EXAMPLES)
def test_windowed_plans_are_mirrored_and_run_at_the_model_costs(name: str) -> None:
    """Every plan of the trade-off is mirrored, so tidgap run's prediction is its time;
    faster than the best 1F1B within its memory on these three examples (the growing ramps
    seed gpt1-14's and hetero-8's plans)."""
    problem = load_problem(EXAMPLE_PREFIX + name)
    result = search(problem, generations=30, seed=0, backward=MIRRORED, memory_limit="1f1b")
    assert result.backward == MIRRORED and result.no_recompute
    document = result.plan_document()["search"]
    assert document["backward"] == MIRRORED and document["no_recompute"]
    one_f_one_b = result.baselines["1f1b"].iteration_time
    assert result.evaluation.iteration_time < one_f_one_b  # measured: 0.967x, 0.966x, 0.791x
    held = evaluate(problem, result.plan).peak_held
    assert all(h <= limit for h, limit in zip(held, result.memory_limit.held, strict=True))
    for point in result.tradeoff:
        assert point.plan is not None and _mirrored(point.plan)
        assert run_op_times(problem, point.plan) == {}
        run = run_evaluation(problem, point.plan).iteration_time
        assert run == pytest.approx(point.evaluation.iteration_time, rel=1e-12)


def test_the_rule_binds_and_finds_more_than_1f1b_on_vgg16() -> None:
    """The free search's plan is not mirrored (it merges or splits backwards); the mirrored
    one is, and still beats the best 1F1B at 1F1B's memory (measured 1499.7 ms in 20 s
    against 1897.1)."""
    problem = load_problem(EXAMPLE_PREFIX + "vgg16")
    options = dict(generations=30, seed=0, memory_limit="1f1b")
    free = search(problem, **options)
    held = search(problem, backward=MIRRORED, **options)
    assert not _mirrored(free.plan) and _mirrored(held.plan)
    assert held.evaluation.iteration_time < 0.9 * held.baselines["1f1b"].iteration_time


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_same_seed_same_plan_on_every_cpu_backend(backend: str) -> None:
    problem = load_problem(EXAMPLE_PREFIX + "hetero-8")
    options = dict(generations=10, seed=5, population=64, backward=MIRRORED)
    first = search(problem, backend="numba", **options)
    again = search(problem, backend=backend, **options)
    assert _mirrored(first.plan)
    assert (again.plan, again.evaluation) == (first.plan, first.evaluation)


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("same_partition", [False, True])
def test_a_flush_search_returns_a_mirrored_plan(name: str, same_partition: bool) -> None:
    """Flush, seeded and repaired: the best good chromosome as both partitions, polished;
    never slower than the best GPipe, never faster than the free flush search."""
    problem = load_problem(EXAMPLE_PREFIX + name)
    options = dict(schedule="flush", generations=60, seed=0, same_partition=same_partition)
    free = search(problem, **options)
    held = search(problem, backward=MIRRORED, **options)
    assert _mirrored(held.plan) and run_op_times(problem, held.plan) == {}
    assert held.evaluation.iteration_time <= held.baselines["gpipe"].iteration_time
    assert held.evaluation.iteration_time >= free.evaluation.iteration_time
    assert search(problem, backward=MIRRORED, **options).plan == held.plan


def test_an_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown backward rule 'sideways'"):
        search(load_problem(EXAMPLE_PREFIX + "tiny-2"), generations=1, backward="sideways")


def test_the_cli_searches_mirrored_plans(tmp_path) -> None:
    out = tmp_path / "plan.json"
    result = run_cli(
        "search", "--mirrored", "--generations", "20", "--seed", "1", "--out", str(out),
        EXAMPLE_PREFIX + "hetero-8",
    )  # fmt: skip
    assert result.exit_code == 0, describe(result)
    assert "backward mirrored" in result.stdout.splitlines()[1]
    assert not any(line.startswith("  when run, ") for line in result.stdout.splitlines())
    document = json.loads(out.read_text())
    assert document["search"]["backward"] == MIRRORED
    assert document["forward"] == document["backward"]


@pytest.mark.parametrize("name", EXAMPLES + ["tiny-2"])
@pytest.mark.parametrize("width", [4, 32])
def test_growing_ramp_seeds_are_mirrored_plans_that_start_small(name: str, width: int) -> None:
    """Each seed is a valid plan, the same mirrored rows on every stage, opening with
    ``1, 2, ..., k`` units (a different ``k`` each), then nothing above the best 1F1B's
    size, within ``width``."""
    problem = load_problem(EXAMPLE_PREFIX + name)
    best = best_baselines(problem)["1f1b"]
    plans = growing_ramp_plans(problem, width, best)
    unit, S = problem.unit, problem.num_stages
    b = ramp_size(problem, best)
    for k, plan in enumerate(plans, start=1):
        evaluate(problem, plan)
        row = plan.forward[0]
        assert _mirrored(plan) and plan.forward == [row] * S and len(row) <= width
        assert row[:k] == [i * unit for i in range(1, k + 1)] and max(row[k:]) <= b * unit
    if width == 32 and name != "tiny-2":
        assert len(plans) == b - 1 >= 1
