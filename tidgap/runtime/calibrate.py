"""Profiles that match the run: each stage's op times measured through the runtime.

``tidgap profile`` times a stage's forward and backward on their own; a run also pays,
per op, what the runtime does around them (cutting chunks from received pieces, storing
graphs, the send and receive calls, the Python dispatch of each instruction, the other
ranks' processes on the same cores). Calibration runs GPipe(m) (and, for a size no GPipe
holds, a flush plan of that size) with ``tidgap run``'s workers so that every table size
is measured, and replaces each stage's tables by the median measured duration of its ops
at each size, each op with the send that posts its result (:func:`op_spans`), plus the
stage's per-op overhead (the median gap the runtime leaves before an op whose input is
there, :func:`dispatch_gaps`), sizes no run measured keeping the profile's time scaled by
the nearest measured size's ratio, made non-decreasing like a profile. Each link becomes
a table of its measured transfers: a receive's end minus the later of its send's end and
its own start (the message's latency over the real backend, with the waiting process's
wake-up), per size. Each plan's recomputing twin (:func:`recomputing_plans`) times the
ops of a stage that recomputes, kept beside the tables (``source.calibration.recompute``).
"""

from __future__ import annotations

import bisect
import copy
import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tidgap.model.calibration_tables import OrderTimes, RecomputeTimes, StageTimes
from tidgap.model.errors import InputError
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.model.timefn import TimeFunction
from tidgap.profiling.build import table
from tidgap.profiling.split import stage_layers
from tidgap.runtime.report import COMPUTE, TRANSFERS, Row, unit_per_second
from tidgap.schedules.baselines import gpipe_plan, one_f_one_b_plan

#: ``durations[s][kind][size]``: measured op durations of stage ``s`` (or transfers over
#: link ``s``), kind ``F`` / ``B``, at microbatch ``size`` (samples), in the problem's unit.
Durations = list[dict[str, dict[int, list[float]]]]


def table_sizes(document: dict[str, Any], source: str) -> list[int]:
    """Every size (samples) in the problem's stage tables; an affine stage is refused."""
    sizes: set[int] = set()
    for s, stage in enumerate(document["stages"]):
        for direction in ("forward", "backward"):
            if "table" not in stage[direction]:
                raise InputError(
                    "is not a table: calibrate a profiled problem (tidgap profile)",
                    ("stages", s, direction),
                    source=source,
                )
            sizes.update(stage[direction]["table"]["sizes"])
    return sorted(sizes)


def calibration_sizes(
    document: dict[str, Any], problem: Problem, source: str, every_size: bool
) -> list[int]:
    """The sizes (samples) to measure: the stage tables' (:func:`table_sizes`), and with
    ``every_size`` every multiple of the unit up to the largest microbatch every stage
    takes (a search picks any of them; between table sizes the profile is a straight
    line)."""
    sizes = set(table_sizes(document, source))
    if every_size:
        sizes |= set(range(problem.unit, problem.common_cap() + 1, problem.unit))
    return sorted(sizes)


def gpipe_counts(problem: Problem, sizes: Sequence[int]) -> list[int]:
    """The microbatch counts ``m = ceil(B / size)`` of ``sizes`` (samples) that fit the
    batch, ascending: GPipe(m) holds ``size``."""
    B = problem.batch_size
    return sorted({math.ceil(B / size) for size in sizes if size <= B})


def calibration_plans(problem: Problem, sizes: Sequence[int]) -> list[tuple[str, Plan]]:
    """Plans whose microbatches hold each of ``sizes`` that fits the batch: GPipe(m) with
    ``m = ceil(B / size)`` (its sizes are ``ceil`` and ``floor`` of ``B/m``), and for a size
    no such GPipe holds, the flush plan of ``B // size`` microbatches of it and the rest on
    every stage; ``(label, plan)``, GPipe first, fewest microbatches first."""
    B = problem.batch_size
    counts = gpipe_counts(problem, sizes)
    # the sizes past a stage's cap too: a table's largest entries are timed where they are
    plans = [(f"GPipe({m})", gpipe_plan(problem, m, within_caps=False)) for m in counts]
    held = {size for _, plan in plans for size in plan.forward[0]}
    for size in sorted(set(sizes) - held):
        if size <= B:
            row = [size] * (B // size) + ([B % size] if B % size else [])
            rows = [row] * problem.num_stages
            plans.append((f"flush({size}x{B // size})", Plan.of(rows, rows)))
    return plans


def recomputing_twin(plan: Plan, unit: int) -> Plan | None:
    """``plan`` (a calibration plan, the same rows on every stage) with each backward row
    moved one ``unit`` earlier, ``[f0 - unit, f1, ..., unit]``: no backward boundary is a
    forward one, so every stage recomputes (:func:`tidgap.runtime.lowering.recomputes`)
    and the run times each size as a forward without autograd's graph and, but at the
    ends, as a backward that re-runs its forward; ``None`` when the first chunk is one unit
    (then every backward partition in units is aligned)."""
    if plan.forward[0][0] <= unit:
        return None
    rows = [[row[0] - unit, *row[1:], unit] for row in plan.forward]
    return Plan.of(plan.forward, rows)


def recomputing_plans(plans: Sequence[tuple[str, Plan]], unit: int) -> list[tuple[str, Plan]]:
    """Each of ``plans``' :func:`recomputing_twin` that exists, labelled ``"... recomputing"``."""
    twins = [(f"{label} recomputing", recomputing_twin(plan, unit)) for label, plan in plans]
    return [(label, twin) for label, twin in twins if twin is not None]


def alternating_plans(problem: Problem, sizes: Sequence[int]) -> list[tuple[str, Plan]]:
    """1F1B(m) for each GPipe(m) of :func:`calibration_plans` but GPipe(1): runs in which
    forwards follow backwards, and the last stage's backwards their own forward
    (:func:`op_contexts`), at GPipe(m)'s sizes."""
    counts = gpipe_counts(problem, sizes)
    return [
        (f"1F1B({m})", one_f_one_b_plan(problem, m, within_caps=False)) for m in counts if m > 1
    ]


#: :func:`op_contexts`' kinds: a forward right after a backward of its stage and its size,
#: and the last stage's backward right after its own forward.
AFTER_BACKWARD, AFTER_OWN_FORWARD = "FB", "BF"


def op_contexts(rows: Sequence[Row], last: bool) -> dict[tuple[str, int], str | None]:
    """One rank's records of one iteration: the compute records ``(kind, microbatch)`` whose
    time depends on the op before them on the stage (on this project's CPU both ran 4-8%
    faster than in GPipe's order), by kind: :data:`AFTER_BACKWARD` for a forward whose
    previous op was a backward of its size (as :func:`tidgap.runtime.pricing.
    order_dependent_times` prices them), ``None`` for one after a backward of another size
    (timed in neither order: left out); on the ``last`` stage, :data:`AFTER_OWN_FORWARD`
    for a backward whose previous op was the forward of the same samples."""
    computes = sorted((r for r in rows if r[0] in _SENDS), key=lambda r: r[4])
    found: dict[tuple[str, int], str | None] = {}
    for previous, row in itertools.pairwise(computes):
        if row[0] == "forward" and previous[0] == "backward":
            same_size = row[3] - row[2] == previous[3] - previous[2]
            found[row[0], row[1]] = AFTER_BACKWARD if same_size else None
        elif (
            last and (previous[0], row[0]) == ("forward", "backward") and previous[2:4] == row[2:4]
        ):
            found[row[0], row[1]] = AFTER_OWN_FORWARD
    return found


#: A compute record kind by its timeline kind (``F`` -> ``forward``, ...).
_RECORD_KIND = {short: kind for kind, short in COMPUTE.items()}
#: For each compute record kind that sends its result, the send's record kind (the output
#: downstream, the input gradient upstream), from :data:`TRANSFERS`.
_SENDS = {_RECORD_KIND[short]: send for short, send, _, _ in TRANSFERS}


def op_spans(rows: Sequence[Row]) -> dict[tuple[str, int], tuple[float, float]]:
    """One rank's records of one iteration (seconds): per compute record ``(kind,
    microbatch)``, its start and the end of what the stage pays for it: the end of the send
    that posts its result where it sends one (the copy to the wire and gloo's ``isend`` run
    on the stage's own thread: 0.14-0.22 ms per send on the fidelity benchmark's GPT on this
    CPU, 3-5% of an op), else its own end."""
    sent = {
        (kind, row[1]): row[5] for kind, send in _SENDS.items() for row in rows if row[0] == send
    }
    return {
        (row[0], row[1]): (row[4], max(row[5], sent.get((row[0], row[1]), row[5])))
        for row in rows
        if row[0] in COMPUTE
    }


def op_durations(
    iterations: Sequence[Sequence[Sequence[Row]]], scale: float, contexts: bool = False
) -> Durations:
    """Every op of ``iterations`` (each: per rank its records, seconds), its send included
    (:func:`op_spans`), by stage, kind (``F``, ``B``, ``T`` for the tail, the optimizer
    step; with ``contexts``, an op that :func:`op_contexts` names under its kind there
    instead, or nowhere where it names ``None``) and size (samples; 0 for a tail), times
    ``scale`` (the problem's unit)."""
    kinds = ("F", "B", "T", AFTER_BACKWARD, AFTER_OWN_FORWARD)
    found: Durations = [{kind: defaultdict(list) for kind in kinds} for _ in iterations[0]]
    for ranks in iterations:
        for s, rows in enumerate(ranks):
            spans = op_spans(rows)
            named = op_contexts(rows, s == len(ranks) - 1) if contexts else {}
            for row in rows:
                if row[0] in COMPUTE:
                    start, end = spans[row[0], row[1]]
                    kind = named.get((row[0], row[1]), COMPUTE[row[0]])
                    if kind is not None:
                        found[s][kind][row[3] - row[2]].append((end - start) * scale)
    return found


def transfers(ranks: Sequence[Sequence[Row]]) -> Iterator[tuple[int, str, int, int, float]]:
    """Every transfer of one iteration's records (per rank, seconds): ``(link, kind,
    microbatch, size, seconds)``, the sender's microbatch (0-based) and the receive's end
    minus the later of the send's end (posting it is the sending op's cost,
    :func:`op_spans`) and the receive's own start."""
    for link in range(len(ranks) - 1):
        for kind, send, receive, offset in TRANSFERS:
            sent = {row[1]: row[5] for row in ranks[link + offset] if row[0] == send}
            for row in ranks[link + 1 - offset]:
                if row[0] == receive:
                    seconds = max(0.0, row[5] - max(sent[row[1]], row[4]))
                    yield link, kind, row[1], row[3] - row[2], seconds


def link_durations(iterations: Sequence[Sequence[Sequence[Row]]], scale: float) -> Durations:
    """Per link, every measured transfer of the runs' ``iterations`` (each: per rank its
    records, seconds; :func:`transfers`) by direction and size, times ``scale`` (the
    problem's unit)."""
    links = len(iterations[0]) - 1
    found: Durations = [{"F": defaultdict(list), "B": defaultdict(list)} for _ in range(links)]
    for ranks in iterations:
        for link, kind, _, size, seconds in transfers(ranks):
            found[link][kind][size].append(seconds * scale)
    return found


#: For each compute record kind, the receive kind whose chunk it waits for (the one holding
#: its last sample), from :data:`TRANSFERS`.
WAITS_FOR = {_RECORD_KIND[short]: receive for short, _, receive, _ in TRANSFERS}


def dispatch_gaps(iterations: Sequence[Sequence[Sequence[Row]]], scale: float) -> list[list[float]]:
    """Per stage, every gap the runtime leaves before a forward or backward (after the
    stage's first of an iteration): the op's start minus the moment it could start, the
    later of the end of the stage's previous op (its send included, :func:`op_spans`) and
    the end of the receive of the chunk holding the op's last sample (the instructions
    between: chunks cut, Python's dispatch); times ``scale`` (the problem's unit)."""
    found: list[list[float]] = [[] for _ in iterations[0]]
    for ranks in iterations:
        for s, rows in enumerate(ranks):
            # a direction's received chunks cover the batch once: by their ends, in order
            received = {
                kind: sorted((r[3], r[5]) for r in rows if r[0] == kind)
                for kind in WAITS_FOR.values()
            }
            computes = sorted((r for r in rows if r[0] in WAITS_FOR), key=lambda r: r[4])
            spans = op_spans(rows)
            for previous, row in itertools.pairwise(computes):
                ready = spans[previous[0], previous[1]][1]
                chunks = received[WAITS_FOR[row[0]]]
                holder = bisect.bisect_left(chunks, (row[3],))
                if holder < len(chunks):
                    ready = max(ready, chunks[holder][1])
                found[s].append(max(0.0, row[4] - ready) * scale)
    return found


def _measured_table(
    sizes: Sequence[int], original: Callable[[int], float], measured: dict[int, list[float]]
) -> dict[str, Any]:
    """A table over ``sizes``: each measured size's median; an unmeasured one keeps
    ``original(size)`` scaled by the ratio at the nearest measured size."""
    medians = {size: statistics.median(measured[size]) for size in sizes if measured.get(size)}
    if not medians:
        raise InputError("no calibration run measured any of its sizes", source="calibrate")
    out = []
    for size in sizes:
        if size in medians:
            out.append(medians[size])
            continue
        nearest = min(medians, key=lambda known: (abs(known - size), known))
        base = original(nearest)
        out.append(original(size) * (medians[nearest] / base if base > 0 else 1.0))
    return table(sizes, out)


def _paid(measured: dict[int, list[float]], overhead: float) -> dict[int, list[float]]:
    """``measured`` durations (per size) each plus ``overhead``."""
    return {size: [t + overhead for t in times] for size, times in measured.items()}


def _entry_tables(
    stage: dict[str, Any],
    measured: dict[str, dict[int, list[float]]],
    overhead: float,
    kind: type[StageTimes],
) -> dict[str, Any]:
    """One stage's ``source.calibration`` entry of ``kind`` (:data:`ENTRY_OPS`: which
    measured kind fills each field, and the calibrated time it is scaled from) from the
    ``measured`` durations plus ``overhead``, over the calibrated ``stage``'s table sizes
    and the measured ones; a size no run measured keeps that calibrated time scaled by the
    ratio at the nearest measured size (by 1 where none was measured)."""
    forward = TimeFunction.model_validate(stage["forward"])
    backward = TimeFunction.model_validate(stage["backward"])
    bases = {
        "forward": forward,
        "backward": backward,
        "both": lambda size: forward(size) + backward(size),
    }
    entry = {}
    for field, (ops, base) in ENTRY_OPS[kind].items():
        direction = kind.DIRECTIONS[field]
        sizes = sorted(set(stage[direction]["table"]["sizes"]) | set(measured[ops]))
        if measured[ops]:
            entry[field] = _measured_table(sizes, bases[base], _paid(measured[ops], overhead))
        else:
            entry[field] = table(sizes, [bases[base](size) for size in sizes])
    return entry


#: Per calibration entry kind, per field: the measured op kind that fills it, and the
#: calibrated time (``forward``, ``backward`` or ``both`` added) a size no run measured is
#: scaled from.
ENTRY_OPS: dict[type[StageTimes], dict[str, tuple[str, str]]] = {
    RecomputeTimes: {"forward": ("F", "forward"), "backward": ("B", "both")},
    OrderTimes: {
        "forward_after_backward": (AFTER_BACKWARD, "forward"),
        "backward_after_forward": (AFTER_OWN_FORWARD, "backward"),
    },
}


def calibrated(
    document: dict[str, Any],
    problem: Problem,
    stages: Durations,
    links: Durations,
    runs: Sequence[str],
    overheads: Sequence[float] | None = None,
    recompute: Durations | None = None,
    order: bool = False,
) -> dict[str, Any]:
    """A copy of the problem ``document`` (``problem`` loaded from it) whose stages and
    links are tables of the measured op and transfer times, over the measured sizes, the
    unit, the largest microbatch and a stage's own table sizes, each op's time plus its
    stage's ``overheads`` entry (the runtime's gap before an op, :func:`dispatch_gaps`;
    default none), each stage's ``tail`` the median measured optimizer step where the runs
    stepped one (else kept), with ``source.calibration`` saying how (``runs``: the plans
    measured; ``overhead``: per stage) and ``source.timing.recompute`` false (the stages'
    tables time no recomputation). ``recompute``: the ops of runs in which every stage
    recomputed (:func:`recomputing_plans`), by stage, kind and size; they become
    ``source.calibration.recompute`` (:mod:`tidgap.model.calibration_tables`), each plus its
    stage's overhead; with ``order``, the ``stages``' ops of :func:`op_contexts` kinds become
    ``source.calibration.order`` the same way."""
    out = copy.deepcopy(document)
    ends = {problem.unit, problem.common_cap()}
    overheads = list(overheads) if overheads is not None else [0.0] * len(stages)
    for stage, measured, timed, overhead in zip(
        out["stages"], stages, problem.stages, overheads, strict=True
    ):
        for direction, kind, context in (
            ("forward", "F", AFTER_BACKWARD),
            ("backward", "B", AFTER_OWN_FORWARD),
        ):
            # a stage whose every op of a kind followed the op that speeds it up (the last
            # stage's one backward of GPipe(1)) times its table by those
            ops = measured[kind] or measured.get(context, {})
            own = stage[direction].get("table", {}).get("sizes", [])
            sizes = sorted(set(own) | set(ops) | ends)
            paid = _paid(ops, overhead)
            stage[direction] = _measured_table(sizes, getattr(timed, direction), paid)
        tails = [t for durations in measured.get("T", {}).values() for t in durations]
        if tails:
            stage["tail"] = statistics.median(tails)
    for link, measured, timed in zip(out["links"], links, problem.links, strict=True):
        for direction, kind in (("forward", "F"), ("backward", "B")):
            sizes = sorted(set(measured[kind]) | ends)
            link[direction] = _measured_table(sizes, getattr(timed, direction), measured[kind])
    source = out.get("source")
    source = dict(source) if isinstance(source, dict) else {"description": source}
    if isinstance(source.get("timing"), dict):
        source["timing"] = {**source["timing"], "recompute": False}
    source["calibration"] = {
        "runs": list(runs),
        "overhead": [round(value, 6) for value in overheads],
        "rule": "each stage's forward and backward table: the median measured duration of "
        "its ops at each size in tidgap run's workers, plus the stage's overhead (the median "
        "gap the runtime left before an op once the op's input had arrived and the stage's "
        "previous op had ended); each link: the median measured "
        "transfer (a receive's end minus the later of its send's end and its own start) "
        "per size; sizes no run measured keep the profile's time scaled by the nearest "
        "measured size's ratio; made non-decreasing; a stage's tail: the median measured "
        "optimizer step, where the runs stepped one",
    }
    entries = [(RecomputeTimes, recompute)] if recompute is not None else []
    entries += [(OrderTimes, stages)] if order else []
    for kind, measured_ops in entries:
        source["calibration"][kind.KEY] = [
            _entry_tables(stage, measured, overhead, kind)
            for stage, measured, overhead in zip(
                out["stages"], measured_ops, overheads, strict=True
            )
        ]
    if recompute is not None:
        source["calibration"]["rule"] += (
            "; recompute, per stage: the same of runs in which every stage recomputed (its "
            "forwards without autograd's graph, its backwards re-running their forward "
            "first), sizes no run measured keeping the calibrated forward (forward plus "
            "backward) scaled by the nearest measured size's ratio"
        )
    if order:
        source["calibration"]["rule"] += (
            "; order, per stage: the same of forwards run right after a backward of the "
            "stage, and of the last stage's backwards run right after their own forward "
            "(those ops left out of the stage's tables), sizes no run measured keeping the "
            "calibrated forward (backward) scaled by the nearest measured size's ratio"
        )
    out["source"] = source
    return out


def measured_problem(
    document: dict[str, Any],
    problem: Problem,
    iterations: Sequence[Sequence[Sequence[Row]]],
    runs: Sequence[str],
    overheads: Sequence[float] | None = None,
    recomputed: Sequence[Sequence[Sequence[Row]]] = (),
    order: bool = False,
) -> dict[str, Any]:
    """:func:`calibrated` from the records of ``iterations`` (each: per rank its records,
    seconds), the runs of ``runs``; ``overheads``: their :func:`stage_overheads`, found here
    when not given; ``recomputed``: iterations in which every stage recomputed (their ops
    become ``source.calibration.recompute``; none: it has none); ``order``: the ops of
    :func:`op_contexts` kinds become ``source.calibration.order``, not the stages' tables."""
    scale = unit_per_second(problem.time_unit)
    links = link_durations(iterations, scale)
    if overheads is None:
        overheads = stage_overheads(iterations, scale)
    recompute = op_durations(recomputed, scale) if recomputed else None
    stages = op_durations(iterations, scale, contexts=order)
    return calibrated(document, problem, stages, links, runs, overheads, recompute, order)


def resplit(document: dict[str, Any], boundaries: list[int], layers: list[str]) -> list[str]:
    """Make the calibrated ``document`` describe stages split at ``boundaries`` (of the
    model's ``layers``, by name), not the profile's: ``source.split`` records them with each
    stage's layers, each stage is named after its layers (``first-last``), and the
    profiled stages' bytes, which describe other stages, are left out (each stage's
    ``activation_bytes`` and the ``memory_limit`` that needs them, ``source.memory``,
    ``source.links.bytes_per_sample``); return the fields left out."""
    stages = stage_layers(layers, boundaries)
    source = document["source"]
    source["split"] = {
        "method": "given by tidgap calibrate --split",
        "boundaries": list(boundaries),
        "stages": stages,
    }
    dropped = []
    for field in ("activation_bytes", "memory_limit"):
        if any(field in stage for stage in document["stages"]):
            dropped.append(field)
    for stage, name in zip(document["stages"], stages, strict=True):
        stage["name"] = name
        for field in dropped:
            stage.pop(field, None)
    if source.pop("memory", None) is not None:
        dropped.append("source.memory")
    links = source.get("links")
    if isinstance(links, dict) and links.pop("bytes_per_sample", None) is not None:
        dropped.append("source.links.bytes_per_sample")
    return dropped


def stage_overheads(iterations: Sequence[Sequence[Sequence[Row]]], scale: float) -> list[float]:
    """Per stage, the median of its :func:`dispatch_gaps` (0 where it has none), times
    ``scale`` (the problem's unit)."""
    gaps = dispatch_gaps(iterations, scale)
    return [statistics.median(found) if found else 0.0 for found in gaps]
