"""The evaluator contract, for every (backend, family) pair of the registry: ``score`` equals
the family's reference on the golden cases and random plans, and the backends of a family
equal each other exactly, in ticks.

Against the float reference the ticks agree up to the tick rounding (rel 1e-6); between
backends they are equal. A family without the flush (ordered plans) is scored on explicit
orders (``Population.order``): its evaluators also give ``peak_held``, equal to the
reference's exactly, and an order that cannot finish scores ``INVALID`` on every backend. A
GPU backend runs on the fake CuPy where no GPU is usable.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from tests.conftest import case_id, golden_cases
from tests.support.backends import run_here, runnable
from tests.support.golden_ordered import ordered_plan
from tests.support.populations import random_individuals, random_orders, random_ticked
from tidgap import Plan, Problem, check_plan
from tidgap.backends import BACKENDS, Backend, UnusableBackend
from tidgap.backends.evaluator import INVALID, create_evaluator
from tidgap.backends.ticks import TickedProblem, tick_problem
from tidgap.backends.xp import to_host
from tidgap.optimize.genome import (
    BACKWARD_OP,
    FORWARD_OP,
    NO_OP,
    Population,
    decode_order,
    decode_partitions,
    decode_plan,
    encode_order,
    encode_plan,
)
from tidgap.schedules.baselines import feasible_microbatch_counts, one_f_one_b_plan
from tidgap.schedules.families import SCHEDULES
from tidgap.schedules.ir import first_violation

REL = 1e-6
CASES = golden_cases()


FAMILIES = list(dict.fromkeys(f for record in BACKENDS.values() for f in record.evaluators))
PAIRS = [(name, f) for name, record in BACKENDS.items() for f in record.evaluators]


def pair_id(pair: tuple[str, str]) -> str:
    return "-".join(pair)


def is_ordered(family: str) -> bool:
    """Whether ``family``'s plans carry an order (populations with order genes)."""
    return not SCHEDULES[family].has_flush


def test_every_family_with_an_evaluator_has_a_reference() -> None:
    assert PAIRS
    for family in FAMILIES:
        assert SCHEDULES[family].evaluate is not None, family


@dataclass(frozen=True)
class Scored:
    """A golden problem, its plans (the golden ones, then random ones) as one population,
    and their reference evaluations."""

    problem: Problem
    ticked: TickedProblem
    population: Population
    expected: list[Any]


def golden_plans(case: dict[str, Any], problem: Problem, ordered: bool) -> list[Plan]:
    """The golden plans of ``case``: its ordered plans, and 1F1B(m) for up to six feasible
    ``m``, when ``ordered``; its flush plans otherwise."""
    if not ordered:
        return [Plan.of(entry["forward"], entry["backward"]) for entry in case["plans"]]
    counts = feasible_microbatch_counts(problem)
    chosen = sorted({counts[0], counts[-1], *counts[:: max(1, len(counts) // 4)]})
    return [ordered_plan(entry) for entry in case["ordered_plans"]] + [
        one_f_one_b_plan(problem, m) for m in chosen
    ]


@functools.cache
def scored_case(index: int, family: str) -> Scored:
    """Golden case ``index``: its plans (see :func:`golden_plans`) and 20 random feasible
    ones (with repaired random orders for an ordered family), with ``family``'s reference
    evaluation of each."""
    case = CASES[index]
    problem = Problem.from_dict(case["problem"])
    ticked = tick_problem(problem)
    ordered = is_ordered(family)
    golden = golden_plans(case, problem, ordered)
    width = max(min(problem.num_units, 30) + 4, *(len(p) for g in golden for p in g.forward))
    width = max(width, *(len(p) for g in golden for p in g.backward))
    rng = np.random.default_rng(zlib.crc32(case_id(case).encode()))
    randoms = random_individuals(rng, ticked, 20, width, max_count=30)
    if ordered:
        randoms = random_orders(rng, randoms, repaired=1.0, broken=0.0)
    plans = golden + [
        decode_plan(
            randoms.forward[p],
            randoms.backward[p],
            problem,
            None if randoms.order is None else randoms.order[p],
        )
        for p in range(20)
    ]
    for plan in plans:
        check_plan(plan, problem)
    encoded = [encode_plan(plan, problem, width) for plan in plans]
    population = Population(
        np.stack([f for f, _ in encoded]),
        np.stack([b for _, b in encoded]),
        np.stack([encode_order(plan, width) for plan in plans]) if ordered else None,
    )
    expected = [SCHEDULES[family].evaluate(problem, plan) for plan in plans]
    return Scored(problem, ticked, population, expected)


def on_backend(record: Backend, population: Population) -> Population:
    """``population`` in the backend's array module."""
    xp = record.namespace()
    order = None if population.order is None else xp.asarray(population.order)
    return Population(xp.asarray(population.forward), xp.asarray(population.backward), order)


def first(population: Population) -> Population:
    """The population of its first individual."""
    order = None if population.order is None else population.order[:1]
    return Population(population.forward[:1], population.backward[:1], order)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case_id(c) for c in CASES])
@pytest.mark.parametrize(("backend", "family"), PAIRS, ids=map(pair_id, PAIRS))
def test_score_equals_the_reference(
    backend: str, family: str, index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_here(backend, monkeypatch)
    case = scored_case(index, family)
    record = BACKENDS[backend]
    evaluator = create_evaluator(case.ticked, family, backend)
    population = on_backend(record, case.population)
    ticks = to_host(evaluator.score(population))
    assert ticks.dtype == np.int64 and ticks.shape == (population.size,)
    wanted = [e.iteration_time for e in case.expected]
    assert case.ticked.to_time(ticks) == pytest.approx(wanted, rel=REL)
    single = on_backend(record, first(case.population))
    assert np.array_equal(to_host(evaluator.score(single)), ticks[:1])
    if is_ordered(family):
        held = to_host(evaluator.peak_held(population))
        assert held.dtype == np.int64
        assert held.tolist() == [e.peak_held for e in case.expected]
    if SCHEDULES[family].separable:
        forward = to_host(evaluator.forward_end(population.forward))
        backward = to_host(evaluator.backward_span(population.backward))
        assert np.array_equal(forward + backward, ticks)
        wanted = [e.forward_end for e in case.expected]
        assert case.ticked.to_time(forward) == pytest.approx(wanted, rel=REL)


def runnable_backends(family: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The backends with an evaluator of ``family`` that can run in this test; skip unless
    there are two to compare."""
    names = [n for n, r in BACKENDS.items() if family in r.evaluators and runnable(n, monkeypatch)]
    if len(names) < 2:
        pytest.skip(f"fewer than two backends of {family} run here: {names}")
    return names


def assert_backends_agree(
    names: list[str], family: str, ticked: TickedProblem, population: Population
) -> None:
    """Every backend's ``score`` (and halves, for a separable family) equal, exactly."""
    results = {}
    for name in names:
        evaluator = create_evaluator(ticked, family, name)
        on = on_backend(BACKENDS[name], population)
        result = [to_host(evaluator.score(on))]
        if is_ordered(family):
            result.append(to_host(evaluator.peak_held(on)))
        if SCHEDULES[family].separable:
            result.append(to_host(evaluator.forward_end(on.forward)))
            result.append(to_host(evaluator.backward_span(on.backward)))
        results[name] = result
    first, *others = names
    for name in others:
        for got, expected in zip(results[name], results[first], strict=True):
            assert got.dtype == expected.dtype == np.int64
            np.testing.assert_array_equal(got, expected, err_msg=f"{name} vs {first}")


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("family", FAMILIES)
def test_backends_agree_on_golden_problems(
    family: str, case: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    names = runnable_backends(family, monkeypatch)
    ticked = tick_problem(Problem.from_dict(case["problem"]))
    rng = np.random.default_rng(zlib.crc32(f"{case_id(case)}/agree".encode()))
    width = min(ticked.num_units, 40)
    for size, extra in ((1, 0), (97, 5), (300, 60)):
        population = random_individuals(rng, ticked, size, width + extra)
        if is_ordered(family):
            population = random_orders(rng, population)
        assert_backends_agree(names, family, ticked, population)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("family", FAMILIES)
def test_backends_agree_on_large_random_tables(
    family: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values up to 2**40 ticks exercise int64; S = 1 (no links) and P = 1 included."""
    names = runnable_backends(family, monkeypatch)
    rng = np.random.default_rng(2000 + seed)
    stages = 1 if seed < 2 else int(rng.integers(2, 9))
    num_units = int(rng.integers(1, 64))
    ticked = random_ticked(rng, stages, num_units, top=2**40)
    size = 1 if seed % 3 == 0 else int(rng.integers(2, 200))
    population = random_individuals(rng, ticked, size, min(num_units, 40) + 7)
    if is_ordered(family):
        population = random_orders(rng, population)
    assert_backends_agree(names, family, ticked, population)


def valid_order(population: Population, p: int) -> bool:
    """Whether individual ``p``'s order genes are codes 0 / 1 then padding, and its letters
    pass rules ``count``, 1 and 2 (:func:`tidgap.schedules.ir.first_violation`)."""
    codes = population.order[p]
    ops = codes != NO_OP
    if not np.isin(codes, (FORWARD_OP, BACKWARD_OP, NO_OP)).all():
        return False
    if (ops != (np.arange(codes.shape[1]) < ops.sum(axis=1, keepdims=True))).any():
        return False
    forward = decode_partitions(population.forward[p], 1)
    backward = decode_partitions(population.backward[p], 1)
    return first_violation(decode_order(codes), forward, backward) is None


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("family", [f for f in FAMILIES if is_ordered(f)])
def test_backends_agree_and_an_order_that_cannot_finish_is_invalid(
    family: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random interleavings, most of them deadlocks: ``INVALID`` (``peak_held`` 0) exactly
    where the order breaks rule ``count``, 1 or 2, on every backend."""
    names = [n for n, r in BACKENDS.items() if family in r.evaluators and runnable(n, monkeypatch)]
    rng = np.random.default_rng(3000 + seed)
    stages, num_units = int(rng.integers(1, 6)), int(rng.integers(1, 24))
    ticked = random_ticked(rng, stages, num_units, top=2**20)
    population = random_orders(rng, random_individuals(rng, ticked, 150, num_units + 3), 0.3, 0.2)
    broken = np.array([not valid_order(population, p) for p in range(population.size)])
    assert broken.any() and not broken.all()
    for name in names:
        evaluator = create_evaluator(ticked, family, name)
        on = on_backend(BACKENDS[name], population)
        ticks, held = to_host(evaluator.score(on)), to_host(evaluator.peak_held(on))
        assert np.array_equal(ticks == INVALID, broken), name
        assert (held[broken] == 0).all() and (held[~broken] > 0).all()
    assert_backends_agree(names, family, ticked, population)


# --- pairs that do not exist ----------------------------------------------------------------


def test_a_missing_pair_is_one_line_naming_the_pairs_that_exist(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticked = scored_case(0, "flush").ticked
    monkeypatch.setitem(BACKENDS, "numpy", replace(BACKENDS["numpy"], evaluators={}))
    for name in ("cuda", "numba"):
        flush_only = {"flush": BACKENDS[name].evaluators["flush"]}
        monkeypatch.setitem(BACKENDS, name, replace(BACKENDS[name], evaluators=flush_only))
    late = replace(BACKENDS["numpy"], name="late", evaluators={"windowed": "no.such:module"})
    monkeypatch.setitem(BACKENDS, "late", late)
    expected = {
        ("windowed", "numba"): "windowed has no numba evaluator; evaluators exist for: "
        "flush (cuda, numba); windowed (late)",
        ("flush", "numpy"): "flush has no numpy evaluator; evaluators exist for: "
        "flush (cuda, numba); windowed (late)",
    }
    for (family, backend), message in expected.items():
        with pytest.raises(ValueError) as error:
            create_evaluator(ticked, family, backend)
        assert str(error.value) == message


@pytest.mark.parametrize("family", ["windowed", "no-such-family"])
def test_the_registry_names_its_pairs_when_one_is_missing(family: str) -> None:
    ticked = scored_case(0, "flush").ticked
    for name, record in BACKENDS.items():
        if family in record.evaluators:
            continue
        with pytest.raises(ValueError) as error:
            create_evaluator(ticked, family, name)
        message = str(error.value)
        head = f"{family} has no {name} evaluator; evaluators exist for: "
        assert message.startswith(head) and "\n" not in message
        for pair_family, pair_backend in PAIRS:
            assert pair_family in message and pair_backend in message


def test_an_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"^unknown backend 'tpu'; known: ") as error:
        create_evaluator(scored_case(0, "flush").ticked, "flush", "tpu")
    assert str(error.value).endswith(", ".join(BACKENDS))


def test_an_unusable_backend_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = replace(BACKENDS["numba"], unusable_reason=lambda: "it is broken here")
    monkeypatch.setitem(BACKENDS, "numba", broken)
    with pytest.raises(UnusableBackend, match=r"^no usable Numba: it is broken here$"):
        create_evaluator(scored_case(0, "flush").ticked, "flush", "numba")
