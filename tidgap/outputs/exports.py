"""Carry a plan into other tools: PyTorch's compute-only schedule CSV (for the plan lowered
to one common partition) with its microbatch sidecar, and a JSON schedule of every step.

Runtimes today run one partition on every stage: PyTorch's ``torch.distributed.pipelining``
numbers microbatches globally (``1B3`` is stage 1's backward of microbatch 3, the same
samples as its forward ``1F3``). A plan whose stages split the batch differently becomes,
there, its *common refinement*: a boundary wherever any stage, in either direction, has
one. ``docs/outputs.md`` describes the files.
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
from tidgap.schedules.ir import prefix_sums
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


def lowered_plan(plan: Plan) -> Plan:
    """``plan`` with :func:`common_refinement` on every stage, both ways."""
    sizes = common_refinement(plan)
    stages = len(plan.forward)
    return Plan.of([sizes] * stages, [sizes] * stages)


def pytorch_rows(num_stages: int, count: int) -> list[list[str]]:
    """Row ``s`` (rank ``s`` runs stage ``s``): ``sF0 .. sF{n-1}`` then ``sB0 .. sB{n-1}``,
    the flush order of the model."""
    return [
        [f"{s}F{j}" for j in range(count)] + [f"{s}B{j}" for j in range(count)]
        for s in range(num_stages)
    ]


def pytorch_csv(num_stages: int, count: int) -> str:
    """The compute-only schedule CSV that ``PipelineScheduleMulti._load_csv`` reads."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(pytorch_rows(num_stages, count))
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


def slower_than_gpipe_warning(
    lowered: Evaluation, gpipe: BaselineResult, time_unit: str
) -> str | None:
    """The one-line warning when ``lowered`` (the plan as ``pytorch-csv`` runs it) takes
    longer than the best GPipe ``gpipe``, both in ``time_unit``; ``None`` otherwise."""
    if lowered.iteration_time <= gpipe.iteration_time:
        return None
    ratio = lowered.iteration_time / gpipe.iteration_time
    return (
        f"tidgap: warning: lowered to one partition the plan takes "
        f"{lowered.iteration_time:.6g} {time_unit}, {ratio:.2f}x ({ratio - 1:+.2%}) the best "
        f"GPipe's {gpipe.iteration_time:.6g} {time_unit} ({gpipe.microbatches} microbatches); "
        "--to same-partition searches the best plan that shares one partition "
        "(never slower than GPipe)"
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


def schedule_document(problem: Problem, timeline: Timeline) -> dict[str, Any]:
    """``tidgap.schedule/1``: per stage, the ordered operations and sends with their times."""
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
                "operations": [_step(step, OPERATIONS[step.kind]) for step in timeline.stages[s]],
                "sends": _sends(timeline, s),
            }
            for s in range(timeline.num_stages)
        ],
    }
