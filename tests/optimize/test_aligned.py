"""Flush plans that recompute nothing (:mod:`tidgap.optimize.aligned`): the repair gives
valid, aligned backward chromosomes; the search over coarsenings is never slower than its
seeds, is seeded, and beats every aligned pair of equal partitions."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.optimize.test_operators import assert_feasible
from tests.support.backends import install_fake_cupy
from tests.support.populations import random_population, random_ticked
from tidgap import Plan, Problem, evaluate, search
from tidgap.backends.evaluator import create_evaluator, flush_numpy
from tidgap.backends.ticks import TickedProblem, tick_problem
from tidgap.optimize.aligned import (
    AlignedPair,
    aligned_pair,
    aligned_search,
    coarsen,
    fits,
    snap,
)
from tidgap.optimize.genome import decode_partitions, encode_plan
from tidgap.optimize.operators import equal_rows
from tidgap.optimize.order_genes import misaligned
from tidgap.optimize.rng import CounterRng
from tidgap.runtime.lowering import recomputes

UNITS, WIDTH, SIZE = 24, 12, 300
FORWARD_CAPS = np.array([24, 6, 8, 12, 3], dtype=np.int64)
BACKWARD_CAPS = np.array([4, 24, 12, 3, 5], dtype=np.int64)


def assert_aligned(forward: np.ndarray, backward: np.ndarray) -> None:
    """Every individual of ``(P, S, K)`` chromosomes recomputes nothing, by the GA's test
    and by the runtime's rule on the decoded plan."""
    assert not misaligned(forward, backward).any()
    for p in range(len(forward)):
        plan = Plan.of(decode_partitions(forward[p], 1), decode_partitions(backward[p], 1))
        assert not any(recomputes(plan)), p


@pytest.fixture(scope="module")
def chromosomes() -> tuple[np.ndarray, np.ndarray]:
    """Random forwards (within the forward caps, so some over a backward cap) and random
    backwards within the backward caps."""
    rng = np.random.default_rng(3)
    forward = random_population(rng, FORWARD_CAPS, UNITS, SIZE, WIDTH)
    backward = random_population(rng, BACKWARD_CAPS, UNITS, SIZE, WIDTH)
    return forward, backward


def align_backward(forward: np.ndarray, backward: np.ndarray, caps: np.ndarray):
    """``(backward', aligned)``: the repair of ``(P, S, K)`` ``backward`` onto ``forward``
    (:func:`snap`, then :func:`coarsen` within ``caps``) where the forward fits the backward
    caps (``(P,)`` ``aligned``), else ``backward`` unchanged: as the search repairs."""
    repaired, _ = coarsen(forward, snap(forward, backward), caps)
    aligned = fits(forward, caps)
    return np.where(aligned[:, None, None], repaired, backward), aligned


def test_the_repair_gives_valid_aligned_backwards(chromosomes) -> None:
    forward, backward = chromosomes
    repaired, aligned = align_backward(forward, backward, BACKWARD_CAPS)
    assert_feasible(repaired, BACKWARD_CAPS, UNITS)
    fits = (forward <= BACKWARD_CAPS[None, :, None]).all(axis=(1, 2))
    np.testing.assert_array_equal(aligned, fits)
    assert 0 < aligned.sum() < SIZE
    assert_aligned(forward[aligned], repaired[aligned])
    np.testing.assert_array_equal(repaired[~aligned], backward[~aligned])
    assert misaligned(forward, backward)[aligned].any()


def test_the_repair_leaves_aligned_input_unchanged(chromosomes) -> None:
    forward, backward = chromosomes
    repaired, aligned = align_backward(forward, backward, BACKWARD_CAPS)
    again, still = align_backward(forward, repaired, BACKWARD_CAPS)
    np.testing.assert_array_equal(again, repaired)
    np.testing.assert_array_equal(still, aligned)
    itself, _ = align_backward(forward[aligned], forward[aligned], BACKWARD_CAPS)
    np.testing.assert_array_equal(itself, forward[aligned])


def fewest_merged(sizes: list[int], cap: int) -> int:
    """The fewest backward microbatches that merge consecutive ``sizes`` within ``cap``."""
    best = [0] + [len(sizes) + 1] * len(sizes)
    for end in range(1, len(sizes) + 1):
        for start in range(end):
            if sum(sizes[start:end]) <= cap:
                best[end] = min(best[end], best[start] + 1)
    return best[-1]


def test_coarsen_without_cuts_merges_into_the_fewest_microbatches(chromosomes) -> None:
    forward, _ = chromosomes
    forward = forward[(forward <= BACKWARD_CAPS[None, :, None]).all(axis=(1, 2))]
    merged, cuts = coarsen(forward, np.zeros(forward.shape, dtype=bool), BACKWARD_CAPS)
    assert_feasible(merged, BACKWARD_CAPS, UNITS)
    assert_aligned(forward, merged)
    for p in range(len(forward)):
        for s, cap in enumerate(BACKWARD_CAPS):
            sizes = [int(u) for u in forward[p, s] if u]
            assert (merged[p, s] > 0).sum() == fewest_merged(sizes, int(cap)), (p, s)
            assert cuts[p, s].sum() == (merged[p, s] > 0).sum() - 1


def search_case(seed: int) -> tuple[TickedProblem, np.ndarray, np.ndarray]:
    """A random ticked problem, a forward chromosome within both caps on every stage and a
    backward one within the backward caps, ``(S, K)`` each."""
    rng = np.random.default_rng(seed)
    ticked = random_ticked(rng, 4, 30, 50)
    both = np.minimum(ticked.forward_caps, ticked.backward_caps)
    forward = random_population(rng, both, 30, 1, 40)[0]
    backward = random_population(rng, ticked.backward_caps, 30, 1, 40)[0]
    return ticked, forward, backward


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_search_is_never_slower_than_its_seeds_and_is_seeded(seed: int) -> None:
    ticked, forward, backward = search_case(seed)
    span = flush_numpy(ticked).backward_span
    caps = ticked.backward_caps
    found, ticks = aligned_search(forward, backward, caps, span, CounterRng(seed), rounds=4)
    assert_feasible(found[None], caps, 30)
    assert_aligned(forward[None], found[None])
    assert ticks == int(span(found[None])[0])
    repaired, _ = align_backward(forward[None], backward[None], caps)
    assert ticks <= int(span(forward[None])[0])
    assert ticks <= int(span(repaired)[0])
    again = aligned_search(forward, backward, caps, span, CounterRng(seed), rounds=4)
    np.testing.assert_array_equal(again[0], found)
    assert again[1] == ticks


def test_the_search_refuses_a_forward_over_the_backward_cap() -> None:
    ticked, forward, backward = search_case(0)
    caps = ticked.backward_caps.copy()
    caps[1] = forward[1].max() - 1
    with pytest.raises(ValueError, match="backward cap"):
        aligned_search(forward, backward, caps, flush_numpy(ticked).backward_span, CounterRng(0))


def misaligning_problem() -> Problem:
    """Two stages of 12 samples: forwards cap 3, backwards cap 4, a large cost per
    microbatch: the fastest forward and backward partitions cut at different samples."""
    stage = {
        "forward": {"affine": {"base": 1.0, "per_sample": 0.1}},
        "backward": {"affine": {"base": 2.0, "per_sample": 0.2}},
        "max_microbatch": 3,
        "max_microbatch_backward": 4,
    }
    link = {"forward": {"affine": {"base": 0.1, "per_sample": 0.0}}}
    link["backward"] = link["forward"]
    data = {"format": "tidgap.problem/1", "batch_size": 12, "stages": [stage, stage]}
    return Problem.from_dict({**data, "links": [link]}, default_name="misaligning")


def best_equal_aligned_ticks(ticked: TickedProblem, evaluator) -> int:
    """The least ``forward_end + backward_span`` over pairs of equal partitions (the same on
    every stage) within the caps whose backward boundaries are forward boundaries."""
    units, stages = ticked.num_units, ticked.num_stages
    rows = equal_rows(units, np.arange(1, units + 1), units)
    chromosomes = np.repeat(rows[:, None, :], stages, axis=1)
    forwards = chromosomes[(chromosomes <= ticked.forward_caps[None, :, None]).all(axis=(1, 2))]
    backwards = chromosomes[(chromosomes <= ticked.backward_caps[None, :, None]).all(axis=(1, 2))]
    best = None
    for forward in forwards:
        for backward in backwards:
            if not misaligned(forward[None], backward[None])[0]:
                ticks = int(evaluator.forward_end(forward[None])[0])
                ticks += int(evaluator.backward_span(backward[None])[0])
                best = ticks if best is None else min(best, ticks)
    assert best is not None
    return best


def misaligning_pair(backend: str, xp) -> tuple[AlignedPair, Plan]:
    """:func:`aligned_pair` from the free flush search's best chromosomes, and that plan."""
    problem = misaligning_problem()
    free = search(problem, schedule="flush", generations=30, seed=0, population=64)
    ticked = tick_problem(problem)
    evaluator = create_evaluator(ticked, "flush", backend)
    forward, backward = (xp.asarray(c) for c in encode_plan(free.plan, problem, UNITS // 2))
    pair = aligned_pair(
        forward[None],
        ticked.forward_caps,
        evaluator.forward_end,
        backward,
        ticked.backward_caps,
        evaluator.backward_span,
        CounterRng(0, xp),
    )
    return pair, free.plan


def test_where_the_free_optimum_misaligns_the_pair_is_aligned_and_beats_equal_pairs() -> None:
    pair, free = misaligning_pair("numpy", np)
    assert any(recomputes(free))
    problem = misaligning_problem()
    ticked = tick_problem(problem)
    assert_feasible(pair.forward[None], ticked.forward_caps, ticked.num_units)
    assert_feasible(pair.backward[None], ticked.backward_caps, ticked.num_units)
    assert_aligned(pair.forward[None], pair.backward[None])
    assert pair.ticks <= best_equal_aligned_ticks(ticked, flush_numpy(ticked))
    plan = Plan.of(decode_partitions(pair.forward, 1), decode_partitions(pair.backward, 1))
    assert evaluate(problem, plan).iteration_time == pytest.approx(ticked.to_time(pair.ticks))
    assert evaluate(problem, plan).iteration_time > evaluate(problem, free).iteration_time


def test_the_cupy_stand_in_finds_the_same_backward_and_pair(monkeypatch) -> None:
    """Through the CUDA evaluator's launchers and ``CounterRng`` on the CuPy stand-in."""
    ticked, forward, backward = search_case(1)
    caps = ticked.backward_caps
    expected = aligned_search(
        forward, backward, caps, flush_numpy(ticked).backward_span, CounterRng(4), rounds=3
    )
    cpu_pair, _ = misaligning_pair("numpy", np)
    install_fake_cupy(monkeypatch)
    fake = sys.modules["cupy"]
    span = create_evaluator(ticked, "flush", "cuda").backward_span
    got = aligned_search(
        fake.asarray(forward),
        fake.asarray(backward),
        fake.asarray(caps),
        span,
        CounterRng(4, fake),
        rounds=3,
    )
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1] == expected[1]
    gpu_pair, _ = misaligning_pair("cuda", fake)
    np.testing.assert_array_equal(gpu_pair.forward, cpu_pair.forward)
    np.testing.assert_array_equal(gpu_pair.backward, cpu_pair.backward)
    assert gpu_pair.ticks == cpu_pair.ticks


def test_a_pair_needs_a_candidate_within_the_backward_caps() -> None:
    """Forwards of 4 samples, backward caps of 2 and room for 3 microbatches: no forward
    candidate, equal or given, fits."""
    evaluator = flush_numpy(random_ticked(np.random.default_rng(0), 2, 8, 50))
    forward = np.array([[[4, 4, 0], [4, 4, 0]]], dtype=np.int32)
    caps = np.array([2, 2], dtype=np.int64)
    with pytest.raises(ValueError, match="over a backward cap"):
        aligned_pair(
            forward,
            np.array([4, 4]),
            evaluator.forward_end,
            forward[0],
            caps,
            evaluator.backward_span,
            CounterRng(0),
        )
