"""The lead gene (tidgap.optimize.order_genes): the vectorised repair is the reference
repair, valid orders and the baselines round-trip, any lead lowers to a valid order."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.strategies import orders, partitions
from tidgap import Link, Plan, Problem, Stage, affine
from tidgap.optimize.genome import (
    BACKWARD_OP,
    FORWARD_OP,
    GENE,
    NO_OP,
    decode_order,
    encode_order,
    encode_partitions,
)
from tidgap.optimize.operators import microbatch_counts
from tidgap.optimize.order_genes import (
    canonical,
    encode_lead,
    holder,
    lower,
    order_codes,
    own_forwards,
    prefix,
)
from tidgap.schedules.baselines import gpipe_plan, one_f_one_b_plan
from tidgap.schedules.ir import first_violation, forwards_before, repair

EXAMPLES = settings(max_examples=60, deadline=None, derandomize=True, database=None)


@st.composite
def population(draw: st.DrawFn, any_order: bool = True) -> tuple[list[Plan], int]:
    """``(plans, width)``: ``P`` in 2..4 plans in units (unit 1) over one ``S`` in 1..6 and
    ``U`` in 1..8, each stage's two partitions drawn on their own (row counts differ), with a
    random order (``any_order``: rules 1 and 2 may break) or its repair (valid)."""
    stages, units = draw(st.integers(1, 6)), draw(st.integers(1, 8))
    result = []
    for _ in range(draw(st.integers(2, 4))):
        forward = [draw(partitions(units, units)) for _ in range(stages)]
        backward = [draw(partitions(units, units)) for _ in range(stages)]
        order = draw(orders(Plan.of(forward, backward)))
        if not any_order:
            order = repair(order, forward, backward)
        result.append(Plan.of(forward, backward, order=list(order.stages)))
    return result, units + draw(st.integers(0, 2))


def stacked(plans: list[Plan], width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(forward, backward, lead)``, each ``(P, S, width)``, of ``plans`` (sizes in units)."""
    return (
        np.stack([encode_partitions(plan.forward, 1, width) for plan in plans]),
        np.stack([encode_partitions(plan.backward, 1, width) for plan in plans]),
        np.stack([encode_lead(plan, width) for plan in plans]),
    )


def junk_padding(lead: np.ndarray, backward: np.ndarray, draw: st.DrawFn) -> np.ndarray:
    """``lead`` with random values after each stage's ``N_s`` backwards (entries ignored)."""
    noise = np.array(draw(st.lists(st.integers(-50, 50), min_size=lead.size, max_size=lead.size)))
    column = np.arange(lead.shape[-1])
    padding = column >= microbatch_counts(backward)[..., None]
    return np.where(padding, noise.reshape(lead.shape), lead).astype(GENE)


def assert_codes_are(codes: np.ndarray, plan: Plan, width: int) -> None:
    """``codes`` (``(S, 2 width)``) are ``plan``'s order, padded with NO_OP."""
    np.testing.assert_array_equal(codes, encode_order(plan, width))


@given(st.data())
@EXAMPLES
def test_canonical_codes_are_the_reference_repair_of_any_order(data: st.DataObject) -> None:
    plans, width = data.draw(population())
    forward, backward, lead = stacked(plans, width)
    lead = junk_padding(lead, backward, data.draw)
    fixed, codes = canonical(forward, backward, lead)
    assert fixed.dtype == GENE and codes.shape == (len(plans), forward.shape[1], 2 * width)
    for p, plan in enumerate(plans):
        expected = repair(plan.stage_order(), plan.forward, plan.backward)
        assert decode_order(codes[p]) == expected
        repaired = Plan.of(plan.forward, plan.backward, order=list(expected.stages))
        np.testing.assert_array_equal(fixed[p], encode_lead(repaired, width))
    again, same = canonical(forward, backward, fixed)
    np.testing.assert_array_equal(again, fixed)
    np.testing.assert_array_equal(same, codes)


@given(st.data())
@EXAMPLES
def test_valid_orders_round_trip(data: st.DataObject) -> None:
    plans, width = data.draw(population(any_order=False))
    forward, backward, lead = stacked(plans, width)
    fixed, codes = canonical(forward, backward, lead)
    np.testing.assert_array_equal(fixed, lead)
    for p, plan in enumerate(plans):
        assert_codes_are(codes[p], plan, width)


def even_problem(stages: int, units: int, unit: int) -> Problem:
    """A problem of ``stages`` stages and ``units * unit`` samples (times do not matter)."""
    time = affine(1.0, 0.5)
    return Problem(
        batch_size=units * unit,
        unit=unit,
        stages=[Stage(forward=time, backward=time) for _ in range(stages)],
        links=[Link(forward=time, backward=time) for _ in range(stages - 1)],
    )


@given(st.integers(1, 6), st.integers(1, 12), st.integers(1, 3), st.data())
@settings(max_examples=40, deadline=None, derandomize=True, database=None)
def test_baseline_orders_round_trip(
    stages: int, units: int, unit: int, data: st.DataObject
) -> None:
    """1F1B(m) and GPipe(m), ``m`` any count (uneven equal partitions where ``m`` does not
    divide ``U``), lead as model.md's staircase and the flush say, and come back as they
    are."""
    m = data.draw(st.integers(1, units))
    width = m + data.draw(st.integers(0, 2))
    problem = even_problem(stages, units, unit)
    plans = [one_f_one_b_plan(problem, m), gpipe_plan(problem, m)]
    forward = np.stack([encode_partitions(plan.forward, unit, width) for plan in plans])
    backward = np.stack([encode_partitions(plan.backward, unit, width) for plan in plans])
    lead = np.stack([encode_lead(plan, width) for plan in plans])
    k = np.arange(1, width + 1)
    for s in range(stages):
        staircase = np.minimum(stages - s - 1, m - k)
        np.testing.assert_array_equal(lead[0, s], np.where(k <= m, staircase, 0))
        np.testing.assert_array_equal(lead[1, s], np.where(k <= m, m - k, 0))
    fixed, codes = canonical(forward, backward, lead)
    np.testing.assert_array_equal(fixed, lead)
    for p, plan in enumerate(plans):
        assert_codes_are(codes[p], plan, width)


@st.composite
def sorted_rows(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """``(prefixes (R, K+1), samples (R, Q))``: non-decreasing non-negative rows and
    queries from 0 to each row's last entry."""
    rows, width, queries = draw(st.integers(1, 5)), draw(st.integers(1, 6)), draw(st.integers(1, 6))
    values = st.lists(st.integers(0, 40), min_size=width + 1, max_size=width + 1)
    prefixes = np.array([sorted(draw(values)) for _ in range(rows)], dtype=np.int64)
    samples = [
        draw(st.lists(st.integers(0, int(row[-1])), min_size=queries, max_size=queries))
        for row in prefixes
    ]
    return prefixes, np.array(samples, dtype=np.int64)


@given(sorted_rows())
@EXAMPLES
def test_holder_is_bisect_left_row_by_row(case: tuple[np.ndarray, np.ndarray]) -> None:
    prefixes, samples = case
    found = holder(prefixes, samples)
    rows = zip(prefixes.tolist(), samples.tolist(), strict=True)
    expected = [[bisect_left(row, q) for q in queries] for row, queries in rows]
    np.testing.assert_array_equal(found, expected)


@given(st.data())
@EXAMPLES
def test_own_forwards_hold_each_backwards_last_sample(data: st.DataObject) -> None:
    plans, width = data.draw(population())
    forward, backward, _ = stacked(plans, width)
    own = own_forwards(prefix(forward), prefix(backward))
    for p, plan in enumerate(plans):
        for s, sizes in enumerate(plan.backward):
            P, Q = np.cumsum([0, *plan.forward[s]]), np.cumsum([0, *sizes])
            expected = [bisect_left(list(P), int(q)) for q in Q[1:]]
            assert own[p, s, : len(sizes)].tolist() == expected


@given(st.data())
@EXAMPLES
def test_order_codes_place_the_backwards_after_their_forwards(data: st.DataObject) -> None:
    """Any non-decreasing ``a[s][k] <= M_s``: exactly ``M_s`` F and ``N_s`` B, then NO_OP,
    the ``k``-th B after ``a[s][k]`` Fs."""
    plans, width = data.draw(population())
    forward, backward, _ = stacked(plans, width)
    forwards, backwards = microbatch_counts(forward), microbatch_counts(backward)
    before = np.zeros(forward.shape, dtype=np.int64)
    for index in np.ndindex(*forwards.shape):
        top = int(forwards[index])
        draws = data.draw(st.lists(st.integers(0, top), min_size=width, max_size=width))
        before[index] = sorted(draws)
    codes = order_codes(before, forwards, backwards)
    assert codes.shape == forward.shape[:2] + (2 * width,)
    for index in np.ndindex(*forwards.shape):
        row, m, n = codes[index], int(forwards[index]), int(backwards[index])
        assert (row == FORWARD_OP).sum() == m and (row == BACKWARD_OP).sum() == n
        assert (row[m + n :] == NO_OP).all() and (row[: m + n] != NO_OP).all()
        letters = decode_order(row[None]).stages[0]
        assert forwards_before(letters)[1:] == before[index][:n].tolist()


@given(st.data())
@EXAMPLES
def test_any_integer_leads_lower_to_valid_orders(data: st.DataObject) -> None:
    plans, width = data.draw(population())
    forward, backward, _ = stacked(plans, width)
    leads = st.integers(np.iinfo(GENE).min, np.iinfo(GENE).max) | st.integers(-8, 8)
    lead = np.array(
        data.draw(st.lists(leads, min_size=forward.size, max_size=forward.size)), dtype=GENE
    ).reshape(forward.shape)
    before, _ = lower(forward, backward, lead)
    assert (before >= 0).all() and (before <= microbatch_counts(forward)[..., None]).all()
    assert (np.diff(before, axis=-1) >= 0).all()
    fixed, codes = canonical(forward, backward, lead)
    for p, plan in enumerate(plans):
        order = decode_order(codes[p])
        assert first_violation(order, plan.forward, plan.backward) is None
    again, same = canonical(forward, backward, fixed)
    np.testing.assert_array_equal(again, fixed)
    np.testing.assert_array_equal(same, codes)


def test_a_deep_pipelines_leads_are_made_once_per_distinct_stage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Encoding 1F1B(6) and a window plan on 40 stages gives each stage the leads its own
    letters give, making the letters and leads once per distinct stage (6 for 1F1B(6): at
    256 stages the seeds' encoding took 1 s with every stage's made)."""
    import tidgap.optimize.order_genes as order_genes
    import tidgap.schedules.ir as ir

    problem = even_problem(40, 24, 1)
    one_f_one_b = one_f_one_b_plan(problem, 6)
    windowed = Plan.of(one_f_one_b.forward, one_f_one_b.backward, windows=[8] * 30 + [4] * 10)
    made = {"before": 0, "letters": 0}

    def counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            made[name] += 1
            return function(*args)

        return call

    for plan, distinct in ((one_f_one_b, 6), (windowed, 2)):
        letters = plan.stage_order().stages
        made.update(before=0, letters=0)
        with monkeypatch.context() as patched:
            patched.setattr(order_genes, "forwards_before", counted("before", forwards_before))
            patched.setattr(ir, "window_letters", counted("letters", ir.window_letters))
            genes = encode_lead(plan, 8)
        assert made["before"] == distinct
        assert made["letters"] == (distinct if plan.windows else 0)
        for s, row in enumerate(letters):
            prefix = np.cumsum([0, *plan.forward[s]])
            own = [bisect_left(prefix, q) for q in np.cumsum(plan.backward[s])]
            lead = np.subtract(forwards_before(row)[1:], own)
            assert genes[s].tolist() == [*lead, *[0] * (8 - len(lead))]
