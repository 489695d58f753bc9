"""The CPU backends' ``chain_ends`` (NumPy matrix form, Numba loops), every stage's ends,
against the golden values, each other and the float oracle; the Numba wrapper's input checks.

The two compute in int64 ticks and must agree exactly; against the float references
(golden values, oracle) they agree up to the tick rounding (rel 1e-6). Every evaluator's
``score`` and halves are checked in ``test_contract.py``.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest

from tests.conftest import case_id, golden_cases
from tests.support.populations import (
    random_individuals,
    random_partition,
    random_population,
    random_ticked,
)
from tidgap import Plan, Problem, check_plan
from tidgap.backends import BACKENDS
from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.ticks import TickedProblem, tick_problem
from tidgap.fallback_cpu.flush_numba import chain_ends as numba_chain_ends
from tidgap.fallback_cpu.flush_numpy import chain_ends as numpy_chain_ends
from tidgap.optimize.genome import Population, decode_plan, encode_plan
from tidgap.schedules.flush import evaluate

REL = 1e-6
CASES = golden_cases()
CPU_BACKENDS = [name for name, record in BACKENDS.items() if record.device == "cpu"]


def ticked_case(case: dict[str, Any]) -> tuple[Problem, TickedProblem]:
    problem = Problem.from_dict(case["problem"])
    return problem, tick_problem(problem)


def test_random_populations_are_feasible_and_ragged() -> None:
    rng = np.random.default_rng(0)
    caps = np.array([3, 20, 7, 20])
    genes = random_population(rng, caps, 20, 200, 32)
    assert genes.dtype == np.int32 and genes.shape == (200, 4, 32)
    assert (genes.sum(axis=2) == 20).all()
    assert (genes.max(axis=2) <= caps).all()
    counts = (genes > 0).sum(axis=2)
    assert ((genes > 0) == (np.arange(32) < counts[..., None])).all(), "zeros inside a row"
    assert counts.max() < 32 and len(np.unique(counts)) > 10
    assert (counts.min(axis=1) < counts.max(axis=1)).mean() > 0.9, "rows should differ in length"


# --- (a) golden values, both backends -----------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_golden_per_stage_ends(golden_case: dict[str, Any], backend: str) -> None:
    """Every stage's forward end and backward end, not only the last ones."""
    problem, ticked = ticked_case(golden_case)
    chain_ends = create_evaluator(ticked, "flush", backend).chain_ends
    for entry in golden_case["plans"]:
        plan = Plan.of(entry["forward"], entry["backward"])
        forward, backward = encode_plan(plan, problem, problem.num_units + 3)
        expected = entry["expected"]
        ends = chain_ends(forward[None], ticked.forward_compute, ticked.forward_transfer)[0]
        assert ticked.to_time(ends) == pytest.approx(expected["forward_ends"], rel=REL)
        back = chain_ends(
            np.ascontiguousarray(backward[None, ::-1]),
            ticked.backward_compute[::-1],
            ticked.backward_transfer[::-1],
        )[0, ::-1]
        got = ticked.to_time(back + ends[-1])
        assert got == pytest.approx(expected["backward_ends"], rel=REL)


# --- (b) NumPy and Numba agree exactly ----------------------------------------------------


def assert_chain_ends_agree(ticked: TickedProblem, population: Population) -> None:
    for genes, compute, transfer in (
        (population.forward, ticked.forward_compute, ticked.forward_transfer),
        (population.backward, ticked.backward_compute, ticked.backward_transfer),
    ):
        expected = numpy_chain_ends(genes, compute, transfer)
        got = numba_chain_ends(genes, compute, transfer)
        assert got.dtype == np.int64 and got.shape == expected.shape == genes.shape[:2]
        assert np.array_equal(got, expected)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_chain_ends_agree_on_golden_problems(case: dict[str, Any]) -> None:
    _, ticked = ticked_case(case)
    rng = np.random.default_rng(zlib.crc32(case_id(case).encode()))
    U = ticked.num_units
    for size, width in ((1, min(U, 40)), (97, min(U, 40) + 5), (300, min(U, 40) + 60)):
        assert_chain_ends_agree(ticked, random_individuals(rng, ticked, size, width))


def test_numpy_chain_ends_in_chunks_equal_one_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    """In chunks (of 7 here, each trimmed to its own widest row) the NumPy chain gives
    what it gives in one piece, and what Numba gives."""
    from tidgap.fallback_cpu import flush_numpy

    rng = np.random.default_rng(42)
    ticked = random_ticked(rng, 5, 48, top=2**20)
    genes = random_individuals(rng, ticked, 50, 60).forward
    tables = ticked.forward_compute, ticked.forward_transfer
    whole = numpy_chain_ends(genes, *tables)
    monkeypatch.setattr(flush_numpy, "CHUNK", 7)
    assert np.array_equal(numpy_chain_ends(genes, *tables), whole)
    assert np.array_equal(numba_chain_ends(genes, *tables), whole)


@pytest.mark.parametrize("seed", range(12))
def test_chain_ends_agree_on_large_random_tables(seed: int) -> None:
    """Values up to 2**40 ticks exercise int64; S = 1 (no links) and P = 1 included."""
    rng = np.random.default_rng(1000 + seed)
    stages = 1 if seed < 3 else int(rng.integers(2, 9))
    num_units = int(rng.integers(1, 64))
    ticked = random_ticked(rng, stages, num_units, top=2**40)
    size = 1 if seed % 4 == 0 else int(rng.integers(2, 400))
    width = min(num_units, 40) + int(rng.integers(0, 100))  # often far wider than needed
    population = random_individuals(rng, ticked, size, width)
    assert_chain_ends_agree(ticked, population)
    if stages == 1:
        assert ticked.forward_transfer.shape == (0, num_units + 1)
    big = numba_chain_ends(population.forward, ticked.forward_compute, ticked.forward_transfer)
    if size > 1 and (ticked.forward_compute > 0).any():
        assert big.max() > 2**40, "large tables should give end times past 2**40"


def test_target_shape_agrees() -> None:
    """The benchmark's shape: S = 8, U = 256, 12..20 microbatches per row, K = 32."""
    rng = np.random.default_rng(5)
    genes = np.zeros((512, 8, 32), dtype=np.int32)
    for p in range(512):
        for s in range(8):
            count = int(rng.integers(12, 21))
            genes[p, s, :count] = random_partition(rng, 256, 256, count)
    compute = rng.integers(1, 2**30, size=(8, 257))
    transfer = rng.integers(1, 2**30, size=(7, 257))
    compute[:, 0] = transfer[:, 0] = 0
    expected = numpy_chain_ends(genes, compute, transfer)
    assert np.array_equal(numba_chain_ends(genes, compute, transfer), expected)


def test_numba_wrapper_accepts_any_layout_and_integer_type() -> None:
    rng = np.random.default_rng(9)
    ticked = random_ticked(rng, 4, 12, top=1000)
    genes = random_individuals(rng, ticked, 50, 16).forward
    compute, transfer = ticked.forward_compute, ticked.forward_transfer
    expected = numpy_chain_ends(genes, compute, transfer)
    wide = np.zeros((50, 4, 40), dtype=np.int64)
    wide[:, :, ::2][:, :, :16] = genes  # a strided view of int64 sizes
    view = wide[:, :, ::2]
    assert not view.flags.c_contiguous
    assert np.array_equal(numba_chain_ends(view, compute, transfer), expected)
    assert np.array_equal(
        numba_chain_ends(genes, compute.astype(np.int32), np.asfortranarray(transfer)), expected
    )
    assert numba_chain_ends(genes[:0], compute, transfer).shape == (0, 4)


def test_numba_rejects_invalid_individuals() -> None:
    compute = np.arange(5 * 2, dtype=np.int64).reshape(2, 5)
    compute[:, 0] = 0
    transfer = np.ones((1, 5), dtype=np.int64)
    good = np.array([[[2, 2, 0], [1, 3, 0]]], dtype=np.int32)
    assert numba_chain_ends(good, compute, transfer).shape == (1, 2)
    too_large = np.array([[[5, 0, 0], [4, 1, 0]]], dtype=np.int32)
    negative = np.array([[[-1, 5, 0], [4, 0, 0]]], dtype=np.int32)
    different_sums = np.array([[[2, 2, 0], [1, 2, 0]]], dtype=np.int32)
    empty_row = np.array([[[4, 0, 0], [0, 0, 0]]], dtype=np.int32)
    for bad in (too_large, negative, different_sums, empty_row):
        population = np.concatenate([good, good, bad, good])
        with pytest.raises(ValueError, match="individual 2 "):
            numba_chain_ends(population, compute, transfer)
    with pytest.raises(ValueError):
        numba_chain_ends(good, compute, np.ones((2, 5), dtype=np.int64))


# --- (c) the tick backends against the float oracle ---------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_stage_ends_match_oracle_on_random_individuals(
    golden_case: dict[str, Any], backend: str
) -> None:
    problem, ticked = ticked_case(golden_case)
    rng = np.random.default_rng(zlib.crc32(f"{case_id(golden_case)}/{backend}".encode()))
    width = min(problem.num_units, 30) + 4
    population = random_individuals(rng, ticked, 25, width, max_count=30)
    evaluator = create_evaluator(ticked, "flush", backend)
    stage_ends = ticked.to_time(
        evaluator.chain_ends(population.forward, ticked.forward_compute, ticked.forward_transfer)
    )
    for p in range(population.size):
        plan = decode_plan(population.forward[p], population.backward[p], problem)
        check_plan(plan, problem)
        expected = evaluate(problem, plan)
        assert stage_ends[p] == pytest.approx(expected.forward_ends, rel=REL)


def test_numba_is_imported_only_by_its_backend() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tidgap, tidgap.backends.evaluator, tidgap.fallback_cpu.flush_numpy;"
        "assert 'numba' not in sys.modules and 'cupy' not in sys.modules;"
        "import tidgap.fallback_cpu.flush_numba; assert 'numba' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
