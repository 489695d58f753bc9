"""Chrome traces: valid JSON with the documented fields, real durations in microseconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.cli_helpers import case_named, describe, plan_document, run_cli, write_json
from tests.support.strategies import ordered_plans, plans, problems
from tidgap import Problem, load_problem
from tidgap.outputs.trace import (
    TRACKS_PER_STAGE,
    held_counter,
    link_track,
    stage_track,
    trace_document,
)
from tidgap.profiling.synth import synth_problem
from tidgap.schedules.families import baseline_timeline, plan_timeline
from tidgap.schedules.timeline import Step, Timeline

PROPERTY = settings(max_examples=80, deadline=None, derandomize=True, database=None)


def check_trace(document: dict[str, Any], timelines: list[Timeline], scale: float) -> None:
    """The documented fields; on each stage track the durations add up to the stage's busy
    time; every track an event uses is named."""
    text = json.dumps(document, allow_nan=False)  # strict JSON: no NaN or Infinity
    assert json.loads(text) == document
    assert document["displayTimeUnit"] in ("ms", "ns")
    events = document["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert list(processes.values()) == [t.label for t in timelines]
    for event in complete:
        assert {"name", "cat", "pid", "tid", "ts", "dur", "args"} <= set(event)
        assert event["dur"] >= 0 and event["ts"] >= 0
        assert (event["pid"], event["tid"]) in named
        if event["cat"] != "tail":
            first, last = event["args"]["samples"]
            assert 1 <= first <= last
            assert event["args"]["size"] == last - first + 1
    for pid, timeline in enumerate(timelines, start=1):
        for s in range(timeline.num_stages):
            track = [e for e in complete if e["pid"] == pid and e["tid"] == stage_track(s)]
            durations = [e["dur"] for e in track]
            rounding = 1e-3 * len(durations) + 1e-6  # to the nanosecond each
            assert sum(durations) == pytest.approx(timeline.busy(s) * scale, abs=rounding)
            assert len(durations) == len(timeline.stages[s])
            check_no_overlap(track)
        lanes = TRACKS_PER_STAGE * timeline.num_stages  # a further lane's track offset
        for link, steps in enumerate(timeline.links):
            tracks = {link_track(link, "F"), link_track(link, "B")}
            sent = [e for e in complete if e["pid"] == pid and e["tid"] % lanes in tracks]
            assert len(sent) == len(steps)
    check_counters(document, timelines, scale)


def nanoseconds(microseconds: float) -> int:
    """A viewer's integer nanoseconds of a trace's ``ts`` or ``dur``."""
    return round(microseconds * 1000)


def check_no_overlap(track: list[dict[str, Any]]) -> None:
    """Slices of one track, in integer nanoseconds as a viewer reads ``ts`` and ``dur``
    apart, do not overlap (Perfetto drops a slice that overlaps another on its track)."""
    ordered = sorted(track, key=lambda e: e["ts"])
    for before, after in zip(ordered, ordered[1:], strict=False):
        end = nanoseconds(before["ts"]) + nanoseconds(before["dur"])
        assert end <= nanoseconds(after["ts"]), (before, after)


def test_slices_that_meet_do_not_overlap_in_nanoseconds() -> None:
    """1F1B(256) on 16 stages: thousands of slices that meet, each ``ts`` and ``dur`` a
    product rounded apart overlapped by a nanosecond (hundreds of pairs)."""
    problem = Problem.from_dict(synth_problem(3, 16, 512, 1, 0.5, "table", "s16"))
    timeline = baseline_timeline(problem, "1f1b", 256)
    document = trace_document([timeline], problem.name)
    for s in range(problem.num_stages):
        track = [
            e for e in document["traceEvents"] if e["ph"] == "X" and e["tid"] == stage_track(s)
        ]
        check_no_overlap(track)


def check_counters(document: dict[str, Any], timelines: list[Timeline], scale: float) -> None:
    """Each stage of each process has a counter of held samples, in time order, with a value
    at every change of :meth:`Timeline.held` and no other counter."""
    counters = [e for e in document["traceEvents"] if e["ph"] == "C"]
    expected = 0
    for pid, timeline in enumerate(timelines, start=1):
        for s in range(timeline.num_stages):
            mine = [e for e in counters if e["pid"] == pid and e["name"] == held_counter(s)]
            assert [(e["ts"], e["args"]) for e in mine] == [
                (round(time * scale, 3), {"samples": held}) for time, held in timeline.held(s)
            ]
            expected += len(mine)
    assert len(counters) == expected


@PROPERTY
@given(problem=problems(), data=st.data())
def test_trace_of_a_plan(problem: Problem, data: st.DataObject) -> None:
    timeline = plan_timeline(problem, data.draw(plans(problem)))
    check_trace(trace_document([timeline], problem.name), [timeline], 1e3)


@PROPERTY
@given(problem=problems(), data=st.data())
def test_trace_of_an_ordered_plan(problem: Problem, data: st.DataObject) -> None:
    timeline = plan_timeline(problem, data.draw(ordered_plans(problem)))
    check_trace(trace_document([timeline], problem.name), [timeline], 1e3)


def test_counters_show_one_f_one_b_holding_less_than_gpipe() -> None:
    """On gpt1-14 with 8 microbatches, GPipe's counters reach the batch on every stage,
    1F1B's the ``min(S-s, m)`` microbatches model.md gives."""
    problem = load_problem("example:gpt1-14")
    timelines = [baseline_timeline(problem, "gpipe", 8), baseline_timeline(problem, "1f1b", 8)]
    events = [e for e in trace_document(timelines, None)["traceEvents"] if e["ph"] == "C"]
    S, per = problem.num_stages, problem.batch_size // 8
    for pid, peaks in ((1, [problem.batch_size] * S), (2, [per * (S - s) for s in range(S)])):
        for s, peak in enumerate(peaks):
            values = [
                e["args"]["samples"]
                for e in events
                if (e["pid"], e["name"]) == (pid, held_counter(s))
            ]
            assert max(values) == peak and values[-1] == 0


@pytest.mark.parametrize(
    ("unit", "scale", "noted"),
    [("us", 1, False), ("ms", 1e3, False), ("s", 1e6, False), ("cycles", 1e3, True)],
)
def test_time_units(unit: str, scale: float, noted: bool) -> None:
    """us, ms and s convert exactly; any other unit is shown as ms and the trace says so."""
    data = case_named("tiny7_1")["problem"] | {"time_unit": unit}
    problem = Problem.from_dict(data)
    timelines = [baseline_timeline(problem, "gpipe", 2), baseline_timeline(problem, "1f1b", 2)]
    document = trace_document(timelines, problem.name)
    check_trace(document, timelines, scale)
    assert document["otherData"]["microseconds_per_unit"] == scale
    assert ("note" in document["otherData"]) == noted
    first = next(e for e in document["traceEvents"] if e["ph"] == "X")
    step = timelines[0].stages[0][0]
    assert first["ts"] == round(step.start * scale, 3)  # to the nanosecond
    assert first["dur"] == pytest.approx(step.duration * scale, abs=1e-3)


def assert_no_track_overlaps(document: dict[str, Any]) -> None:
    """Slices on one track follow each other (Perfetto drops slices that overlap)."""
    by_track: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for event in (e for e in document["traceEvents"] if e["ph"] == "X"):
        by_track.setdefault((event["pid"], event["tid"]), []).append(event)
    for track in by_track.values():
        track.sort(key=lambda e: e["ts"])
        for before, after in zip(track, track[1:], strict=False):
            assert after["ts"] >= before["ts"] + before["dur"] - 1e-6


def test_one_f_one_b_sends_both_ways_on_separate_tracks() -> None:
    """1F1B sends activations and gradients over a link at once: they get two tracks, so
    events on one track never overlap."""
    problem = load_problem("example:hetero-8")
    document = trace_document([baseline_timeline(problem, "1f1b", 16)], None)
    assert_no_track_overlaps(document)
    assert not any("(2)" in e["args"].get("name", "") for e in document["traceEvents"])


def test_overlapping_measured_transfers_get_a_track_each() -> None:
    """A measured transfer lasts from its send's start to its receive's end, so two may
    overlap (a late receiver): the second goes to a second track of the link's direction
    (they were partly overlapping slices on one track, which Perfetto drops)."""
    sent = [Step("F", 0, (1, 2), 0.6, 1.6), Step("F", 1, (3, 4), 1.4, 1.7)]
    sent.append(Step("B", 0, (1, 2), 2.0, 2.5))
    stages = [[Step("F", 0, (1, 4), 0.0, 0.5)], [Step("F", 0, (1, 4), 1.7, 2.0)]]
    timeline = Timeline("run", "ms", ["a", "b"], stages, [sent], 2.5)
    document = trace_document([timeline], None)
    assert_no_track_overlaps(document)
    check_trace(document, [timeline], 1e3)
    named = {
        e["tid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"
    }
    tracks = {e["name"]: named[e["tid"]] for e in document["traceEvents"] if e["ph"] == "X"}
    assert tracks["send F0"] == "link 0->1 activations"
    assert tracks["send F1"] == "link 0->1 activations (2)"
    assert tracks["send B0"] == "link 1->0 gradients"


@pytest.mark.parametrize("command", ["evaluate", "compare", "search"])
def test_trace_option(tmp_path: Path, command: str) -> None:
    case = case_named("med7_1")
    problem = write_json(tmp_path / "problem.json", case["problem"])
    plan = write_json(tmp_path / "plan.json", plan_document(case))
    trace = tmp_path / "trace.json"
    args = {
        "evaluate": ["evaluate", str(problem), str(plan)],
        "compare": ["compare", str(problem), str(plan)],
        "search": ["search", str(problem), "--generations", "2", "--population", "16", "-q"],
    }[command]
    result = run_cli(*args, "--trace", str(trace))
    assert result.exit_code == 0, describe(result)
    document = json.loads(trace.read_text(encoding="utf-8"))
    processes = [e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"]
    if command == "evaluate":
        assert processes == ["plan"]
    else:
        assert [name.split("(")[0] for name in processes] == [
            "plan" if command == "compare" else "tidgap",
            "GPipe",
            "1F1B",
        ]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_unwritable_trace_is_bad_input(tmp_path: Path) -> None:
    case = case_named("med7_1")
    problem = write_json(tmp_path / "problem.json", case["problem"])
    plan = write_json(tmp_path / "plan.json", plan_document(case))
    result = run_cli(
        "evaluate", str(problem), str(plan), "--trace", str(tmp_path / "no" / "t.json")
    )
    assert result.exit_code == 2, describe(result)
    assert result.stderr.startswith("tidgap: error: ") and len(result.stderr.splitlines()) == 1


def test_the_problems_name_is_escaped_as_the_stages_are() -> None:
    """``otherData.problem`` held the name's escape and newline raw."""
    problem = load_problem("example:tiny-2")
    timeline = baseline_timeline(problem, "gpipe", 2)
    document = trace_document([timeline], "bad\x1b[31m\nname")
    assert document["otherData"]["problem"] == "bad\\x1b[31m\\nname"
