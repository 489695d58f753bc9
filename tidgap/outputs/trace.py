"""Timelines as a Chrome trace (JSON object format): opens in Perfetto and chrome://tracing.

Each timeline is a process; each stage a track (thread), and each link two tracks, one per
direction (1F1B may send both ways at once). Steps are complete events (``"ph": "X"``)
with ``ts`` and ``dur`` in microseconds; counter events (``"ph": "C"``) give the samples each
stage holds (:meth:`tidgap.schedules.timeline.Timeline.held`); metadata events (``"ph": "M"``)
name and order the processes and tracks. See ``docs/outputs.md``.
"""

from __future__ import annotations

from typing import Any

from tidgap.model.text import printable
from tidgap.schedules.timeline import Step, Timeline

#: Microseconds per time unit, for the units a trace can show exactly.
MICROSECONDS = {"us": 1.0, "ms": 1e3, "s": 1e6}
#: Tracks per stage: the stage, then its link to the next stage in each direction.
TRACKS_PER_STAGE = 3
KIND_NAMES = {"F": "forward", "B": "backward", "T": "tail"}


def microseconds_per_unit(time_unit: str) -> tuple[float, str | None]:
    """The scale to microseconds of ``time_unit`` and, if it is not known, a note saying
    that it was read as milliseconds."""
    if time_unit in MICROSECONDS:
        return MICROSECONDS[time_unit], None
    return 1e3, f"time unit {time_unit!r} is not us, ms or s: shown as if it were ms"


def microseconds(time: float, scale: float) -> float:
    """``time`` times ``scale`` (microseconds per unit), to the nanosecond: slices that meet
    (one's start is another's end) then meet exactly in a viewer's integer nanoseconds,
    where products rounded apart overlapped by 1 ns (Perfetto drops overlapping slices)."""
    return round(time * scale, 3)


def stage_track(s: int) -> int:
    """Track (``tid``) of stage ``s``."""
    return TRACKS_PER_STAGE * s


def link_track(link: int, kind: str) -> int:
    """Track of link ``link -> link+1``: ``"F"`` activations, ``"B"`` gradients."""
    return TRACKS_PER_STAGE * link + (1 if kind == "F" else 2)


def _event(step: Step, pid: int, tid: int, name: str, category: str, scale: float) -> dict:
    args: dict[str, Any] = {"start": step.start, "end": step.end}
    if step.samples is not None:
        args |= {"microbatch": step.microbatch, "samples": list(step.samples), "size": step.size}
    return {
        "ph": "X",
        "name": name,
        "cat": category,
        "pid": pid,
        "tid": tid,
        "ts": microseconds(step.start, scale),
        "dur": round(microseconds(step.end, scale) - microseconds(step.start, scale), 3),
        "args": args,
    }


def held_counter(s: int) -> str:
    """Name of stage ``s``'s counter of held samples (Perfetto shows ``stage 0 held samples``)."""
    return f"stage {s} held"


def _counters(timeline: Timeline, s: int, pid: int, scale: float) -> list[dict]:
    """Stage ``s``'s held samples as counter events: one at 0, then one per forward or
    backward end (``args.samples``: what it holds from then on)."""
    return [
        {
            "ph": "C",
            "name": held_counter(s),
            "pid": pid,
            "ts": microseconds(time, scale),
            "args": {"samples": held},
        }
        for time, held in timeline.held(s)
    ]


def _metadata(kind: str, pid: int, tid: int | None, **args: Any) -> dict:
    event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _process_events(timeline: Timeline, pid: int, scale: float) -> list[dict]:
    """Metadata and steps of one timeline, as process ``pid``."""
    events = [
        _metadata("process_name", pid, None, name=timeline.label),
        _metadata("process_sort_index", pid, None, sort_index=pid),
    ]
    for s, name in enumerate(timeline.stage_names):
        tid = stage_track(s)
        events.append(_metadata("thread_name", pid, tid, name=f"stage {s}: {name}"))
        events.append(_metadata("thread_sort_index", pid, tid, sort_index=tid))
        for step in timeline.stages[s]:
            label = "tail" if step.kind == "T" else f"{step.kind}{step.microbatch}"
            events.append(_event(step, pid, tid, label, KIND_NAMES[step.kind], scale))
        events += _counters(timeline, s, pid, scale)
    tracks = TRACKS_PER_STAGE * len(timeline.stage_names)  # a lane's offset
    for link, steps in enumerate(timeline.links):
        lanes = packed(steps)
        for kind, title in (("F", "activations"), ("B", "gradients")):
            ends = (link, link + 1) if kind == "F" else (link + 1, link)
            used = [lane for step, lane in zip(steps, lanes, strict=True) if step.kind == kind]
            for lane in range(max(used, default=0) + 1):
                tid = link_track(link, kind) + lane * tracks
                track = f"link {ends[0]}->{ends[1]} {title}" + (f" ({lane + 1})" if lane else "")
                events.append(_metadata("thread_name", pid, tid, name=track))
                events.append(_metadata("thread_sort_index", pid, tid, sort_index=tid))
        for step, lane in zip(steps, lanes, strict=True):
            name = f"send {step.kind}{step.microbatch}"
            tid = link_track(link, step.kind) + lane * tracks
            events.append(_event(step, pid, tid, name, "transfer", scale))
    return events


def packed(steps: list[Step]) -> list[int]:
    """Each of one link's ``steps``' lane: in its direction, the first lane whose last
    transfer ended by its start. A trace's slices on one track must nest, and measured
    transfers (a send's start to its receive's end) may overlap; the model's never do, so
    they all keep lane 0."""
    ends: dict[str, list[float]] = {"F": [], "B": []}
    lanes = [0] * len(steps)
    for i in sorted(range(len(steps)), key=lambda i: (steps[i].start, steps[i].end)):
        step, taken = steps[i], ends[steps[i].kind]
        lane = next((k for k, end in enumerate(taken) if end <= step.start), len(taken))
        taken[lane : lane + 1] = [step.end]
        lanes[i] = lane
    return lanes


def trace_document(timelines: list[Timeline], problem_name: str | None) -> dict[str, Any]:
    """The trace of ``timelines`` (one process each, in order); all share one time unit."""
    time_unit = timelines[0].time_unit
    scale, note = microseconds_per_unit(time_unit)
    events: list[dict] = []
    for pid, timeline in enumerate(timelines, start=1):
        events += _process_events(timeline, pid, scale)
    other: dict[str, Any] = {
        "generator": "tidgap",
        "problem": None if problem_name is None else printable(problem_name),  # as stages
        "time_unit": time_unit,
        "microseconds_per_unit": scale,
        "iteration_times": {t.label: t.iteration_time for t in timelines},
    }
    if note is not None:
        other["note"] = note
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}
