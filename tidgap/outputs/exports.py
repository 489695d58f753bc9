"""Carry a plan into other tools: PyTorch's compute-only schedule CSV (for the plan lowered
to one common partition) with its microbatch sidecar, and a JSON schedule of every step.

Runtimes today run one partition on every stage: PyTorch's ``torch.distributed.pipelining``
numbers microbatches globally (``1B3`` is stage 1's backward of microbatch 3, the same
samples as its forward ``1F3``). A plan whose stages split the batch differently becomes,
there, its *common refinement*: a boundary wherever any stage, in either direction, has
one; an ordered plan keeps its order there, each of its microbatches run as the consecutive
parts that refine it. PyTorch's stages take one microbatch shape (the first one's), so
the CSV's plan cuts that refinement into equal microbatches by default
(:func:`equal_refinement`), and is measured against the GPipe and 1F1B PyTorch runs as they
are (:func:`pytorch_rivals`). ``docs/outputs.md`` describes the files.
"""

from __future__ import annotations

import csv
import io
from itertools import pairwise
from math import gcd, isqrt
from pathlib import Path
from typing import Any

import numpy as np

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.model.text import without_surrogates
from tidgap.schedules.baselines import BaselineResult, best_baselines, least_feasible_count
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import SCHEDULES, family_of
from tidgap.schedules.ir import Order, prefix_sums
from tidgap.schedules.timeline import Step, Timeline

SCHEDULE_FORMAT = "tidgap.schedule/1"
MICROBATCHES_FORMAT = "tidgap.microbatches/1"
OPERATIONS = {"F": "forward", "B": "backward", "T": "tail"}
SENDS = {"F": "activations", "B": "gradients"}


def common_refinement(plan: Plan) -> list[int]:
    """Sizes in samples of the coarsest partition that refines every stage's forward and
    backward partition. Each part lies inside one microbatch of every stage and direction,
    so it respects every cap and is a multiple of ``unit``."""
    cuts = sorted({p for sizes in plan.forward + plan.backward for p in prefix_sums(sizes)})
    return [high - low for low, high in pairwise(cuts)]


def equal_refinement(plan: Plan) -> list[int]:
    """:func:`common_refinement` cut into equal microbatches: ``B / g`` of ``g`` samples,
    ``g`` the greatest common divisor of its sizes (a multiple of ``unit``, within every
    cap), the fewest equal microbatches that refine every stage's partitions."""
    sizes = common_refinement(plan)
    size = gcd(*sizes)
    return [size] * (sum(sizes) // size)


#: The refinements ``tidgap export --to pytorch-csv --microbatch-sizes`` chooses from.
REFINEMENTS = {"equal": equal_refinement, "common": common_refinement}


def _parts(sizes: list[int], cuts: dict[int, int]) -> list[int]:
    """How many parts of the refinement each microbatch of ``sizes`` holds (``cuts`` maps
    each of the refinement's prefix sums to its index)."""
    return [cuts[high] - cuts[low] for low, high in pairwise(prefix_sums(sizes))]


def lowered_order(plan: Plan, sizes: list[int]) -> Order:
    """``plan``'s order on the refinement ``sizes``: each forward (backward) becomes the
    consecutive forwards (backwards) of its parts.

    It is valid whenever the plan's order is (model.md's rules), so it needs no repair:
    the parts of backward ``k`` follow every forward that preceded it, and with one
    partition everywhere the part a stage waits for on ``s+1`` lies in a backward of
    ``s+1`` no later than the one backward ``k`` waited for (rules 1 and 2 carry over)."""
    cuts = {cut: i for i, cut in enumerate(prefix_sums(sizes))}
    letters = []
    for s, stage in enumerate(plan.stage_order().stages):
        parts = {
            "F": iter(_parts(plan.forward[s], cuts)),
            "B": iter(_parts(plan.backward[s], cuts)),
        }
        letters.append("".join(op * next(parts[op]) for op in stage))
    return Order.of(letters)


def lowered_plan(plan: Plan, sizes: list[int] | None = None) -> Plan:
    """``plan`` with ``sizes`` (a refinement of every stage's partitions, by default
    :func:`common_refinement`) on every stage, both ways; an ordered plan keeps its order
    (:func:`lowered_order`), a flush plan stays a flush plan."""
    sizes = common_refinement(plan) if sizes is None else sizes
    stages = len(plan.forward)
    if family_of(plan).has_flush:
        return Plan.of([sizes] * stages, [sizes] * stages)
    order = lowered_order(plan, sizes)
    return Plan.of([sizes] * stages, [sizes] * stages, order=list(order.stages))


def lockstep_steps(order: Order) -> list[list[int]]:
    """``steps[s][i]``: the time step (column) of stage ``s``'s ``i``-th action in ``order``
    (one partition on every stage), the earliest at which ``PipelineScheduleMulti`` can run
    it. That schedule runs the columns in lockstep: in a step, a rank runs its action and
    exchanges with its neighbours what their actions of the same step send it, so a forward
    of microbatch ``j`` comes a step after stage ``s-1``'s forward of ``j`` and a backward
    a step after stage ``s+1``'s backward of ``j``; a rank runs one action a step, in its
    order. Raises ``ValueError`` if ``order`` deadlocks."""
    actions = [order.actions(s) for s in range(len(order.stages))]
    placed: dict[tuple[int, str, int], int] = {}
    steps: list[list[int]] = [[] for _ in actions]
    while sum(map(len, steps)) < sum(map(len, actions)):
        progressed = False
        for s, row in enumerate(actions):
            while len(steps[s]) < len(row):
                action = row[len(steps[s])]
                source = s - 1 if action.op == "F" else s + 1
                earliest = steps[s][-1] + 1 if steps[s] else 0
                if 0 <= source < len(actions):
                    before = placed.get((source, action.op, action.microbatch))
                    if before is None:
                        break
                    earliest = max(earliest, before + 1)
                placed[(s, action.op, action.microbatch)] = earliest
                steps[s].append(earliest)
                progressed = True
        if not progressed:
            raise ValueError("the order deadlocks")
    return steps


def pytorch_rows(order: Order) -> list[list[str]]:
    """Row ``s`` (rank ``s`` runs stage ``s``): stage ``s``'s actions in ``order`` (``sF0``
    .. and ``sB0`` ..; a flush plan: ``sF0 .. sF{n-1}`` then ``sB0 .. sB{n-1}``), each in the
    column of its :func:`lockstep_steps` step, the steps in between empty cells."""
    rows = []
    for s, steps in enumerate(lockstep_steps(order)):
        row = [""] * (steps[-1] + 1 if steps else 0)
        for action, step in zip(order.actions(s), steps, strict=True):
            row[step] = str(action)
        rows.append(row)
    return rows


def pytorch_csv(order: Order) -> str:
    """The compute-only schedule CSV that ``PipelineScheduleMulti._load_csv`` reads, for an
    order over one common partition, in lockstep columns (:func:`pytorch_rows`)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(pytorch_rows(order))
    return buffer.getvalue()


def pytorch_rivals(problem: Problem) -> dict[str, BaselineResult | None]:
    """The best GPipe and the best 1F1B that ``torch.distributed.pipelining`` runs as they
    are: ``step()`` cuts the batch into ``m`` equal microbatches only where ``m`` divides it
    (here in units, so each is a multiple of ``unit``), its stages take one microbatch
    shape, and ``Schedule1F1B`` wants at least as many microbatches as stages. ``None``
    where no count qualifies (1F1B with fewer units than stages). The counts are the
    divisors of ``U`` (found up to its square root: a list of every count took gigabytes
    at a batch of 10^9)."""
    U = problem.num_units
    low = [d for d in range(1, isqrt(U) + 1) if U % d == 0]
    divisors = np.unique(np.asarray(low + [U // d for d in low], np.int64))
    counts = divisors[divisors >= least_feasible_count(problem)]
    rivals: dict[str, BaselineResult | None] = {}
    for schedule, fewest in (("gpipe", 1), ("1f1b", problem.num_stages)):
        allowed = counts[counts >= fewest]
        rivals[schedule] = best_baselines(problem, allowed)[schedule] if allowed.size else None
    return rivals


def microbatches_path(csv_path: str) -> Path:
    """The sidecar beside the CSV: ``x.csv`` -> ``x.microbatches.json``."""
    return Path(csv_path).with_suffix(".microbatches.json")


def microbatches_document(
    problem: Problem,
    sizes: list[int],
    plan_evaluation: Evaluation,
    lowered_evaluation: Evaluation,
    csv_path: str,
) -> dict[str, Any]:
    """The sidecar of the CSV: each microbatch's samples and both predicted evaluations."""
    prefix = prefix_sums(sizes)
    return {
        "format": MICROBATCHES_FORMAT,
        "problem": problem.name,
        "schedule_csv": without_surrogates(Path(csv_path).name),  # read back by tidgap
        "batch_size": problem.batch_size,
        "time_unit": problem.time_unit,
        "n_microbatches": len(sizes),
        "microbatches": [
            {
                "index": j,
                "size": size,
                "samples": [prefix[j] + 1, prefix[j + 1]],
                "slice": [prefix[j], prefix[j + 1]],
            }
            for j, size in enumerate(sizes)
        ],
        "predicted": {"plan": plan_evaluation.as_dict(), "lowered": lowered_evaluation.as_dict()},
    }


#: What the warning adds for a flush plan, lowered, slower than its rival.
SAME_PARTITION_ADVICE = (
    "--to same-partition searches the best plan that shares one partition, for runtimes that "
    "take microbatches of several sizes (never slower than tidgap's best GPipe)"
)


def slower_than_rival_warning(
    lowered: Evaluation, rival: BaselineResult, time_unit: str, flush: bool
) -> str | None:
    """The one-line warning when ``lowered`` (the plan as ``pytorch-csv`` runs it) takes
    longer than ``rival`` (one of :func:`pytorch_rivals`), both in ``time_unit``, naming
    the PyTorch schedule that runs ``rival`` (and, for a ``flush`` plan,
    :data:`SAME_PARTITION_ADVICE`); ``None`` otherwise."""
    if lowered.iteration_time <= rival.iteration_time:
        return None
    ratio = lowered.iteration_time / rival.iteration_time
    label = SCHEDULES[rival.schedule].label
    return (
        f"tidgap: warning: lowered to one partition the plan takes "
        f"{lowered.iteration_time:.6g} {time_unit}, {ratio:.2f}x ({ratio - 1:+.2%}) the "
        f"{label}'s {rival.iteration_time:.6g} {time_unit} ({rival.microbatches} microbatches), "
        f"the fastest that torch.distributed.pipelining runs as is "
        f"(Schedule{label}, n_microbatches={rival.microbatches})"
        + (f"; {SAME_PARTITION_ADVICE}" if flush else "")
    )


def _step(step: Step, op: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"op": op}
    if step.samples is not None:
        entry |= {"microbatch": step.microbatch, "size": step.size, "samples": list(step.samples)}
    return entry | {"start": step.start, "end": step.end}


def _sends(timeline: Timeline, s: int) -> list[dict[str, Any]]:
    """Stage ``s``'s transfers in time order: activations to ``s+1``, gradients to ``s-1``
    (``microbatch`` and ``samples`` are stage ``s``'s)."""
    sends = []
    if s < len(timeline.links):
        sends += [(s + 1, step) for step in timeline.links[s] if step.kind == "F"]
    if s > 0:
        sends += [(s - 1, step) for step in timeline.links[s - 1] if step.kind == "B"]
    sends.sort(key=lambda item: item[1].start)
    return [{"to": to, **_step(step, SENDS[step.kind])} for to, step in sends]


def stage_letters(steps: list[Step]) -> str:
    """A stage's order, ``F`` and ``B`` as it runs them (model.md, Ordered plans)."""
    return "".join(step.kind for step in steps if step.kind in ("F", "B"))


def schedule_document(problem: Problem, timeline: Timeline) -> dict[str, Any]:
    """``tidgap.schedule/1``: per stage, its order's letters and the ordered operations and
    sends with their times."""
    return {
        "format": SCHEDULE_FORMAT,
        "problem": problem.name,
        "schedule": timeline.label,
        "time_unit": timeline.time_unit,
        "iteration_time": timeline.iteration_time,
        "stages": [
            {
                "stage": s,
                "name": timeline.stage_names[s],
                "order": stage_letters(timeline.stages[s]),
                "operations": [_step(step, OPERATIONS[step.kind]) for step in timeline.stages[s]],
                "sends": _sends(timeline, s),
            }
            for s in range(timeline.num_stages)
        ],
    }
