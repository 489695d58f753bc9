"""Carry a plan into other tools: PyTorch's compute-only schedule CSV (for the plan lowered
to one common partition) with its microbatch sidecar, and a JSON schedule of every step.

Runtimes today run one partition on every stage: PyTorch's ``torch.distributed.pipelining``
numbers microbatches globally (``1B3`` is stage 1's backward of microbatch 3, the same
samples as its forward ``1F3``). A plan whose stages split the batch differently becomes,
there, its *common refinement*: a boundary wherever any stage, in either direction, has
one; an ordered plan keeps its order there, each of its microbatches run as the consecutive
parts that refine it. ``docs/outputs.md`` describes the files.
"""

from __future__ import annotations

import csv
import io
from itertools import pairwise
from pathlib import Path
from typing import Any

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.schedules.baselines import BaselineResult
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


def lowered_plan(plan: Plan) -> Plan:
    """``plan`` with :func:`common_refinement` on every stage, both ways; an ordered plan
    keeps its order (:func:`lowered_order`), a flush plan stays a flush plan."""
    sizes = common_refinement(plan)
    stages = len(plan.forward)
    if family_of(plan).has_flush:
        return Plan.of([sizes] * stages, [sizes] * stages)
    order = lowered_order(plan, sizes)
    return Plan.of([sizes] * stages, [sizes] * stages, order=list(order.stages))


def pytorch_rows(order: Order) -> list[list[str]]:
    """Row ``s`` (rank ``s`` runs stage ``s``): stage ``s``'s actions in ``order``, ``sF0``
    .. and ``sB0`` .. (a flush plan: ``sF0 .. sF{n-1}`` then ``sB0 .. sB{n-1}``)."""
    return [[str(action) for action in order.actions(s)] for s in range(len(order.stages))]


def pytorch_csv(order: Order) -> str:
    """The compute-only schedule CSV that ``PipelineScheduleMulti._load_csv`` reads, for an
    order over one common partition."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(pytorch_rows(order))
    return buffer.getvalue()


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
        "schedule_csv": Path(csv_path).name,
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


#: The advice when a flush plan, lowered, is slower than the best GPipe.
SAME_PARTITION_ADVICE = (
    "--to same-partition searches the best plan that shares one partition (never slower than GPipe)"
)


def runtime_advice(rival: BaselineResult) -> str:
    """The advice when an ordered plan, lowered, is slower than the baseline ``rival``
    (GPipe or 1F1B): PyTorch runs that one as is."""
    return f"torch.distributed.pipelining's Schedule{SCHEDULES[rival.schedule].label} runs it as is"


def slower_than_rival_warning(
    lowered: Evaluation, rival: BaselineResult, advice: str, time_unit: str
) -> str | None:
    """The one-line warning when ``lowered`` (the plan as ``pytorch-csv`` runs it) takes
    longer than the best baseline ``rival``, both in ``time_unit``, ending with ``advice``;
    ``None`` otherwise."""
    if lowered.iteration_time <= rival.iteration_time:
        return None
    ratio = lowered.iteration_time / rival.iteration_time
    return (
        f"tidgap: warning: lowered to one partition the plan takes "
        f"{lowered.iteration_time:.6g} {time_unit}, {ratio:.2f}x ({ratio - 1:+.2%}) the best "
        f"{SCHEDULES[rival.schedule].label}'s {rival.iteration_time:.6g} {time_unit} "
        f"({rival.microbatches} microbatches); {advice}"
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
