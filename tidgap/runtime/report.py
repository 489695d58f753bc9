"""What a run measured beside what the model predicts for the same plan.

The workers' results (:func:`tidgap.runtime.worker.run_rank`) hold each timed iteration's
records in seconds from the iteration's barrier. Here they become, in the problem's time
unit: the iteration times (an iteration ends at its last record's end on any rank), each
stage's busy time (its forwards, backwards and optimizer step, the tail), and a measured
:class:`~tidgap.schedules.timeline.Timeline` of the median iteration for the Chrome trace.
A transfer in that timeline runs from the sender's send to the end of the receiver's
receive (when the receiver had it, an upper bound on the transfer itself).
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidgap.model.errors import InputError, first_line
from tidgap.model.lists import stage_list, stages_doing
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.outputs.trace import microseconds_per_unit
from tidgap.runtime.pricing import run_prediction
from tidgap.runtime.recompute_memory import predicted_held_bytes
from tidgap.runtime.results_check import check_result
from tidgap.schedules.timeline import Step, Timeline, stage_names

#: A terminal's control sequence (PyTorch colours some of its messages).
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: One record as a worker saves it: kind, microbatch, lo, hi (0-based, hi excluded),
#: start, end (seconds from the iteration's barrier).
Row = tuple[str, int, int, int, float, float]
#: How many models with independently drawn op times the drawn replay takes the median
#: of (:func:`tidgap.runtime.replay.replays`).
REPLAY_DRAWS = 101
#: Record kinds that compute, with the timeline's step kind (``"tail"``: the optimizer step
#: a worker runs after its last backward, with ``--optimizer``).
COMPUTE = {"forward": "F", "backward": "B", "tail": "T"}
#: For each link direction: the timeline kind, the send kind on the sender, the receive kind
#: on the receiver, and the sender's offset from the link's upstream stage.
TRANSFERS = (("F", "send_forward", "recv_forward", 0), ("B", "send_backward", "recv_backward", 1))


#: Where torch.load's refusal of a file ``weights_only`` does not read says what it met
#: (before it, advice to load the file unsafely, which a rank's own file never needs).
WEIGHTS_ONLY_DETAIL = "WeightsUnpickler error:"


def unloadable_reason(error: BaseException) -> str:
    """What ``torch.load`` said of a file it cannot read, in one line: the unpickler's own
    detail where it refused it as ``weights_only`` (``Unsupported operand 103``), else the
    first line of its message."""
    text = ANSI_ESCAPE.sub("", str(error))
    if WEIGHTS_ONLY_DETAIL in text:
        detail = text.split(WEIGHTS_ONLY_DETAIL, 1)[1].strip()
        if detail:
            return detail.splitlines()[0].strip()
    return ANSI_ESCAPE.sub("", first_line(error))


def load_results(
    folder: str | os.PathLike[str], world_size: int, plan: int = 0
) -> list[dict[str, Any]]:
    """Every rank's saved result of the job's plan ``plan`` (0: the plan, ``k``: its
    ``k``-th alternate), by rank (see :func:`tidgap.runtime.worker.result_path`); a missing
    or unreadable one raises :class:`InputError` naming it."""
    import torch

    from tidgap.runtime.worker import result_path

    results = []
    for rank in range(world_size):
        path = result_path(folder, rank, plan)
        try:
            results.append(torch.load(path, weights_only=True))
        except FileNotFoundError:
            raise InputError(f"rank {rank} wrote no result", source=str(path)) from None
        except Exception as error:  # torch.load raises many kinds on a damaged file
            reason = unloadable_reason(error)
            raise InputError(
                f"cannot read rank {rank}'s result (not a file torch.load reads: {reason})",
                source=str(path),
            ) from None
        try:
            check_result(results[-1], rank)
        except InputError as error:
            raise error.within(str(path)) from None
    for field, what in (
        ("checked_in", "checked gradients in different modes"),
        ("transport", "sent chunks over different transports"),
    ):
        values = {result.get(field) for result in results}
        if len(values) > 1:
            message = f"the ranks {what} {sorted(map(str, values))}"
            raise InputError(message, source=str(folder))
    return results


def unit_per_second(time_unit: str) -> float:
    """How many of ``time_unit`` make a second (unknown units read as ms, as traces do)."""
    return 1e6 / microseconds_per_unit(time_unit)[0]


def iteration_end(ranks: Sequence[Sequence[Row]]) -> float:
    """When one iteration ended: the latest record end on any rank (seconds)."""
    return max(row[5] for rows in ranks for row in rows)


def stage_busy(rows: Sequence[Row]) -> float:
    """The time a rank's forwards, backwards and tail took in one iteration (seconds)."""
    return sum(row[5] - row[4] for row in rows if row[0] in COMPUTE)


def _step(kind: str, row: Row, start: float, end: float, scale: float) -> Step:
    """A timeline step of ``row``'s microbatch and samples (1-based inclusive); a tail has
    neither."""
    if kind == "T":
        return Step(kind, None, None, start * scale, end * scale)
    return Step(kind, row[1], (row[2] + 1, row[3]), start * scale, end * scale)


def measured_timeline(problem: Problem, ranks: Sequence[Sequence[Row]], label: str) -> Timeline:
    """One iteration's records (per rank) as a timeline in the problem's unit."""
    scale = unit_per_second(problem.time_unit)
    stages = [
        [_step(COMPUTE[row[0]], row, row[4], row[5], scale) for row in rows if row[0] in COMPUTE]
        for rows in ranks
    ]
    links: list[list[Step]] = []
    for link in range(len(ranks) - 1):
        steps = []
        for kind, send, receive, offset in TRANSFERS:
            sender, receiver = ranks[link + offset], ranks[link + 1 - offset]
            arrived = {row[1]: row[5] for row in receiver if row[0] == receive}
            steps += [
                _step(kind, row, row[4], max(row[4], arrived[row[1]]), scale)
                for row in sender
                if row[0] == send
            ]
        links.append(steps)
    return Timeline(
        label,
        problem.time_unit,
        stage_names(problem),
        stages,
        links,
        iteration_time=iteration_end(ranks) * scale,
    )


def _difference_text(difference: float) -> str:
    """``difference`` in a report line: three digits, or ``not finite`` (as in JSON)."""
    shown = _finite(difference)
    return shown if isinstance(shown, str) else f"{difference:.3g}"


def _finite(difference: float | None) -> float | str | None:
    """``difference`` as JSON holds it: ``"not finite"`` for NaN or infinity."""
    if difference is None or math.isfinite(difference):
        return difference
    return "not finite"


@dataclass(frozen=True)
class RunFigures:
    """One plan's run beside its prediction; times in ``time_unit``.

    ``iterations``: each timed iteration's measured time; ``busy[s]``: stage ``s``'s
    measured forwards and backwards per iteration (median over iterations); ``predicted``,
    ``predicted_busy[s]`` (the same in the model, its tail included) and
    ``predicted_timeline`` time each op as the runtime runs it
    (:func:`tidgap.runtime.pricing.run_prediction`); ``recompute[s]``: whether stage ``s``
    re-ran forwards; ``gradient_difference``: the largest relative difference of any
    parameter's gradient from one process (``None``: not checked); ``timeline``: the median
    iteration, measured; ``predicted_timeline``: the model's; ``replayed``: the model's time
    for the plan with this run's median op and transfer times (``None``: not asked, ``tidgap
    run --replay``), ``replayed_iterations`` its time for each timed iteration with that
    iteration's own and ``replayed_drawn`` the median of its times with each op and
    transfer timed by a random iteration's (:data:`REPLAY_DRAWS` draws;
    ``None``: not asked); ``peak_bytes[s]``: the most stage ``s`` held for
    its backwards (median over iterations; ``None`` from results without it),
    ``predicted_memory[s]`` its prediction and ``model_memory[s]`` the model's
    ``peak_memory`` (``None`` without ``activation_bytes``; the two differ on every stage
    where the profile says what stages hold besides their graphs,
    :func:`~tidgap.runtime.recompute_memory.predicted_held_bytes`); ``weight_difference``:
    the largest relative difference of any parameter after the checked iteration's
    optimizer step from one process's step of the same optimizer on the same gradients
    (``None``: no optimizer or not checked);
    ``redrawn[s]``: why recompute stage ``s``'s random draws could not be replayed per
    sample, so its recomputed forwards drew anew (``None``: replayed, or none to replay);
    ``checked_in``: the gradient check's mode, ``"train"`` (the pipeline's random draws
    replayed by the reference) or ``"eval"`` (``None``: not checked), and ``eval_reason``
    why eval mode (``None``: not said).
    """

    label: str
    time_unit: str
    iterations: list[float]
    predicted: float
    busy: list[float]
    predicted_busy: list[float]
    recompute: list[bool]
    gradient_difference: float | None
    timeline: Timeline
    predicted_timeline: Timeline
    replayed: float | None = None
    replayed_iterations: list[float] | None = None
    replayed_drawn: float | None = None
    peak_bytes: list[float] | None = None
    predicted_memory: list[float] | None = None
    model_memory: list[float] | None = None
    weight_difference: float | None = None
    redrawn: list[str | None] | None = None
    checked_in: str | None = None
    eval_reason: str | None = None

    @property
    def median(self) -> float:
        """The median measured iteration time (the lower of the two middle ones for an even
        count: the iteration the timeline shows)."""
        return statistics.median_low(self.iterations)

    @property
    def error(self) -> float | None:
        """``median / predicted - 1`` (positive: the run is slower than predicted);
        ``None`` when the prediction is 0."""
        return self.error_against(self.predicted) if self.predicted > 0 else None

    def error_against(self, time: float) -> float:
        """``median / time - 1``: the measured median's error against ``time`` (a
        prediction or a replay, > 0)."""
        return self.median / time - 1

    @property
    def iteration_replay_errors(self) -> list[float] | None:
        """Each timed iteration's measured time over its own replay, minus 1 (``None``
        without ``replayed_iterations``)."""
        if self.replayed_iterations is None:
            return None
        return [
            got / want - 1
            for got, want in zip(self.iterations, self.replayed_iterations, strict=True)
        ]

    def _per_iteration(self) -> dict[str, Any] | None:
        """``replay.per_iteration`` of :meth:`as_dict`: each iteration's replay, its error
        in per cent, and their median."""
        errors = self.iteration_replay_errors
        if errors is None:
            return None
        return {
            "predicted": list(self.replayed_iterations or []),
            "error_percent": [100 * error for error in errors],
            "median_error_percent": 100 * statistics.median(errors),
        }

    def _drawn(self) -> dict[str, Any] | None:
        """``replay.drawn`` of :meth:`as_dict`: the replay with drawn op times and the
        measured median's error against it, in per cent."""
        if self.replayed_drawn is None:
            return None
        return {
            "predicted": self.replayed_drawn,
            "error_percent": 100 * self.error_against(self.replayed_drawn),
        }

    def as_dict(self) -> dict[str, Any]:
        """The ``tidgap run --json`` object of this run (see :func:`format_figures`);
        ``max_weight_relative_difference`` only where an optimizer step was checked; a
        difference that is not finite (gradients with NaN or infinity: the check then
        fails) is ``"not finite"``, which JSON can hold."""
        weights = (
            {}
            if self.weight_difference is None
            else {"max_weight_relative_difference": _finite(self.weight_difference)}
        )
        return {
            "label": self.label,
            "time_unit": self.time_unit,
            "measured": {
                "median": self.median,
                "min": min(self.iterations),
                "max": max(self.iterations),
                "iterations": list(self.iterations),
            },
            "predicted": self.predicted,
            "error_percent": None if self.error is None else 100 * self.error,
            "busy": {"measured": list(self.busy), "predicted": list(self.predicted_busy)},
            "recompute": list(self.recompute),
            "redrawn": self.redrawn,
            "max_gradient_relative_difference": _finite(self.gradient_difference),
            "gradients_checked_in": self.checked_in,
            "gradient_eval_reason": self.eval_reason,
            **weights,
            "memory": {
                "measured": self.peak_bytes,
                "predicted": self.predicted_memory,
                "model": self.model_memory,
            },
            "replay": None
            if self.replayed is None
            else {
                "predicted": self.replayed,
                "error_percent": 100 * self.error_against(self.replayed),
                "per_iteration": self._per_iteration(),
                "drawn": self._drawn(),
            },
        }


def run_figures(
    problem: Problem,
    plan: Plan,
    results: Sequence[dict[str, Any]],
    label: str,
    gradient_difference: float | None = None,
) -> RunFigures:
    """The figures of ``plan``'s run from the ranks' ``results`` (by rank)."""
    scale = unit_per_second(problem.time_unit)
    iterations = list(zip(*(result["iterations"] for result in results), strict=True))
    times = [iteration_end(ranks) * scale for ranks in iterations]
    median = sorted(range(len(times)), key=times.__getitem__)[(len(times) - 1) // 2]
    busy = [
        statistics.median(stage_busy(ranks[s]) * scale for ranks in iterations)
        for s in range(problem.num_stages)
    ]
    evaluation, predicted = run_prediction(problem, plan, f"{label} predicted")
    held = [result.get("peak_bytes") for result in results]
    return RunFigures(
        label=label,
        time_unit=problem.time_unit,
        iterations=times,
        predicted=evaluation.iteration_time,
        busy=busy,
        predicted_busy=[predicted.busy(s) for s in range(problem.num_stages)],
        recompute=[bool(result["recompute"]) for result in results],
        redrawn=[result.get("redrawn") for result in results],
        checked_in=checked_in(results),
        eval_reason=eval_reason(results),
        gradient_difference=gradient_difference,
        timeline=measured_timeline(problem, iterations[median], f"{label} measured"),
        predicted_timeline=predicted,
        peak_bytes=None if None in held else [float(statistics.median(h)) for h in held],
        predicted_memory=predicted_held_bytes(problem, plan, evaluation.peak_memory),
        model_memory=evaluation.peak_memory,
    )


def checked_in(results: Sequence[dict[str, Any]]) -> str | None:
    """The mode of the ranks' checked iteration (one for all: :func:`load_results`):
    ``"train"`` or ``"eval"`` (results of workers from before train-mode checks name none:
    ``"eval"`` where they hold gradients), ``None`` where none ran."""
    mode = results[0].get("checked_in")
    return "eval" if mode is None and results[0].get("gradients") is not None else mode


def eval_reason(results: Sequence[dict[str, Any]]) -> str | None:
    """Why the checked iteration ran in eval mode: the first rank's reason that gives one."""
    return next((r["eval_reason"] for r in results if r.get("eval_reason")), None)


def merged_gradients(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every rank's saved parameter gradients in one dict (names are the whole model's)."""
    merged: dict[str, Any] = {}
    for result in results:
        merged.update(result["gradients"] or {})
    return merged


def _check_mode(figures: RunFigures) -> str:
    """The gradient check's mode in words, with the reason for eval mode."""
    if figures.checked_in == "train":
        return "train mode, the pipeline's random draws replayed"
    why = "" if figures.eval_reason is None else f"; {figures.eval_reason}"
    return f"eval mode: dropout off{why}"


def _megabytes(count: float) -> str:
    """``count`` bytes in MB (1e6), 4 significant digits."""
    return f"{count / 1e6:.4g} MB"


def _recompute_memory_note(figures: RunFigures, again: list[int]) -> str:
    """What the held-memory line says of the recomputing stages ``again``: predicted from
    what the profile measured they hold (the model's figure beside), or the model's figure
    where the profile does not say."""
    if not again or figures.predicted_memory is None or figures.model_memory is None:
        return ""
    if figures.predicted_memory == figures.model_memory:
        return (
            f" ({stages_doing(again, 'recompute')}: they hold their inputs and random draws, and "
            "one backward's activations at a time; the prediction there is the model's, every "
            "held sample's activations: the profile does not say what they hold)"
        )
    model = ", ".join(_megabytes(figures.model_memory[s]) for s in again)
    return (
        f" ({stages_doing(again, 'recompute')}: predicted from what the profile measured they "
        "hold, their inputs, random draws and received gradients, and one backward's working "
        "set at a time, as a run-priced search limits them; the model's figure, which a "
        f"model-priced search's memory limits use: {model})"
    )


def format_figures(figures: RunFigures, names: Sequence[str]) -> list[str]:
    """Text lines: measured (median, min, max) beside predicted, per-stage busy time,
    recomputing stages and the gradient (and optimizer step) check."""
    unit = figures.time_unit
    times = figures.iterations
    lines = [
        f"{figures.label}: measured {figures.median:.4g} {unit} median (min {min(times):.4g}, "
        f"max {max(times):.4g}, {len(times)} iteration(s)), predicted {figures.predicted:.4g} "
        f"{unit}: " + ("no error figure" if figures.error is None else f"{figures.error:+.1%}"),
        "  busy per iteration, measured / predicted: "
        + ", ".join(
            f"{name} {got:.4g} / {want:.4g} {unit}"
            for name, got, want in zip(names, figures.busy, figures.predicted_busy, strict=True)
        ),
    ]
    again = [s for s, flag in enumerate(figures.recompute) if flag]
    redrew = [s for s, why in enumerate(figures.redrawn or []) if why is not None]
    if again:
        kept = [s for s in again if s not in redrew]
        lines.append(
            f"  {stages_doing(again, 'recompute')}: each backward re-ran its forward from the "
            "stage's inputs (the prediction counts the recomputed forwards)"
            + (f"; random draws, if any, replayed per sample on {stage_list(kept)}" if kept else "")
        )
    for s, why in enumerate(figures.redrawn or []):
        if why is not None:
            lines.append(f"  stage {s} drew its recomputed forwards' random values anew: {why}")
    if figures.peak_bytes is not None:
        predicted = figures.predicted_memory or [None] * len(figures.peak_bytes)
        lines.append(
            "  held for backward at most, measured / predicted: "
            + ", ".join(
                f"{name} {_megabytes(got)} / " + ("-" if want is None else _megabytes(want))
                for name, got, want in zip(names, figures.peak_bytes, predicted, strict=True)
            )
            + _recompute_memory_note(figures, again)
        )
    if figures.replayed is not None:
        lines.append(
            f"  replayed with this run's median op and transfer times: {figures.replayed:.4g} "
            f"{unit}, measured {figures.error_against(figures.replayed):+.1%}"
        )
    if figures.replayed_drawn is not None:
        lines.append(
            "  replayed with each op and transfer timed by a random iteration of this run "
            f"(median of {REPLAY_DRAWS} draws): {figures.replayed_drawn:.4g} {unit}, measured "
            f"{figures.error_against(figures.replayed_drawn):+.1%}: the medians plus what "
            "the ops' variation costs, as if they varied independently"
        )
    errors = figures.iteration_replay_errors
    if errors:
        lines.append(
            "  replayed iteration by iteration, each with its own op and transfer times: "
            f"measured {statistics.median(errors):+.1%} (median; {min(errors):+.1%} to "
            f"{max(errors):+.1%}): what the model's dependencies and the runtime's gaps "
            "leave; the rest of the error above is in the op times (their medians, and what "
            "their variation costs)"
        )
    if figures.gradient_difference is not None:
        lines.append(
            f"  gradients ({_check_mode(figures)}): max relative difference "
            f"{_difference_text(figures.gradient_difference)} from one process on the whole "
            "batch"
        )
    if figures.weight_difference is not None:
        lines.append(
            f"  weights after one optimizer step: max relative difference "
            f"{_difference_text(figures.weight_difference)} from one process's step on the "
            "same gradients"
        )
    return lines


def speedup(plan: RunFigures, baseline: RunFigures) -> tuple[float, float]:
    """How many times faster ``plan`` is than ``baseline``: measured (medians), predicted."""
    return baseline.median / plan.median, baseline.predicted / plan.predicted


def paired_speedups(plan: RunFigures, baseline: RunFigures) -> list[float]:
    """``baseline``'s time over ``plan``'s in each timed iteration: the two ran in turn,
    iteration by iteration, so each pair met the same moment of the machine."""
    return [b / p for p, b in zip(plan.iterations, baseline.iterations, strict=True)]


def paired_rank(paired: list[float]) -> bool:
    """Whether paired speedups rank the two plans: every pair puts the same one ahead."""
    return min(paired) > 1 or max(paired) < 1


def speedup_record(plan: RunFigures, baseline: RunFigures, same: bool = False) -> dict[str, Any]:
    """:func:`speedup` and :func:`paired_speedups` (``min``, ``median``, ``max``; ``ranked``:
    :func:`paired_rank`) for ``--json``; ``same_plan``: whether the two run one schedule
    (``same``, :meth:`~tidgap.model.plan.Plan.schedule`)."""
    measured, predicted = speedup(plan, baseline)
    paired = paired_speedups(plan, baseline)
    return {
        "measured": measured,
        "predicted": predicted,
        "paired": {
            "min": min(paired),
            "median": statistics.median(paired),
            "max": max(paired),
            "ranked": paired_rank(paired),
        },
        "same_plan": same,
    }


def speedup_line(plan: RunFigures, baseline: RunFigures, same: bool = False) -> str:
    """:func:`speedup` as a text line, with the range of :func:`paired_speedups` (over two
    iterations or more) and, where it straddles 1, that this run does not rank them; where
    the two run one schedule (``same``), that their difference is the machine's noise."""
    measured, predicted = speedup(plan, baseline)
    paired = paired_speedups(plan, baseline)
    spread = ""
    if len(paired) > 1:
        spread = f" ({min(paired):.3f}x to {max(paired):.3f}x over {len(paired)} paired iterations)"
    line = (
        f"  {plan.label} vs {baseline.label}: speedup measured {measured:.3f}x{spread}, "
        f"predicted {predicted:.3f}x"
    )
    if same:
        line += ": the same plan (what differs is the machine's noise)"
    elif len(paired) > 1 and not paired_rank(paired):
        line += ": the iterations do not rank the two (some put each ahead)"
    return line
