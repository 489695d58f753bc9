"""What a rank's result file must hold before ``tidgap run --results`` reports it: the
structure :func:`tidgap.runtime.worker.run_rank` writes, checked field by field, so a
damaged, foreign or swapped file is one line naming the file and the field."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, get_args

from tidgap.model.errors import InputError, JsonPath
from tidgap.model.numbers import is_integer
from tidgap.model.plan import Plan
from tidgap.runtime.job import Job
from tidgap.runtime.lowering import Instruction, Kind, lower, recomputes

#: Every record kind a worker writes: the lowered instructions' and the optimizer step's.
RECORD_KINDS = frozenset((*get_args(Kind), "tail"))


def _require(ok: bool, field: str | JsonPath, message: str) -> None:
    if not ok:
        raise InputError(message, (field,) if isinstance(field, str) else field)


def _check_row(row: Any, where: JsonPath, timeout: float) -> None:
    """A record: ``(kind, microbatch, lo, hi, start, end)``, times in seconds from the
    iteration's barrier with ``0 <= start <= end <= timeout`` (the job's)."""
    shaped = isinstance(row, (tuple, list)) and len(row) == 6
    _require(shaped, where, "is not a record (kind, microbatch, lo, hi, start, end)")
    kind, microbatch, lo, hi, start, end = row
    known = isinstance(kind, str) and kind in RECORD_KINDS
    _require(known, where, f"has kind {kind!r}, not a record kind")
    counts = all(is_integer(v) and v >= 0 for v in (microbatch, lo, hi)) and lo <= hi
    _require(counts, where, "has a microbatch or samples that are not counts with lo <= hi")
    times = all(isinstance(v, float) and math.isfinite(v) for v in (start, end))
    _require(
        times and 0 <= start <= end <= timeout,
        where,
        f"has times that are not 0 <= start <= end <= the job's timeout ({timeout:g} s)",
    )


def _is_values(tensor: Any, precision: Any, floating: bool) -> bool:
    """Whether ``tensor`` is a dense tensor of real values in memory, of the run's
    ``precision`` (a ``torch.dtype``) if of floating point (``floating``: it must be), as a
    worker saves them."""
    import torch

    return (
        isinstance(tensor, torch.Tensor)
        and tensor.layout == torch.strided
        and tensor.device.type != "meta"
        and not tensor.is_complex()
        and (tensor.dtype == precision if tensor.is_floating_point() else not floating)
    )


def _check_tensors(value: Any, field: str, precision: Any, floating: bool) -> None:
    """``None`` or a mapping of parameter names to dense real tensors (``floating``: of
    floating point: gradients and parameters; weights also hold buffers) of the run's
    ``precision``."""
    if value is None:
        return
    ok = isinstance(value, dict) and all(
        isinstance(k, str) and _is_values(v, precision, floating) for k, v in value.items()
    )
    kind = "floating-point" if floating else "real"
    _require(ok, field, f"is not a mapping of parameter names to dense {kind} {precision} tensors")


def _checked_job(value: Any) -> Job:
    """The job a result records (:meth:`Job.from_fields`), its errors under ``job``."""
    _require(
        isinstance(value, dict) and all(isinstance(k, str) for k in value),
        "job",
        "is not an object",
    )
    try:
        return Job.from_fields(value)
    except InputError as error:
        raise InputError(error.message, ("job", *error.path)) from None


def check_result(result: Any, rank: int) -> None:
    """Raise :class:`InputError` (naming the field) unless ``result`` is rank ``rank``'s
    result as :func:`tidgap.runtime.worker.run_rank` writes it."""
    import torch

    if not isinstance(result, dict):
        raise InputError(f"holds a {type(result).__name__}, not a rank's result")
    for field in ("job", "rank", "stage", "layers", "recompute", "iterations"):
        _require(field in result, field, "is missing")
    ours = is_integer(result["rank"]) and result["rank"] == rank
    _require(ours, "rank", f"is {result['rank']!r}: not rank {rank}'s file")
    job = _checked_job(result["job"])
    _require(isinstance(result["stage"], str), "stage", "is not a name")
    layers = result["layers"]
    _require(
        isinstance(layers, list) and all(isinstance(n, str) for n in layers),
        "layers",
        "is not a list of layer names",
    )
    _require(isinstance(result["recompute"], bool), "recompute", "is not true or false")
    transport = result.get("transport")  # absent from results written before NCCL
    _require(transport in (None, "gloo", "nccl"), "transport", 'is not "gloo", "nccl" or null')
    redrawn = result.get("redrawn")
    _require(redrawn is None or isinstance(redrawn, str), "redrawn", "is not a reason or null")
    again = result["recompute"]
    _require(redrawn is None or again, "redrawn", "is given for a stage that does not recompute")
    iterations = result["iterations"]
    timed = isinstance(iterations, list) and len(iterations) == job.iterations
    _require(timed, "iterations", f"is not a list of the job's {job.iterations} iterations")
    for i, rows in enumerate(iterations):
        _require(
            isinstance(rows, list) and bool(rows),
            ("iterations", i),
            "is not a non-empty list of records",
        )
        for j, row in enumerate(rows):
            _check_row(row, ("iterations", i, j), job.timeout)
        _require(max(row[5] for row in rows) > 0, ("iterations", i), "took no time")
    peaks = result.get("peak_bytes")
    ok = peaks is None or (
        isinstance(peaks, list)
        and len(peaks) == len(iterations)
        and all(is_integer(p) and 0 <= p < 2**63 for p in peaks)
    )
    _require(ok, "peak_bytes", "is not one byte count per iteration")
    _require(result.get("plan") is None or isinstance(result["plan"], dict), "plan",
             "is not an object")  # fmt: skip
    starts = result.get("starts")
    ok = starts is None or (
        isinstance(starts, list)
        and len(starts) == len(iterations)
        and all(isinstance(t, float) and math.isfinite(t) for t in starts)
    )
    _require(ok, "starts", "is not one finite start time per iteration")
    precision = torch.float64 if job.float64 else torch.float32
    for field, floating in (("gradients", True), ("weights", False), ("stepped", True)):
        _check_tensors(result.get(field), field, precision, floating)
    mode = result.get("checked_in")
    _require(mode in (None, "train", "eval"), "checked_in", 'is not "train", "eval" or null')
    why = result.get("eval_reason")
    _require(why is None or isinstance(why, str), "eval_reason", "is not a reason or null")
    draws = result.get("draws")
    _require(mode == "train" or draws is None, "draws", "is given for a check not in train mode")
    _require(mode != "train" or draws is not None, "draws", "is missing for a train-mode check")
    _require(draws is None or isinstance(draws, list), "draws", "is not a list of draws")
    for i, draw in enumerate(draws or []):
        _check_draw(draw, ("draws", i), precision)


def _check_draw(draw: Any, where: JsonPath, precision: Any) -> None:
    """A saved draw (:func:`tidgap.runtime.draws.as_saved`): a name, tensors (floating
    point ones of the run's ``precision``), a structure that ``treespec_loads`` reads, with
    a leaf for each of the first tensors (the others: what the operator wrote into its
    arguments)."""
    from torch.utils import _pytree as pytree

    ok = (
        isinstance(draw, dict)
        and isinstance(draw.get("name"), str)
        and isinstance(draw.get("tensors"), list)
        and all(_is_values(t, precision, False) for t in draw["tensors"])
        and isinstance(draw.get("structure"), str)
    )
    _require(ok, where, "is not a random draw (name, tensors, structure)")
    try:
        leaves = pytree.treespec_loads(draw["structure"]).num_leaves
    except Exception:  # a damaged structure raises whatever its JSON decoding meets
        leaves = None
    _require(leaves is not None, (*where, "structure"), "is not a tensor structure")
    count = len(draw["tensors"])
    _require(leaves <= count, (*where, "structure"), f"has {leaves} leaves for {count} tensors")


@dataclass(frozen=True)
class RankPlan:
    """What rank ``rank``'s result of one plan holds when the job ran it: ``instructions``
    its lowered instructions (:func:`~tidgap.runtime.lowering.lower`) recorded in order
    each iteration, then the optimizer step's ``"tail"`` record when ``tail``; ``stage``
    its stage's name and ``layers`` the names of its layers; ``recompute`` whether it
    re-runs forwards (:func:`~tidgap.runtime.lowering.recomputes`); with the gradient
    check, ``state`` the shapes of those layers' state (``weights``) and ``trainable`` of
    their trainable parameters (``gradients``, and ``stepped`` after a tail)."""

    rank: int
    instructions: list[Instruction]
    tail: bool
    stage: str
    layers: list[str]
    recompute: bool
    state: dict[str, tuple[int, ...]]
    trainable: dict[str, tuple[int, ...]]


def rank_plans(plan: Plan, model: Any, boundaries: list[int], tail: bool) -> list[RankPlan]:
    """Per rank, what its result of ``plan`` holds when ``model`` (a
    :class:`~tidgap.profiling.models.Model`) split at ``boundaries`` ran it."""
    from tidgap.profiling.run import stage_modules
    from tidgap.runtime.reference import trainable

    state = {key: tuple(value.shape) for key, value in model.layers.state_dict().items()}
    ranks = []
    for rank, (instructions, again, (label, names, _)) in enumerate(
        zip(lower(plan), recomputes(plan), stage_modules(model, boundaries), strict=True)
    ):
        keep = set(names)
        ranks.append(
            RankPlan(
                rank,
                instructions,
                tail,
                label,
                names,
                again,
                {k: v for k, v in state.items() if k.split(".", 1)[0] in keep},
                {k: tuple(p.shape) for k, p in trainable(model.layers, names).items()},
            )
        )
    return ranks


def check_fits(result: dict[str, Any], expected: RankPlan, checked: bool) -> None:
    """Raise :class:`InputError` (naming the field) unless ``result`` (one that passed
    :func:`check_result`) holds what ``expected`` says, and with ``checked`` (the job
    checks gradients) the weights and gradients of its stage."""
    name, layers, again = expected.stage, expected.layers, expected.recompute
    _require(result["stage"] == name, "stage", f"is not stage {expected.rank}'s name {name!r}")
    _require(result["layers"] == layers, "layers", f"are not stage {expected.rank}'s {layers}")
    _require(
        result["recompute"] == again, "recompute", f"is not {str(again).lower()}, as the plan says"
    )
    want = [(i.kind, i.microbatch, *i.samples) for i in expected.instructions]
    if expected.tail:
        want.append(("tail", 0, 0, 0))
    for i, rows in enumerate(result["iterations"]):
        got = [tuple(row[:4]) for row in rows]
        if got != want:
            j = next(
                j for j in range(max(len(got), len(want))) if got[j : j + 1] != want[j : j + 1]
            )
            if j >= len(got):
                message = f"is missing: the plan's {want[j]}"
            elif j >= len(want):
                message = f"is {got[j]}, past the plan's {len(want)} records"
            else:
                message = f"is {got[j]}, not the plan's {want[j]}"
            _require(False, ("iterations", i, j), message)
    if not checked:
        return
    for field, shapes in (
        ("weights", expected.state),
        ("gradients", expected.trainable),
        ("stepped", expected.trainable if expected.tail else None),
    ):
        value = result.get(field)
        if shapes is None:
            _require(value is None, field, "is given for a job without an optimizer step")
            continue
        _require(value is not None, field, "is missing from a checked run")
        names = sorted(value.keys() ^ shapes.keys())
        _require(not names, field, f"differs from stage {expected.rank}'s in {names[:3]}")
        for key, tensor in value.items():
            shape = tuple(tensor.shape)
            _require(shape == shapes[key], (field, key), f"has shape {shape}, not {shapes[key]}")


def check_plan_results(
    folder: str, index: int, results: list[dict[str, Any]], expected: list[RankPlan], checked: bool
) -> None:
    """:func:`check_fits` for every rank's result of the job's plan ``index`` in
    ``folder``; an error names the rank's file."""
    from tidgap.runtime.worker import result_path

    for result, rank_plan in zip(results, expected, strict=True):
        try:
            check_fits(result, rank_plan, checked)
        except InputError as error:
            raise error.within(str(result_path(folder, rank_plan.rank, index))) from None
