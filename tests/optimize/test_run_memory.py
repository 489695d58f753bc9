"""Memory limits priced as ``tidgap run`` holds plans (:mod:`tidgap.optimize.run_memory`):
the batched figure equals the runtime's walk of each plan, stages that store graphs keep the
model's count, and a run-priced search of a profiled problem trades time for memory by
recomputing, never over a limit as the runtime holds it, the same plan on every backend."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from tests.support.backends import install_fake_cupy, run_here
from tests.support.cli_helpers import json_output, run_cli, write_json
from tests.support.shares import many_uneven_shares
from tidgap import InputError, Problem, search
from tidgap.backends import BACKENDS, load
from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.ticks import tick_problem
from tidgap.model.plan import Plan
from tidgap.optimize import windowed_driver
from tidgap.optimize.genome import decode_plan
from tidgap.optimize.joint import JointSpace
from tidgap.optimize.limits import MemoryLevel, bytes_level, capped, stage_level
from tidgap.optimize.memory import exact_bytes, format_bytes
from tidgap.optimize.memory_seeds import OneFOneBHolding, reference_memory
from tidgap.optimize.order_genes import recomputing_stages
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.run_memory import (
    FINE,
    NO_LIMIT,
    ROWS,
    RunMemory,
    fine_units,
    least_bytes,
    run_evaluated,
)
from tidgap.optimize.windowed_seeds import encode_plans, one_f_one_b_level
from tidgap.profiling.synth import synth_problem
from tidgap.runtime.lowering import recomputes
from tidgap.runtime.pricing import run_evaluation
from tidgap.runtime.recompute_memory import (
    CHUNK_FIELD,
    FIELDS,
    GRAPH_FIELDS,
    SHARED_DRAWS_FIELD,
    RecomputeBytes,
    graph_bytes,
    predicted_held_bytes,
    recompute_held_bytes,
    stored_held_bytes,
)
from tidgap.schedules.baselines import BaselineResult
from tidgap.schedules.families import SCHEDULES, evaluate

#: A 2-stage GPT's figures as ``tidgap profile`` measured them (bytes per sample): the
#: stages save 1.6 and 2.2 MB for backward, a recomputing stage keeps 32 KB of input and
#: 66-74 KB of dropout masks per sample and re-runs forwards of 1.4-2.0 MB a sample.
GPT_MEMORY = {
    "activation_bytes": [1608736, 2153985],
    FIELDS[0]: [0, 32768],
    FIELDS[1]: [73728, 65536],
    FIELDS[2]: [1419808, 1956865],
    FIELDS[3]: [512, 512],
}
SEARCH: dict[str, Any] = {"seed": 0, "generations": 60, "population": 64, "pricing": "run"}


def profiled(document: dict[str, Any], memory: dict[str, list[int]] | None) -> Problem:
    """``document`` with ``activation_bytes`` and, unless ``memory`` is ``None``, the
    profile's ``source.memory`` (``memory`` also gives ``activation_bytes``)."""
    figures = memory or GPT_MEMORY
    for s, stage in enumerate(document["stages"]):
        stage["activation_bytes"] = figures["activation_bytes"][s]
    if memory is not None:
        given = [
            f for f in (*FIELDS, CHUNK_FIELD, SHARED_DRAWS_FIELD, *GRAPH_FIELDS) if f in memory
        ]
        document["source"] = {"memory": {field: memory[field] for field in given}}
    return Problem.from_dict(document)


def random_memory(stages: int, rng: np.random.Generator, least_backward: int) -> dict:
    """Random figures (integers, bytes per sample); the first stage receives no input, and
    a random share of each stage's draws is shared (``nn.Dropout`` masks)."""

    def column(low: int, high: int) -> list[int]:
        return [int(v) for v in rng.integers(low, high, stages)]

    memory = {
        "activation_bytes": column(500, 2000),
        FIELDS[0]: [0, *column(20, 200)[1:]],
        FIELDS[1]: column(0, 50),
        FIELDS[2]: column(least_backward, 900),
        FIELDS[3]: column(0, 20),
        CHUNK_FIELD: column(0, 300),
        GRAPH_FIELDS[0]: column(400, 2000),
        GRAPH_FIELDS[1]: column(0, 300),
    }
    memory[SHARED_DRAWS_FIELD] = [int(rng.integers(0, d + 1)) for d in memory[FIELDS[1]]]
    return memory


def population(problem: Problem, backend: str, count: int, seed: int) -> tuple[Any, Any]:
    """``(genes, peaks)``: ``count`` random repaired individuals and their model peaks."""
    ticked = tick_problem(problem)
    evaluator = create_evaluator(ticked, "windowed", backend)
    space = JointSpace(evaluator, ticked.forward_caps, ticked.backward_caps, 8)
    genes = space.random(count, CounterRng(seed))
    return genes, space.evaluate(genes)[1]


def bytewise(memory: RunMemory) -> RunMemory:
    """``memory`` counting one byte a sample: its samples are bytes."""
    return replace(memory, activation=np.ones(memory.activation.shape), batch_size=2**40)


@pytest.mark.parametrize(
    ("stages", "unit", "least_backward"), [(4, 2, 300), (6, 1, 300), (3, 4, 0), (2, 1, 0)]
)
def test_the_batched_figures_are_the_runtimes_walks(
    stages: int, unit: int, least_backward: int
) -> None:
    """On random repaired populations, every plan: every stage as it would hold if it
    recomputed (a working set below its input's and draws' bytes makes the forwards' ends
    count too); the stages that store graphs as they do, in whole bytes."""
    rng = np.random.default_rng(stages)
    memory = random_memory(stages, rng, least_backward)
    problem = profiled(synth_problem(3, stages, 32, unit=unit), memory)
    genes, peaks = population(problem, "numpy", 200, 1)
    figures = RunMemory.of(problem)
    assert figures is not None
    got = figures.held_bytes(genes.forward, genes.backward, genes.lead)
    counted = bytewise(figures).held(peaks, genes.forward, genes.backward, genes.lead)
    walked = [
        RecomputeBytes(*(float(memory[f][s]) for f in (*FIELDS, CHUNK_FIELD, SHARED_DRAWS_FIELD)))
        for s in range(stages)
    ]
    assert any(w.backward_chunk for w in walked)
    assert any(w.draw_views() < w.draws for w in walked)
    graphs = graph_bytes(problem)
    kept = 0
    for p in range(len(genes.forward)):
        plan = decode_plan(genes.forward[p], genes.backward[p], problem, genes.codes[p])
        want = [recompute_held_bytes(plan, s, walked, problem.batch_size) for s in range(stages)]
        np.testing.assert_allclose(got[p], want, rtol=1e-12, err_msg=str(plan))
        flags = recomputes(plan)
        for s in (s for s in range(stages) if not flags[s]):
            stored = stored_held_bytes(plan, s, walked, graphs[s], problem.batch_size)
            assert counted[p, s] == stored * FINE, (plan, s)
            base = graphs[s].sample * peaks[p, s] + graphs[s].chunk + 32 * walked[s].task
            kept += stored > base
    assert kept > 0  # some stages keep received chunks, or several graphs, past their ops


@pytest.mark.parametrize(
    ("backend", "shares"), [("numba", "default"), ("numba", "many"), ("cuda", "default")]
)
@pytest.mark.parametrize(("stages", "unit"), [(4, 2), (6, 1), (3, 4)])
def test_the_compiled_twin_counts_as_the_array_passes(
    stages: int, unit: int, backend: str, shares: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each backend's compiled twin (Numba's loops, their rows cut into the threads' shares
    or into many uneven ones; the CUDA kernel, through the CuPy stand-in where no GPU is)
    against the array passes on random repaired populations, in samples of the profile's
    activations and, exactly, in bytes."""
    run_here(backend, monkeypatch)
    if shares == "many":
        many_uneven_shares(monkeypatch)
    record = BACKENDS[backend]
    assert record.run_memory is not None
    held, xp = load(record.run_memory), record.namespace()
    rng = np.random.default_rng(stages + 10)
    problem = profiled(synth_problem(5, stages, 32, unit=unit), random_memory(stages, rng, 0))
    genes, peaks = population(problem, "numba", 300, 2)
    figures = RunMemory.of(problem)
    assert figures is not None
    fitted = figures.fitted((3.5e4,) * stages)  # units of a fitted byte limit
    assert (fitted.activation != figures.activation).all()
    for memory in (figures, bytewise(figures), fitted):
        on_device = replace(memory, figures=xp.asarray(memory.figures), compiled=held)
        on_device = replace(on_device, activation=xp.asarray(memory.activation))
        arrays = memory.held(peaks, genes.forward, genes.backward, genes.lead)
        device_genes = (xp.asarray(a) for a in (peaks, genes.forward, genes.backward, genes.lead))
        counted = on_device.held(*device_genes)
        np.testing.assert_array_equal(np.asarray(counted), arrays)
    flags = recomputing_stages(genes.forward, genes.backward)
    assert 0.2 < flags.mean() < 1  # both kinds of stage are checked


def test_the_1f1b_level_admits_1f1b() -> None:
    """With the best 1F1B as the reference, what it holds beyond its samples (its graphs'
    per-chunk bytes, the task's tensors) is allowed at every level in samples: 1F1B(m) is
    within the level of its own samples; without the reference it may not be."""
    problem = profiled(synth_problem(0, 3, 16), random_memory(3, np.random.default_rng(0), 0))
    figures = RunMemory.of(problem)
    assert figures is not None
    over = 0
    for m in (1, 2, 4, 8):
        plan = SCHEDULES["1f1b"].baseline(problem, m)
        genes = encode_plans([plan], problem, 8)
        peaks = np.asarray([evaluate(problem, plan).peak_held])
        level = MemoryLevel("1F1B", tuple(peaks[0].tolist()))
        held = figures.held(peaks, genes.forward, genes.backward, genes.lead)
        over += bool((held > figures.limit(level)).any())
        reference = figures.with_reference(peaks, genes.forward, genes.backward, genes.lead)
        assert (held <= reference.limit(level)).all(), m
    assert over > 0


def test_fine_units_round_up_past_the_batch() -> None:
    activation = np.array([100.0, 100.0, 0.0])
    memory = np.array([[250.0, 5000.0, 7.0]])
    held = np.array([[1, 2, 3]])
    assert fine_units(memory, activation, held).tolist() == [[2.5 * FINE, 50 * FINE, 3 * FINE]]
    assert fine_units(np.array([[100.0 + 1e-3, 0, 0]]), activation, held)[0, 0] == FINE + 1


def test_a_level_allows_its_byte_limit_where_one_binds() -> None:
    """A byte limit of 4 MB on stages of 2.15 MB a sample holds 1 sample by the model;
    counted in fine units, 1.86 samples; the 1F1B level (samples) counts its samples."""
    problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
    figures = RunMemory.of(problem)
    assert figures is not None
    level = bytes_level(problem, 4_000_000)
    assert level.held == (2, 1)
    expected = [int(4_000_000 * FINE // a) for a in GPT_MEMORY["activation_bytes"]]
    assert figures.limit(level).tolist() == expected
    one_f_one_b = MemoryLevel("1F1B", (3, 2), bound=(3, 2))
    assert figures.limit(one_f_one_b).tolist() == [3 * FINE, 2 * FINE]
    both = capped(MemoryLevel("1F1B", (3, 1), bound=(3, 1)), level)
    assert figures.limit(both).tolist() == [expected[0], FINE]  # the bytes, the samples
    unlimited = figures.limit(MemoryLevel("unlimited", (16, 16)))
    assert unlimited.tolist() == [NO_LIMIT, NO_LIMIT]


def test_a_byte_limit_at_a_plans_own_bytes_admits_it() -> None:
    """A byte limit equal to what 1F1B(m) holds on its fullest stage as the runtime holds
    it admits 1F1B(m) in units fitted to that limit, and a byte less refuses it (in units
    of a 65536th of a sample the limit, rounded down, and the plan, rounded up, fell apart:
    every such 1F1B was refused)."""
    problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
    for m in (2, 4, 8, 16):
        plan = SCHEDULES["1f1b"].baseline(problem, m)
        evaluation = evaluate(problem, plan)
        held_bytes = run_evaluated(problem, plan, evaluation).peak_memory
        assert held_bytes is not None
        cap = int(max(held_bytes))
        genes = encode_plans([plan], problem, 16)
        peaks = np.asarray([evaluation.peak_held])
        for limit, admitted in ((cap, True), (cap - 1, False)):
            level = bytes_level(problem, limit)
            figures = RunMemory.of(problem)
            assert figures is not None
            figures = figures.fitted(level.bytes_cap)
            held = figures.held(peaks, genes.forward, genes.backward, genes.lead)
            assert bool((held <= figures.limit(level)).all()) is admitted, (m, limit)
    # the search fits its units to the limit: under 1F1B(2)'s own bytes it is not slower
    plan = SCHEDULES["1f1b"].baseline(problem, 2)
    one_f_one_b = run_evaluated(problem, plan, run_evaluation(problem, plan))
    assert one_f_one_b.peak_memory is not None
    cap = int(max(one_f_one_b.peak_memory))
    result = search(problem, **SEARCH | {"generations": 30}, memory_limit=cap)
    assert result.evaluation.iteration_time <= one_f_one_b.iteration_time
    assert result.evaluation.peak_memory is not None
    assert max(result.evaluation.peak_memory) <= cap


def cheap_ops(stage_limit: float | None = None) -> dict[str, Any]:
    """2 stages of small per-op costs and batch 8 (the best 1F1B runs 8 microbatches,
    holding 2 and 1 samples), stage 0 limited to ``stage_limit`` bytes."""
    stage = {
        "forward": {"affine": {"base": 0.01, "per_sample": 1.0}},
        "backward": {"affine": {"base": 0.02, "per_sample": 2.0}},
    }
    link = {"affine": {"base": 0.001, "per_sample": 0.01}}
    stages = [stage | {"name": "s0"}, stage | {"name": "s1"}]
    if stage_limit is not None:
        stages[0]["memory_limit"] = stage_limit
    return {
        "format": "tidgap.problem/1",
        "name": "cheap-ops",
        "batch_size": 8,
        "unit": 1,
        "time_unit": "ms",
        "stages": stages,
        "links": [{"forward": link, "backward": link}],
    }


def test_a_stage_limit_of_the_best_1f1bs_samples_binds_its_bytes() -> None:
    """A stage limited to exactly the samples the best 1F1B holds there: that 1F1B's
    graphs hold more than those samples' activations, over the limit as the runtime holds
    them. Under ``--memory-limit 1f1b`` the search returned it all the same (the level's
    samples tied the stage's and dropped its bytes); now its plan is within both."""
    plain = profiled(cheap_ops(), GPT_MEMORY)
    best = search(plain, **SEARCH | {"generations": 1}).baselines["1f1b"]
    plan = SCHEDULES["1f1b"].baseline(plain, best.microbatches)
    evaluation = evaluate(plain, plan)
    one_f_one_b = run_evaluated(plain, plan, evaluation).peak_memory
    assert best.microbatches == 8 and evaluation.peak_held == [2, 1] and one_f_one_b
    limit = 2 * GPT_MEMORY["activation_bytes"][0]
    assert one_f_one_b[0] > limit
    problem = profiled(cheap_ops(limit), GPT_MEMORY)
    result = search(problem, **SEARCH, memory_limit="1f1b")
    held = result.evaluation.peak_memory
    assert held is not None and held[0] <= limit and held[1] <= one_f_one_b[1]


def test_the_1f1b_level_bounds_the_bytes_where_1f1b_holds_the_whole_batch() -> None:
    """Where the best 1F1B holds the whole batch, its level allows what 1F1B holds there
    (at least the batch's activations), not anything: random plans holding the batch in
    more chunks hold more, and were admitted."""
    problem = profiled(synth_problem(0, 3, 16), random_memory(3, np.random.default_rng(0), 0))
    plan = SCHEDULES["1f1b"].baseline(problem, 1)
    genes = encode_plans([plan], problem, 8)
    peaks = np.asarray([evaluate(problem, plan).peak_held])
    assert peaks.tolist() == [[16, 16, 16]]
    figures = RunMemory.of(problem)
    assert figures is not None
    figures = figures.with_reference(peaks, genes.forward, genes.backward, genes.lead)
    reference = figures.held(peaks, genes.forward, genes.backward, genes.lead)[0]
    level = one_f_one_b_level(problem, BaselineResult("1f1b", 1, 0.0))
    others, other_peaks = population(problem, "numpy", 2000, 3)
    held = figures.held(other_peaks, others.forward, others.backward, others.lead)
    beyond = (held > np.maximum(reference, 16 * FINE)).any(axis=1)
    admitted = (held <= figures.limit(level)).all(axis=1)
    assert beyond.sum() > 100 and not (admitted & beyond).any()
    assert admitted.sum() > 1000
    unlimited = figures.limit(MemoryLevel("unlimited", (16, 16, 16)))
    assert unlimited.tolist() == [NO_LIMIT] * 3


def figured(
    document: dict[str, Any],
    activation: list[int],
    columns: list[list[int]],
    limits: list[float | None] | None = None,
) -> Problem:
    """``document`` with ``activation_bytes``, the profile's ``source.memory`` ``columns``
    (in the order of ``FIELDS``, ``CHUNK_FIELD``, ``GRAPH_FIELDS``) and stages' own
    ``memory_limit`` (``None``: none) where given."""
    names = (*FIELDS, CHUNK_FIELD, *GRAPH_FIELDS)
    memory = {"activation_bytes": activation} | dict(zip(names, columns, strict=True))
    for stage, limit in zip(document["stages"], limits or [], strict=False):
        if limit is not None:
            stage["memory_limit"] = limit
    return profiled(document, memory)


def within_the_best_1f1b(problem: Problem, search_options: dict[str, Any]) -> None:
    """A ``--memory-limit 1f1b`` search's plan holds on no stage more than the best 1F1B
    holds there as ``tidgap run`` holds them, nor more than a stage's own limit."""
    result = search(problem, **search_options, memory_limit="1f1b", pricing="run")
    assert result.memory_pricing == "run"
    best = SCHEDULES["1f1b"].baseline(problem, result.baselines["1f1b"].microbatches)
    reference = run_evaluated(problem, best, evaluate(problem, best)).peak_memory
    held = result.evaluation.peak_memory
    assert held is not None and reference is not None
    for s, stage in enumerate(problem.stages):
        assert stage.memory_limit is None or held[s] <= stage.memory_limit
        assert held[s] <= reference[s], (s, held, reference)


def test_the_1f1b_level_bounds_bytes_where_1f1b_holds_less_than_its_samples() -> None:
    """Figures whose stored graphs hold less than their samples' ``activation_bytes`` (a
    profile's per-chunk bytes spread over chunks larger than it measured): the best 1F1B
    holds less than its samples' activations. Its overhead was taken as 0, so the 1F1B
    level allowed those activations, and the search returned 17 samples (30224 B) on a
    stage where the best 1F1B holds 16 (28475 B)."""
    problem = figured(
        synth_problem(542, 5, 32),
        [1591, 1237, 1964, 1040, 1921],
        [
            [0, 77, 144, 123, 105],
            [4, 23, 8, 0, 7],
            [813, 43, 390, 626, 426],
            [5, 0, 1, 18, 6],
            [177, 77, 127, 185, 56],
            [1047, 1974, 685, 1504, 1749],
            [271, 164, 6, 298, 299],
        ],
    )
    options = {"seed": 2, "generations": 5, "population": 32, "backward": "aligned"}
    within_the_best_1f1b(problem, options)


def test_a_stage_limit_of_fewer_samples_keeps_the_1f1b_bound() -> None:
    """A stage whose own limit allows fewer samples than the best 1F1B holds, but more bytes
    than it holds as ``tidgap run`` holds it: the 1F1B level kept only the stage's bytes
    (its samples came from the stage), and the search returned 64 samples (28182 B) where
    the best 1F1B holds 32 (14396 B)."""
    problem = figured(
        synth_problem(666, 2, 64, unit=4),
        [1500, 683],
        [[0, 66], [33, 20], [79, 872], [10, 3], [298, 257], [428, 660], [30, 101]],
        [43200.0, 12020.8],
    )
    within_the_best_1f1b(problem, {"seed": 58, "generations": 5, "population": 48})


def test_plans_told_in_samples_are_within_the_1f1b_level_they_hold() -> None:
    """An ask/tell caller's plans known by their samples only: counted whole, less a
    negative overhead of the best 1F1B (so its samples are within the 1F1B level), never
    less than nothing; a positive overhead is not added (as before it was allowed)."""
    figures = RunMemory.of(profiled(synth_problem(4, 2, 16), GPT_MEMORY))
    assert figures is not None
    peaks = np.asarray([[3, 2], [0, 1]])
    less = replace(figures, overhead=np.asarray([-FINE // 2, 7]))
    assert less.samples_units(peaks).tolist() == [[3 * FINE - FINE // 2, 2 * FINE], [0, FINE]]
    level = MemoryLevel("1F1B", (3, 2), bound=(3, 2))
    assert (less.samples_units(peaks[:1]) <= less.limit(level)).all()
    assert figures.samples_units(peaks).tolist() == (peaks * FINE).tolist()


def byte_limited_1f1bs() -> Problem:
    """3 stages, batch 64, consistent figures (``activation_bytes`` the graphs' bytes a
    sample at the batch), where under a limit of 42301 bytes 1F1B(7) is within the samples
    and over the bytes as ``tidgap run`` holds it, and 1F1B(8) within both."""
    return figured(
        synth_problem(138, 3, 64, shape="table"),
        [1486, 1234, 1898],
        [
            [0, 99, 82],
            [27, 26, 12],
            [578, 274, 76],
            [19, 11, 6],
            [40, 157, 50],
            [1483, 1230, 1894],
            [178, 238, 249],
        ],
    )


def test_the_fastest_1f1b_within_the_bytes_is_seeded() -> None:
    """1F1B(7) is within the level's samples and over its bytes as ``tidgap run`` holds it;
    1F1B(8) is within both. The search seeded the first (chosen in samples), its islands
    refused it, the width (7) could not hold the second, and its plan was 4.1% slower than
    1F1B(8) (54.646 ms against 52.491)."""
    problem = byte_limited_1f1bs()
    limit = 42301
    fits = {}
    for m in (7, 8):
        plan = SCHEDULES["1f1b"].baseline(problem, m)
        held = run_evaluated(problem, plan, evaluate(problem, plan)).peak_memory
        assert held is not None
        fits[m] = (max(held) <= limit, run_evaluation(problem, plan).iteration_time)
    assert not fits[7][0] and fits[8][0]
    for backward in ("aligned", "mirrored"):
        options = {"seed": 52, "generations": 10, "population": 32, "backward": backward}
        result = search(problem, **options, memory_limit=limit, pricing="run")
        assert result.evaluation.iteration_time <= fits[8][1] * (1 + 1e-9), backward
        assert max(result.evaluation.peak_memory or [math.inf]) <= limit


def test_the_fastest_1f1b_within_the_samples_is_seeded_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beside the fastest 1F1B within the bytes (1F1B(8)), the fastest within the samples
    (1F1B(7), over the bytes) is seeded: a start the GA mends (without it, an audit's
    5-generation searches ended 9% slower, median of 8 seeds: 47.11 against 42.94 ms)."""
    problem = byte_limited_1f1bs()
    seeded: list[int] = []
    original = windowed_driver.one_f_one_b_plan

    def recording(problem: Problem, m: int) -> Plan:
        seeded.append(m)
        return original(problem, m)

    monkeypatch.setattr(windowed_driver, "one_f_one_b_plan", recording)
    search(problem, seed=52, generations=1, population=16, memory_limit=42301, pricing="run")
    assert {7, 8} <= set(seeded)


def test_1f1b_is_counted_as_the_search_counts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """What :class:`OneFOneBHolding` counts for 1F1B(m) equals the run's walk of it in the
    search's units; its best 1F1B is within the 1F1B level exactly (its overhead); the
    fastest 1F1B within a level is among its candidates, found counting few; past its
    budget it counts in samples."""
    problem = profiled(synth_problem(3, 4, 48), random_memory(4, np.random.default_rng(5), 0))
    best = search(problem, **SEARCH | {"generations": 1}).baselines["1f1b"]
    memory = reference_memory(problem, None, best)
    assert memory is not None
    holding = OneFOneBHolding(problem, memory)
    level = one_f_one_b_level(problem, best)
    counts = np.arange(1, 49, dtype=np.int64)
    inside = []
    for m in counts[::-1]:
        plan = SCHEDULES["1f1b"].baseline(problem, int(m))
        model = evaluate(problem, plan)
        held = run_evaluated(problem, plan, model).peak_memory
        expected = fine_units(np.asarray(held), memory.activation, np.asarray(model.peak_held))
        units = holding.units(int(m))
        assert units is not None and units.tolist() == expected.tolist(), m
        inside.append(holding.within(memory.limit(level), int(m)))
    assert inside[::-1][best.microbatches - 1] and not all(inside)
    fresh = OneFOneBHolding(problem, memory)
    assert fresh.candidates(level, counts, "model").tolist() == [best.microbatches]
    assert len(fresh._units) < counts.size
    monkeypatch.setattr("tidgap.optimize.memory_seeds.COUNTED_AT_MOST", 0)
    spent = OneFOneBHolding(problem, memory)
    assert (
        spent.candidates(level, counts, "model").tolist()
        == counts[spent.fits(level, counts)].tolist()
    )


def test_fitted_units_compare_as_bytes() -> None:
    """On random activations (below and above :data:`FINE` bytes, fractional) and byte
    limits, whole bytes around the limit are within it in fitted units exactly when they
    are in bytes (below 1e12 bytes; above, a byte is within model.md's rounding of the
    limit); the unit grows by less than one part in the limit's units."""
    rng = np.random.default_rng(5)
    S = 400
    activation = np.concatenate([rng.uniform(1, 1e4, S // 2), rng.uniform(1e5, 5e7, S // 2)])
    caps = rng.integers(1, 2**39, S).astype(np.float64)
    caps = np.maximum(caps, np.ceil(activation / FINE))  # at least one unit each
    figures = RunMemory(np.zeros((ROWS, S)), activation, 2**40, 1)
    level = MemoryLevel("caps", (2**40,) * S, tuple(caps.tolist()))
    fitted = figures.fitted(level.bytes_cap)
    limit = fitted.limit(level)
    whole = np.floor(caps * FINE / activation)
    assert (fitted.activation >= activation).all()
    assert (fitted.activation <= activation * (1 + 1.000001 / whole)).all()
    for step in (-2, -1, 0, 1, 2):
        held = caps + step
        units = fine_units(held[None, :], fitted.activation, np.zeros((1, S)))[0]
        assert ((units <= limit) == (held <= caps)).all(), step
    huge = figures.fitted((1e305,) * S)  # more units than any count: nothing to fit
    np.testing.assert_array_equal(huge.activation, activation)
    assert (huge.limit(MemoryLevel("huge", (2**40,) * S, (1e305,) * S)) == NO_LIMIT).all()
    tiny = replace(figures, activation=np.full(S, 1e-9))  # 1.5 MB are 2**66 units: no limit
    assert (tiny.limit(MemoryLevel("tiny", (2**40,) * S, (1.5e6,) * S)) == NO_LIMIT).all()
    unfitted = fine_units(caps[None, :], activation, np.zeros((1, S)))[0]
    refused = unfitted > figures.limit(level)
    assert refused[S // 2 :].mean() > 0.9  # under 1e12 units the limit refused itself


def test_a_byte_limit_above_the_batchs_activations_still_binds() -> None:
    """GPipe(1)'s first stage holds the whole batch's graphs and the task's tensors: more
    than 16 samples' activations. A byte limit between the two allows the whole batch by
    the model, and refuses the plan as the runtime holds it; the stages' own limits the
    same way, and unlimited admits it. A search under that limit returns a plan within
    it."""
    problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
    figures = RunMemory.of(problem)
    assert figures is not None
    plan = SCHEDULES["gpipe"].baseline(problem, 1)
    genes = encode_plans([plan], problem, 8)
    peaks = np.asarray([evaluate(problem, plan).peak_held])
    held = figures.held(peaks, genes.forward, genes.backward, genes.lead)[0]
    batch = 16 * GPT_MEMORY["activation_bytes"][0]
    assert held[0] > 16 * FINE  # the task's 8 KB beside the batch's activations
    level = bytes_level(problem, batch + 100)
    assert level.held[0] == 16
    assert held[0] > figures.limit(level)[0]
    document = synth_problem(4, 2, 16)
    document["stages"][0]["memory_limit"] = batch + 100
    assert held[0] > figures.limit(stage_level(profiled(document, GPT_MEMORY)))[0]
    assert held[0] <= figures.limit(MemoryLevel("unlimited", (16, 16)))[0]
    limited = search(problem, **SEARCH, memory_limit=batch + 100)
    assert limited.memory_limit is not None and limited.memory_limit.held[0] == 16
    assert limited.evaluation.peak_memory is not None
    assert limited.evaluation.peak_memory[0] <= batch + 100


@pytest.mark.parametrize(("stages", "unit", "least_backward"), [(4, 2, 300), (3, 1, 0)])
def test_least_bytes_bound_what_every_plan_holds(
    stages: int, unit: int, least_backward: int
) -> None:
    """On random repaired populations, every stage holds at least :func:`least_bytes` as
    the runtime holds it: the recomputing bound where it recomputes, the stored-graph one
    where it stores graphs (which a search that never recomputes checks a limit against)."""
    rng = np.random.default_rng(stages + 10)
    problem = profiled(synth_problem(3, stages, 32, unit=unit), random_memory(stages, rng, 0))
    genes, peaks = population(problem, "numpy", 200, 2)
    figures = RunMemory.of(problem)
    assert figures is not None
    held = bytewise(figures).held(peaks, genes.forward, genes.backward, genes.lead) / FINE
    recomputing = recomputing_stages(genes.forward, genes.backward)
    free, stored = least_bytes(problem, True), least_bytes(problem, False)
    assert free is not None and stored is not None
    assert all(f <= s for f, s in zip(free, stored, strict=True))
    assert (held >= np.array(free) - 1e-6).all()
    assert (held[~recomputing] >= np.broadcast_to(stored, held.shape)[~recomputing] - 1e-6).all()
    assert recomputing.any() and (~recomputing).any()
    # one unit at a time, each backward on its forward's graph, holds exactly the bound
    m = problem.num_units
    sizes = [problem.unit] * m
    one_at_a_time = Plan.of([sizes] * stages, [sizes] * stages, order=["FB" * m] * stages)
    model = evaluate(problem, one_at_a_time)
    assert predicted_held_bytes(problem, one_at_a_time, model.peak_memory) == stored
    assert least_bytes(profiled(synth_problem(3, 2, 32), None), True) is None


def gpt_between_bounds() -> tuple[Problem, int]:
    """The profiled GPT and a byte limit that leaves its last stage room to recompute one
    sample's backward but not to store one sample's graph."""
    problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
    free, stored = least_bytes(problem, True), least_bytes(problem, False)
    assert free is not None and stored is not None and free[1] < 2_100_000 < stored[1]
    return problem, 2_100_000


def test_a_limit_only_recomputing_meets_is_searched_not_refused() -> None:
    """Below a sample's activations (so the model's count, and a search that never
    recomputes, refuses it before any work), above what a recomputing stage holds: the
    free search's mirrored first search finds nothing, it falls back to its flush one and
    returns a recomputing plan within the limit as the runtime holds it."""
    problem, limit = gpt_between_bounds()
    for rule in ("mirrored", "aligned"):
        with pytest.raises(InputError, match="every plan holds on stage 1 as tidgap run"):
            search(problem, **SEARCH, memory_limit=limit, backward=rule)
    with pytest.raises(InputError, match="holds 0 samples of 2,153,985 bytes on stage 1"):
        search(problem, **SEARCH | {"pricing": "model"}, memory_limit=limit)
    result = search(problem, **SEARCH, memory_limit=limit)
    assert not any(name.startswith("mirrored") for name in result.setup)
    assert any(name.startswith("flush") for name in result.setup)
    assert recomputes(result.plan)[1]
    assert max(result.evaluation.peak_memory) <= limit
    held = predicted_held_bytes(problem, result.plan, evaluate(problem, result.plan).peak_memory)
    assert held == result.evaluation.peak_memory


def test_a_limit_below_every_plan_is_refused_before_any_work() -> None:
    problem, _ = gpt_between_bounds()
    free = least_bytes(problem, True)
    assert free is not None
    document = problem.model_dump(mode="json", exclude_none=True)
    document["stages"][1]["memory_limit"] = int(free[1]) - 1
    limited = Problem.from_dict(document)
    with pytest.raises(InputError, match="every plan holds on stage 1") as caught:
        search(limited, **SEARCH)
    assert caught.value.path == ("stages", 1, "memory_limit")


def test_a_memory_limit_below_every_plan_names_the_stage_that_needs_the_most() -> None:
    """``--memory-limit`` below what every plan holds on several stages: the line names the
    stage needing the most bytes (it named the first, so a user raised the limit stage by
    stage), so that limit is the least worth trying."""
    problem = profiled(synth_problem(4, 3, 16), random_memory(3, np.random.default_rng(7), 0))
    least = least_bytes(problem, True)
    assert least is not None
    most = max(range(3), key=lambda s: least[s])
    assert most != 0 and min(least) > 1
    with pytest.raises(InputError, match=f"every plan holds on stage {most} ") as caught:
        search(problem, **SEARCH, memory_limit=1)
    assert exact_bytes(least[most]) in str(caught.value)


def test_without_the_profiles_figures_nothing_changes() -> None:
    problem = profiled(synth_problem(0, 2, 16), None)
    plan = decode_plan(np.array([[4] * 4, [4] * 4]), np.array([[2, 6, 8, 0], [4] * 4]), problem)
    evaluation = evaluate(problem, plan)
    assert RunMemory.of(problem) is None
    assert run_evaluated(problem, plan, evaluation) is evaluation


LIMITS_MB = (4, 6, 10)


@pytest.fixture(scope="module")
def gpt_searches() -> list[tuple[int, Problem, Any, Any]]:
    """Per limit (MB a stage): the profiled GPT, and the same run-priced search with the
    profile's ``source.memory`` (memory as the runtime holds it) and without (the
    model's)."""
    runs = []
    for megabytes in LIMITS_MB:
        limit = {"memory_limit": int(megabytes * 1e6)}
        problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
        model = profiled(synth_problem(4, 2, 16), None)
        runs.append(
            (
                megabytes,
                problem,
                search(problem, **SEARCH, **limit),
                search(model, **SEARCH, **limit),
            )
        )
    return runs


def test_a_tight_limit_is_met_faster_by_recomputing(gpt_searches: list) -> None:
    """Counted as the model counts it, a stage that recomputes holds as much as one that
    stores graphs; counted as the runtime holds it, recomputing the first stage fits larger
    microbatches under the same limit."""
    for megabytes, _, run_memory, model_memory in gpt_searches:
        assert (run_memory.memory_pricing, model_memory.memory_pricing) == ("run", "model")
        assert recomputes(run_memory.plan)[0], megabytes
        assert run_memory.evaluation.iteration_time < 0.9 * model_memory.evaluation.iteration_time
        assert run_memory.plan_document()["search"]["memory_pricing"] == "run"


def test_every_plan_is_within_its_limit_as_the_runtime_holds_it(gpt_searches: list) -> None:
    """Within the byte limit where one binds, else within the level's samples and what the
    best 1F1B holds beside its samples (the task's tensors, held whole)."""
    for megabytes, problem, result, _ in gpt_searches:
        activation = GPT_MEMORY["activation_bytes"]
        best = result.baselines["1f1b"]
        one_f_one_b = SCHEDULES["1f1b"].baseline(problem, best.microbatches)
        reference = evaluate(problem, one_f_one_b)
        run = predicted_held_bytes(problem, one_f_one_b, reference.peak_memory) or []
        beside = [r - h * a for r, h, a in zip(run, reference.peak_held, activation, strict=True)]
        for point in result.tradeoff:
            if point.plan is None:
                continue
            model = evaluate(problem, point.plan)
            held = predicted_held_bytes(problem, point.plan, model.peak_memory)
            assert held == point.evaluation.peak_memory
            caps = point.level.bytes_cap or [math.inf] * len(activation)
            budget = [
                c if math.isfinite(c) else math.inf if h >= 16 else h * a + extra
                for h, a, c, extra in zip(point.level.held, activation, caps, beside, strict=True)
            ]
            assert all(b <= limit for b, limit in zip(held, budget, strict=True)), megabytes
        assert max(result.evaluation.peak_memory) <= megabytes * 1e6


def test_the_summary_says_how_memory_was_counted(gpt_searches: list) -> None:
    from tidgap.analysis.search_summary import summary_lines

    _, _, run_memory, model_memory = gpt_searches[0]
    assert "memory as tidgap run holds it" in "\n".join(summary_lines(run_memory))
    assert "memory as tidgap run holds it" not in "\n".join(summary_lines(model_memory))


def test_model_pricing_counts_the_models_memory_and_every_rule_the_runs() -> None:
    """Model pricing keeps model.md's memory; run pricing counts the run's under every
    backward rule (a stage that stores graphs keeps received chunks too)."""
    problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
    limit = {"memory_limit": 6_000_000}
    assert search(problem, **SEARCH | {"pricing": "model"}, **limit).memory_pricing == "model"
    for rule in ("aligned", "mirrored"):
        kept = search(problem, **SEARCH, **limit, backward=rule)
        assert kept.memory_pricing == "run" and not any(recomputes(kept.plan))
        assert max(kept.evaluation.peak_memory) <= 6_000_000


def test_same_seed_same_plan_on_every_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
    options = SEARCH | {"memory_limit": 6_000_000, "generations": 20}
    runs = [search(problem, backend=b, **options) for b in ("numba", "numpy")]
    install_fake_cupy(monkeypatch)
    runs.append(search(problem, backend="cuda", **options))
    plans = [(r.plan.forward, r.plan.backward, r.plan.order) for r in runs]
    assert all(plan == plans[0] for plan in plans)
    assert any(recomputes(runs[0].plan))


def test_evaluate_says_what_recomputing_stages_hold_when_run() -> None:
    from tidgap.cli.options import run_note

    plan = Plan.of([[4, 4, 4, 4], [4, 4, 4, 4]], [[2, 6, 8], [4, 4, 4, 4]])
    problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
    model = evaluate(problem, plan).peak_memory
    held = predicted_held_bytes(problem, plan, model)
    assert model is not None and held is not None and held[0] < model[0]
    note = run_note(problem, plan) or ""
    shown = f"{format_bytes(held[0])} (the model's {format_bytes(model[0])})"
    assert f"stage(s) holding {shown}" in note
    assert "holding" not in (run_note(profiled(synth_problem(4, 2, 16), None), plan) or "x")


def test_evaluate_says_what_every_stage_holds_when_run(tmp_path: Any) -> None:
    """The best 1F1B of a stage limited to its samples is within the limit by the model,
    and over it as ``tidgap run`` holds it (its graphs): ``evaluate`` says both, as the
    search's summary did (evaluate said "within every limit" alone); its ``--json`` stays
    the model's object."""
    limit = 2 * GPT_MEMORY["activation_bytes"][0]
    problem = profiled(cheap_ops(limit), GPT_MEMORY)
    path = write_json(tmp_path / "p.json", problem.model_dump(mode="json", exclude_none=True))
    plan = SCHEDULES["1f1b"].baseline(problem, 8)
    held = run_evaluated(problem, plan, evaluate(problem, plan)).peak_memory
    assert held is not None
    done = run_cli("evaluate", str(path), "--schedule", "1f1b", "-m", "8")
    assert done.exit_code == 0, done.output
    shown = ", ".join(map(format_bytes, held))
    assert "per stage: 3.22 MB, 2.15 MB; within every limit" in done.output
    assert f"as tidgap run holds it (source.memory): {shown}; over the memory limit on stage 0" in (
        done.output
    )
    model = json_output(run_cli("evaluate", str(path), "--schedule", "1f1b", "-m", "8", "--json"))
    assert model["over_memory_limit"] == [] and "as tidgap run" not in str(model)
    plain = write_json(tmp_path / "q.json", synth_problem(4, 2, 16))
    assert (
        "as tidgap run"
        not in run_cli("evaluate", str(plain), "--schedule", "1f1b", "-m", "2").output
    )


def test_ask_and_tell_give_samples_and_keep_the_units() -> None:
    """``evaluate``'s scores give each stage's peak in samples (rounded up) and in the
    levels' units; ``tell`` takes either, and a fitness of one's own sees samples."""
    import tidgap

    problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
    seen = []

    def fitness(population: Any, scores: Any) -> Any:
        seen.append(scores.peaks)
        return scores.time

    for own in (None, fitness):
        optimizer = tidgap.Optimizer(problem, seed=0, population=32, pricing="run", fitness=own)
        population = optimizer.ask()
        scores = optimizer.evaluate(population)
        assert scores.units is not None
        assert (scores.peaks == np.minimum(-(-scores.units // FINE), 16)).all()
        assert (scores.peaks <= problem.batch_size).all()
        optimizer.tell(population, scores)
        population = optimizer.ask()
        scores = optimizer.evaluate(population)
        optimizer.tell(population, scores.time, peaks=scores.peaks)
        assert optimizer.generation == 2
    assert seen and all((peaks <= problem.batch_size).all() for peaks in seen)


def test_a_resumed_search_counts_memory_as_one_search(tmp_path: Any) -> None:
    """The islands' peaks in a state file are the units the search counted."""
    from tests.optimize.test_checkpoint import resumed

    problem = profiled(synth_problem(4, 2, 16), GPT_MEMORY)
    options = dict(seed=5, population=16, backend="numba", pricing="run")
    full, rest, _ = resumed(tmp_path, problem, 1400, 1250, memory_limit=6_000_000, **options)
    assert rest.memory_pricing == full.memory_pricing == "run"
    assert rest.plan == full.plan and any(recomputes(full.plan))


def test_a_limit_no_plan_found_meets_names_the_leanest_plan() -> None:
    """Just above what every plan holds (a bound no plan reaches): no plan is found, and
    the refusal says what the plan least over the limit holds, and where, as the
    reference counts it."""
    problem, _ = gpt_between_bounds()
    free = least_bytes(problem, True)
    assert free is not None
    limit = int(max(free)) + 1
    with pytest.raises(InputError, match="no plan found within the memory limit") as caught:
        search(problem, **SEARCH, memory_limit=limit)
    found = re.search(
        r"the leanest plan found holds \S+ \S+ \((\d+) B\) on stage (\d+)$", str(caught.value)
    )
    assert found is not None, str(caught.value)
    held, stage = int(found[1]), int(found[2])
    assert held > limit and stage == 1  # stage 1 saves the most per sample


def test_the_comparison_counts_every_rows_memory_as_the_search_did(gpt_searches: list) -> None:
    """A search counting memory as ``tidgap run`` holds it printed its table's baseline and
    heuristic rows with the model's bytes beside run-priced times (a global DP plan that
    recomputes: 11.8 MB where the run holds 4.96): each row is now counted as the plan's."""
    from tidgap.analysis.compare import compare
    from tidgap.optimize.run_memory import run_evaluated
    from tidgap.runtime.pricing import run_evaluation
    from tidgap.schedules.baselines import gpipe_plan, one_f_one_b_plan
    from tidgap.schedules.families import evaluate

    _, problem, result, _ = gpt_searches[0]
    rows = compare(
        problem,
        result.plan,
        baselines=result.baselines,
        heuristics=result.heuristics,
        plan_evaluation=result.evaluation,
        price=run_evaluation,
        held=run_evaluated,
    )
    memory = {row.schedule: row.peak_memory for row in rows}
    for name, plan in result.heuristics.items():
        expected = run_evaluated(problem, plan, run_evaluation(problem, plan)).peak_memory
        assert memory[name] == expected
    plans = {"gpipe": gpipe_plan, "1f1b": one_f_one_b_plan}
    differs = False
    for name, build in plans.items():
        plan = build(problem, result.baselines[name].microbatches)
        expected = run_evaluated(problem, plan, evaluate(problem, plan)).peak_memory
        assert memory[name] == expected
        differs |= expected != evaluate(problem, plan).peak_memory
    assert differs or any(
        memory[name] != evaluate(problem, plan).peak_memory
        for name, plan in result.heuristics.items()
    )  # the test has teeth: some row's run bytes are not the model's
