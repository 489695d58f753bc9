"""Plans priced as ``tidgap run`` runs them (``tick_problem(problem, "run")``): every
ordered evaluator (NumPy, Numba, CUDA, here or on the stand-in) equals the others exactly
and the reference (:func:`tidgap.runtime.pricing.run_evaluation`) up to the tick rounding;
stored-graph stages, recomputing ones, mirrored ones and ops timed by the op before them
(a calibration's order tables) are each priced as the runtime runs them."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest

from tests.conftest import case_id, golden_cases
from tests.support.backends import runnable
from tests.support.calibrations import order_tables
from tests.support.populations import (
    coarsened_backwards,
    random_individuals,
    random_orders,
    random_ticked,
)
from tidgap import Problem
from tidgap.backends import BACKENDS
from tidgap.backends.evaluator import INVALID, create_evaluator
from tidgap.backends.run_pricing import op_ticks
from tidgap.backends.ticks import RUN_PRICING, tick_problem
from tidgap.backends.xp import to_host
from tidgap.optimize.genome import Population, decode_plan
from tidgap.runtime.lowering import recomputes
from tidgap.runtime.pricing import order_dependent_times, run_evaluation, run_op_times

FAMILY = "windowed"
REL = 1e-6
CASES = golden_cases()


def backends_here(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every backend with an ordered evaluator that runs in this test (CUDA on the
    stand-in where no GPU is usable)."""
    names = [n for n, r in BACKENDS.items() if FAMILY in r.evaluators and runnable(n, monkeypatch)]
    assert {"numpy", "numba"} <= set(names)
    return names


def mixed_population(rng: np.random.Generator, ticked, size: int, width: int) -> Population:
    """Random individuals (most stages recompute), then as many with stored-graph
    backwards (mirrored or coarsened), each with a valid order."""
    free = random_individuals(rng, ticked, size, width)
    caps = np.minimum(ticked.forward_caps, ticked.backward_caps)  # rows both directions take
    within = random_individuals(rng, replace(ticked, forward_caps=caps), size, width)
    aligned = coarsened_backwards(rng, within, ticked.backward_caps)
    both = Population(
        np.concatenate((free.forward, aligned.forward)),
        np.concatenate((free.backward, aligned.backward)),
    )
    return random_orders(rng, both, repaired=1.0, broken=0.0)


def arrays(population: Population) -> tuple:
    """The population's forward, backward and order genes."""
    return population.forward, population.backward, population.order


def scores(names: list[str], ticked, population: Population) -> dict[str, tuple]:
    """Each backend's ``(score, peak_held)`` on the host."""
    found = {}
    for name in names:
        xp = BACKENDS[name].namespace()
        on = Population(*(xp.asarray(a) for a in arrays(population)))
        evaluator = create_evaluator(ticked, FAMILY, name)
        found[name] = (to_host(evaluator.score(on)), to_host(evaluator.peak_held(on)))
    return found


def assert_all_equal(found: dict[str, tuple]) -> tuple:
    """The backends' results equal exactly; returns them."""
    (first, expected), *others = found.items()
    for name, got in others:
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} vs {first}")
    return expected


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_backend_equals_the_runtimes_pricing(
    case: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = Problem.from_dict(case["problem"])
    ticked = tick_problem(problem, RUN_PRICING)
    rng = np.random.default_rng(len(case_id(case)))
    population = mixed_population(rng, ticked, 40, 10)
    ticks, held = assert_all_equal(scores(backends_here(monkeypatch), ticked, population))
    model = scores(["numba"], tick_problem(problem), population)["numba"]
    np.testing.assert_array_equal(held, model[1])  # memory is the model's
    assert (ticks < INVALID).all()
    kinds = {"recompute": 0, "merged": 0}  # individuals with such a stage
    for p in range(population.size):
        plan = decode_plan(
            population.forward[p], population.backward[p], problem, population.order[p]
        )
        priced = run_op_times(problem, plan)
        expected = run_evaluation(problem, plan, priced).iteration_time
        assert ticks[p] * ticked.tick == pytest.approx(expected, rel=REL)
        kinds["recompute" if p < 40 else "merged"] += bool(priced)
    assert kinds["recompute"] and kinds["merged"]


def test_mirrored_plans_cost_what_the_model_says(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = Problem.from_dict(CASES[0]["problem"])
    rng = np.random.default_rng(5)
    run_ticked = tick_problem(problem, RUN_PRICING)
    caps = np.minimum(run_ticked.forward_caps, run_ticked.backward_caps)
    population = random_individuals(rng, replace(run_ticked, forward_caps=caps), 60, 8)
    population = random_orders(rng, replace(population, backward=population.forward), 1.0, 0.0)
    run = scores(backends_here(monkeypatch), run_ticked, population)
    model_ticked = tick_problem(problem)
    model = scores(["numba"], model_ticked, population)["numba"]
    for ticks, _ in run.values():
        np.testing.assert_allclose(ticks * run_ticked.tick, model[0] * model_ticked.tick, rtol=REL)


def recompute_table(rng: np.random.Generator, stages: int, num_units: int, top: int) -> np.ndarray:
    """``(S, U+1)`` random ticks in ``1..top``, entry 0 equal to 0 (as every table's)."""
    table = rng.integers(1, top + 1, (stages, num_units + 1))
    table[:, 0] = 0
    return table


def test_op_ticks_of_stored_recomputing_and_mirrored_stages() -> None:
    """Stage 0 covers forwards (2, 1 | 1) with backwards (3, 1): the sum of the chunks'
    Tb; stage 1 (2, 2) against (1, 3): recomputes; stage 2 mirrored."""
    rng = np.random.default_rng(1)
    ticked = random_ticked(rng, 3, 4, top=1000)
    ticked = replace(
        ticked,
        forward_caps=np.full(3, 4),
        backward_caps=np.full(3, 4),
        recompute_forward=recompute_table(rng, 3, 4, 1000),
        recompute_backward=recompute_table(rng, 3, 4, 1000),
    )
    forward = np.array([[[2, 1, 1], [2, 2, 0], [1, 3, 0]]])
    backward = np.array([[[3, 1, 0], [1, 3, 0], [1, 3, 0]]])
    fd, bd, stored = op_ticks(forward, backward, ticked)
    assert stored.tolist() == [[True, False, True]]
    fc, bc = ticked.forward_compute, ticked.backward_compute
    rf, rb = ticked.recompute_forward, ticked.recompute_backward
    assert fd[0].tolist() == [
        [fc[0, 2], fc[0, 1], fc[0, 1]],
        [rf[1, 2], rf[1, 2], 0],
        [fc[2, 1], fc[2, 3], 0],
    ]
    assert bd[0].tolist() == [
        [bc[0, 2] + bc[0, 1], bc[0, 1], 0],
        [rb[1, 1], rb[1, 3], 0],
        [bc[2, 1], bc[2, 3], 0],
    ]
    with pytest.raises(ValueError, match="run pricing"):
        op_ticks(forward, backward, replace(ticked, recompute_forward=None))


@pytest.mark.parametrize("seed", range(3))
def test_backends_agree_on_large_random_tables(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to 2**40 ticks, several chunks of :func:`op_ticks` (a small chunk size)."""
    monkeypatch.setattr("tidgap.backends.run_pricing.CHUNK_ENTRIES", 64)
    rng = np.random.default_rng(4000 + seed)
    stages, num_units = int(rng.integers(1, 7)), int(rng.integers(1, 48))
    ticked = random_ticked(rng, stages, num_units, top=2**40)
    ticked = replace(
        ticked,
        recompute_forward=recompute_table(rng, stages, num_units, 2**40),
        recompute_backward=recompute_table(rng, stages, num_units, 2**40),
        forward_after_backward=recompute_table(rng, stages, num_units, 2**40),
        backward_after_forward=recompute_table(rng, stages, num_units, 2**40),
    )
    population = mixed_population(rng, ticked, 70, min(num_units, 40) + 3)
    assert_all_equal(scores(backends_here(monkeypatch), ticked, population))


def test_an_unknown_pricing_is_refused() -> None:
    with pytest.raises(ValueError, match="pricing must be one of"):
        tick_problem(Problem.from_dict(CASES[0]["problem"]), "fast")


def test_a_calibrated_problem_prices_recomputing_stages_with_its_tables() -> None:
    data = CASES[0]["problem"]
    stages = len(data["stages"])
    data["source"] = {
        "calibration": {
            "recompute": [
                {"forward": {"affine": {"base": 0.5, "per_sample": 0.0}},
                 "backward": {"affine": {"base": 7.0, "per_sample": 0.0}}}
            ] * stages
        }
    }  # fmt: skip
    problem = Problem.from_dict(data)
    assert problem.recompute_times is not None
    ticked = tick_problem(problem, RUN_PRICING)
    sizes = np.arange(1, problem.forward_cap(0) // problem.unit + 1)
    assert ticked.recompute_forward[0, sizes] * ticked.tick == pytest.approx([0.5] * len(sizes))
    assert ticked.recompute_backward[0, sizes] * ticked.tick == pytest.approx([7.0] * len(sizes))


def order_calibrated(case: dict) -> Problem:
    """Golden ``case``'s problem with a calibration's order tables
    (:func:`tests.support.calibrations.order_tables`)."""
    data = copy.deepcopy(case["problem"])
    data["source"] = {"calibration": {"order": order_tables(data["stages"])}}
    return Problem.from_dict(data)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_ops_after_the_op_before_are_priced_as_the_runtime_runs_them(
    case: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = order_calibrated(case)
    assert problem.order_times is not None
    ticked = tick_problem(problem, RUN_PRICING)
    rng = np.random.default_rng(7 + len(case_id(case)))
    population = mixed_population(rng, ticked, 40, 10)
    ticks, _ = assert_all_equal(scores(backends_here(monkeypatch), ticked, population))
    assert (ticks < INVALID).all()
    plain_ticked = tick_problem(Problem.from_dict(case["problem"]), RUN_PRICING)
    plain = scores(["numba"], plain_ticked, population)["numba"][0] * plain_ticked.tick
    ordered = 0  # individuals with an op priced by the op before it
    for p in range(population.size):
        plan = decode_plan(
            population.forward[p], population.backward[p], problem, population.order[p]
        )
        expected = run_evaluation(problem, plan).iteration_time
        assert ticks[p] * ticked.tick == pytest.approx(expected, rel=REL)
        again = recomputes(plan)
        ordered += any(
            order_dependent_times(problem, plan, s)
            for s in range(problem.num_stages)
            if not again[s]
        )
    assert ordered
    assert (ticks * ticked.tick < plain * (1 - REL)).any()  # faster tables, and they count
