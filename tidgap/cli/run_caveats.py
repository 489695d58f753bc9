"""``tidgap run``'s warnings: reasons the prediction may not describe the run (another
model, split, device or optimizer than the profiled one; recomputing stages timed
otherwise)."""

from __future__ import annotations

from typing import Any

from tidgap.cli.workers import recorded_boundaries
from tidgap.host import usable_cores
from tidgap.model.lists import stages_doing
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.model.text import brief, counted

#: Where ``tidgap profile --optimizer`` records the optimizer it timed into the tails.
OPTIMIZER_PATH = ("source", "timing", "optimizer")


def other_model(problem: Problem, model: Any) -> tuple[str, str] | None:
    """The settings (``name`` and the model's options) in which ``model`` differs from the
    one ``problem`` records as profiled (``source.model``; one that only one of them has,
    such as a ``vocab``, differs too), as the profiled one's and ``model``'s (``"name gpt,
    layers 4"``, ``"vocab unset"``); ``None`` where none differs or it records none."""
    recorded = problem.source_fields.get("model")
    if not isinstance(recorded, dict):
        return None
    wanted = {"name": model.name, **model.config}
    keys = wanted.keys() | (recorded.keys() - {"parameters"})  # that one is counted, not set
    differ = sorted(key for key in keys if recorded.get(key) != wanted.get(key))
    if not differ:
        return None

    def setting(values: dict[str, Any], key: str) -> str:
        return f"{key} {brief(values[key])}" if key in values else f"{key} unset"

    was = ", ".join(setting(recorded, key) for key in differ)
    now = ", ".join(setting(wanted, key) for key in differ)
    return was, now


def caveats(
    problem: Problem,
    spec: str,
    plan: Plan,
    model: Any,
    optimizer: str | None = None,
    device: str = "cpu",
    boundaries: list[int] | None = None,
    float64: bool = False,
) -> list[str]:
    """Reasons the prediction may not describe this run: a model other than the profiled
    one, stage ``boundaries`` other than the split its times were measured on, recomputing
    stages neither the profile nor a calibration timed that way, a calibration entry left
    out as malformed (:attr:`Problem.unused_calibration`), another ``device`` than the
    profiled one, an ``optimizer`` step the stages' tails leave out (all 0) or another
    optimizer than the profiled one, and a run in ``float64`` (profiles are float32's)."""
    from tidgap.runtime.lowering import recomputes

    found = []
    if (other := other_model(problem, model)) is not None:
        found.append(f"{spec}: source.model: profiled with {other[0]}, running {other[1]}")
    timed = recorded_boundaries(problem)
    if boundaries is not None and isinstance(timed, list) and timed != boundaries:
        found.append(
            f"{spec}: source.split: its times were measured with boundaries {brief(timed)}, "
            f"this run splits at {boundaries} (--split): the prediction uses the other "
            "split's op times"
        )
    flags = recomputes(plan)
    again = [s for s, flag in enumerate(flags) if flag]
    profiled_again = problem.profiled_with_recompute
    if again and not profiled_again and problem.recompute_times is None:
        found.append(
            f"{stages_doing(again, 'recompute')} forwards, and {spec} was neither calibrated with "
            "recomputing plans (tidgap calibrate) nor profiled with --recompute: the "
            "prediction prices each of their backwards as the profiled forward plus backward "
            "of its samples"
        )
    stored = [s for s, flag in enumerate(flags) if not flag]
    if profiled_again and stored:
        found.append(
            f"{stages_doing(stored, 'run')} backward on stored graphs, but {spec} was profiled "
            "with --recompute: the prediction counts a forward in each of their backwards"
        )
    found += [f"{spec}: {reason}" for reason in problem.unused_calibration]
    if float64:
        found.append(
            f"--float64: tidgap profile and calibrate measure float32, so {spec}'s op times "
            "and bytes are float32's: the prediction's time and memory describe a float32 "
            "run (this one holds about twice the bytes)"
        )
    return [
        *found,
        *device_caveats(problem, spec, device),
        *optimizer_caveats(problem, spec, optimizer),
    ]


def device_caveats(problem: Problem, spec: str, device: str) -> list[str]:
    """:func:`caveats` of the device: a run on another kind of device than the profile's
    (``source.device``) is predicted with the other device's op times."""
    profiled = problem.source_fields.get("device")
    if isinstance(profiled, str) and profiled != device:
        return [
            f"{spec}: source.device: profiled on {brief(profiled)}, this run computes on "
            f"{device}: the prediction uses {brief(profiled)} op times (profile or calibrate "
            f"with --device {device})"
        ]
    return []


def optimizer_caveats(problem: Problem, spec: str, optimizer: str | None) -> list[str]:
    """:func:`caveats` of the optimizer step: one the prediction does not count (every
    tail 0), or a step other than the one ``tidgap profile --optimizer`` timed."""
    if optimizer is not None and all(stage.tail == 0 for stage in problem.stages):
        return [
            f"{spec}: every stage's tail is 0, so the prediction does not count the "
            f"{optimizer} step (profile with --optimizer {optimizer})"
        ]
    timing = problem.source_fields.get("timing")
    timed = timing.get("optimizer") if isinstance(timing, dict) else None
    name = timed.get("name") if isinstance(timed, dict) else None
    if name is not None and name != optimizer:
        running = f"steps with {optimizer}" if optimizer else "steps nothing (no --optimizer)"
        where = ".".join(OPTIMIZER_PATH)
        return [f"{spec}: {where}: the tails time {brief(name)}, this run {running}"]
    return []


def shared_cores(processes: int, threads: int, device: str) -> str | None:
    """Why a run of ``processes`` stage processes of ``threads`` threads each on ``device``
    here measures more than the prediction: on the CPU, fewer usable cores than threads in
    all (the stages take turns, which the profile's times did not); ``None`` otherwise."""
    cores = usable_cores()
    if device != "cpu" or processes * threads <= cores:
        return None
    fewer = "fewer --threads, or " if threads > 1 else ""
    return (
        f"{processes} stage processes of {counted(threads, 'thread')} share "
        f"{counted(cores, 'usable core')} (this process's CPU affinity): they take turns, so "
        f"their ops take longer than on cores of their own, as profiled; give each stage its "
        f"own ({fewer}more cores)"
    )
