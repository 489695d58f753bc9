"""The ordered-plan evaluators beyond the contract: order genes, golden invalid orders, and
what they refuse."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.support.backends import run_here
from tests.support.cli_helpers import case_named
from tests.support.golden_ordered import ordered_entry, ordered_params, ordered_plan
from tests.support.populations import random_individuals, random_orders
from tidgap import Plan, Problem
from tidgap.backends import BACKENDS
from tidgap.backends.evaluator import INVALID, create_evaluator
from tidgap.backends.ticks import tick_problem
from tidgap.optimize.genome import (
    NO_OP,
    Population,
    decode_order,
    decode_plan,
    encode_order,
    encode_plan,
)

FAMILY = "windowed"
NAMES = [name for name, record in BACKENDS.items() if FAMILY in record.evaluators]
#: The CPU evaluators check sizes; the CUDA one leaves that to its callers.
CPU_NAMES = [name for name in NAMES if BACKENDS[name].device == "cpu"]


def widest(plan: Plan) -> int:
    """The most microbatches of any stage and direction of ``plan``."""
    return max(len(sizes) for sizes in plan.forward + plan.backward)


def entry_population(name: str, entry: dict, width: int) -> tuple[Problem, Population]:
    """A golden (ordered or invalid) entry as a population of one."""
    problem = Problem.from_dict(case_named(name)["problem"])
    plan = ordered_plan(entry)
    forward, backward = encode_plan(plan, problem, width)
    return problem, Population(forward[None], backward[None], encode_order(plan, width)[None])


@pytest.mark.parametrize(("name", "index"), ordered_params())
def test_order_genes_round_trip(name: str, index: int) -> None:
    plan = ordered_plan(ordered_entry(name, index))
    width = widest(plan) + 1
    problem, population = entry_population(name, ordered_entry(name, index), width)
    assert population.order.shape == (1, problem.num_stages, 2 * width)
    assert population.order.dtype == np.int8
    assert decode_order(population.order[0]) == plan.stage_order()
    decoded = decode_plan(
        population.forward[0], population.backward[0], problem, population.order[0]
    )
    assert decoded.stage_order() == plan.stage_order() and decoded.forward == plan.forward
    assert (population.order[0, :, -1] == NO_OP).all()


def test_an_order_wider_than_its_genes_is_refused() -> None:
    plan = ordered_plan(ordered_entry("tiny7_0", 0))
    with pytest.raises(ValueError, match="more than 8$"):
        encode_order(plan, 4)


@pytest.mark.parametrize("backend", NAMES)
@pytest.mark.parametrize(("name", "index"), ordered_params(key="invalid_orders"))
def test_golden_invalid_orders_score_invalid(
    backend: str, name: str, index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_here(backend, monkeypatch)
    entry = case_named(name)["invalid_orders"][index]
    problem, population = entry_population(name, entry, widest(ordered_plan(entry)) + 1)
    evaluator = create_evaluator(tick_problem(problem), FAMILY, backend)
    assert evaluator.score(population).tolist() == [INVALID]
    assert evaluator.peak_held(population).tolist() == [[0] * problem.num_stages]


def _tiny_repaired(
    backend: str, monkeypatch: pytest.MonkeyPatch, count: int, seed: int
) -> tuple[Any, Population]:
    """The ordered evaluator of golden case ``tiny7_0`` on ``backend`` (run here) and
    ``count`` random individuals with ``K = 8`` and repaired (valid) orders."""
    run_here(backend, monkeypatch)
    ticked = tick_problem(Problem.from_dict(case_named("tiny7_0")["problem"]))
    rng = np.random.default_rng(seed)
    population = random_orders(rng, random_individuals(rng, ticked, count, 8), repaired=1.0)
    return create_evaluator(ticked, FAMILY, backend), population


@pytest.mark.parametrize("backend", CPU_NAMES)
def test_orders_too_narrow_for_any_op_score_invalid(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    evaluator, population = _tiny_repaired(backend, monkeypatch, 3, seed=11)
    narrow = Population(population.forward, population.backward, population.order[..., :0])
    assert evaluator.score(narrow).tolist() == [INVALID] * 3
    assert (evaluator.peak_held(narrow) == 0).all()


@pytest.mark.parametrize("backend", CPU_NAMES)
def test_sizes_that_are_not_partitions_are_refused(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    evaluator, population = _tiny_repaired(backend, monkeypatch, 5, seed=7)
    ticked = evaluator.ticked
    assert (evaluator.score(population) < INVALID).all()
    # a row summing to more than U, a size after the padding, a negative size, and sizes
    # summing to U with a zero between them
    gap = np.zeros(8, dtype=population.forward.dtype)
    gap[[0, 2]] = ticked.num_units - 1, 1
    for position, delta in ((0, 1), (7, 1), (0, -int(population.forward[3, 1, 0]) - 1), (0, None)):
        forward = population.forward.copy()
        if delta is None:
            forward[3, 1] = gap
        else:
            forward[3, 1, position] += delta
        with pytest.raises(ValueError, match=r"^individual 3 is not a plan: .* sum to 5 units$"):
            evaluator.score(Population(forward, population.backward, population.order))
    with pytest.raises(ValueError, match="needs the population's order genes"):
        evaluator.score(Population(population.forward, population.backward))


def test_numpy_simulates_a_large_population_in_chunks_with_the_same_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In chunks (of 4 here) the NumPy evaluator gives what one simulation and Numba give,
    invalid individuals included, and names a bad individual by its place in the whole."""
    from tidgap.fallback_cpu import windowed_numpy

    evaluator, population = _tiny_repaired("numpy", monkeypatch, 11, seed=5)
    order = population.order.copy()
    order[[2, 9], 0] = NO_OP  # two deadlocked individuals, in the first and last chunks
    population = Population(population.forward, population.backward, order)
    whole = evaluator.evaluate(population)
    monkeypatch.setattr(windowed_numpy, "CHUNK", 4)
    chunked = evaluator.evaluate(population)
    numba = create_evaluator(evaluator.ticked, FAMILY, "numba").evaluate(population)
    for left, middle, right in zip(whole, chunked, numba, strict=True):
        assert np.array_equal(left, middle) and np.array_equal(middle, right)
    assert chunked[0][[2, 9]].tolist() == [INVALID, INVALID] and (chunked[0] < INVALID).sum() > 4
    forward = population.forward.copy()
    forward[9, 1, 0] += 1
    with pytest.raises(ValueError, match=r"^individual 9 is not a plan"):
        evaluator.score(Population(forward, population.backward, population.order))
