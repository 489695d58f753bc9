"""Timeline pictures: non-empty PNG and SVG files of the expected size, clear errors."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.cli_helpers import case_named, describe, plan_document, run_cli, write_json
from tests.support.golden_ordered import ordered_document, ordered_entry, ordered_plan
from tests.support.strategies import ordered_plans, plans, problems
from tidgap import Problem, gpipe_plan, load_problem
from tidgap.schedules.families import baseline_timeline, plan_timeline
from tidgap.schedules.timeline import Timeline

pytest.importorskip("matplotlib", reason="pictures need the optional extra plot (matplotlib)")

from tidgap.outputs.gantt import (  # noqa: E402  (after the skip: needs matplotlib)
    HELD_COLOUR,
    STAGE_HEIGHT,
    _panel,
    draw,
    pixel_size,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    header = path.read_bytes()[:24]
    assert header[:8] == PNG_SIGNATURE
    assert header[12:16] == b"IHDR"
    return struct.unpack(">II", header[16:24])


def timelines() -> list[Timeline]:
    problem = load_problem("example:gpt1-14")
    return [
        plan_timeline(problem, gpipe_plan(problem, 6), label="plan"),
        baseline_timeline(problem, "gpipe", 8),
        baseline_timeline(problem, "1f1b", 8),
    ]


@pytest.mark.parametrize("count", [1, 3])
def test_png_has_the_expected_size_and_reads_back(tmp_path: Path, count: int) -> None:
    from matplotlib.image import imread

    shown = timelines()[:count]
    path = tmp_path / "timeline.png"
    draw(shown, path)
    assert path.stat().st_size > 10_000
    width, height = pixel_size(shown)
    assert png_size(path) == (width, height)
    pixels = imread(path)
    assert pixels.shape[:2] == (height, width)
    assert pixels[..., :3].std() > 0.05  # not a blank picture
    assert [p.name for p in tmp_path.iterdir()] == ["timeline.png"]  # no temporary left


def test_svg_is_written(tmp_path: Path) -> None:
    path = tmp_path / "timeline.svg"
    draw(timelines(), path)
    text = path.read_text(encoding="utf-8")
    assert "<svg" in text and text.rstrip().endswith("</svg>")
    assert "GPipe(8)" in text and "1F1B(8)" in text


def _inputs(tmp_path: Path) -> tuple[str, str]:
    case = case_named("med7_1")
    problem = write_json(tmp_path / "problem.json", case["problem"])
    plan = write_json(tmp_path / "plan.json", plan_document(case))
    return str(problem), str(plan)


@pytest.mark.parametrize(
    ("args", "panels"),
    [
        (["evaluate", "{problem}", "{plan}"], 1),
        (["evaluate", "{problem}", "--schedule", "1f1b", "-m", "4"], 1),
        (["compare", "{problem}", "{plan}"], 3),
        (["compare", "{problem}"], 2),
        (["search", "{problem}", "--generations", "2", "--population", "16", "-q"], 3),
    ],
)
def test_gantt_option(tmp_path: Path, args: list[str], panels: int) -> None:
    problem, plan = _inputs(tmp_path)
    picture = tmp_path / "out.png"
    filled = [a.format(problem=problem, plan=plan) for a in args]
    result = run_cli(*filled, "--gantt", str(picture))
    assert result.exit_code == 0, describe(result)
    assert f"picture written to {picture}" in result.stdout or "-q" in args
    expected = pixel_size([baseline_timeline(load_problem(problem), "gpipe", 4)] * panels)
    assert png_size(picture) == expected


@pytest.mark.parametrize("index", [0, 5, 7])
def test_gantt_of_an_ordered_plan(tmp_path: Path, index: int) -> None:
    """An ordered plan (order or windows) draws from its own timeline, above the baselines."""
    case = case_named("med7_1_mem")
    problem = write_json(tmp_path / "problem.json", case["problem"])
    plan = write_json(tmp_path / "plan.json", ordered_document(ordered_entry("med7_1_mem", index)))
    for command, panels in (("evaluate", 1), ("compare", 3)):
        picture = tmp_path / f"{command}.svg"
        result = run_cli(command, str(problem), str(plan), "--gantt", str(picture))
        assert result.exit_code == 0, describe(result)
        text = picture.read_text(encoding="utf-8")
        assert text.count("peak held ") == panels, command


@pytest.mark.parametrize("index", [0, 3, 5])
def test_held_lines_follow_the_timeline(index: int) -> None:
    """A step line per stage lane: from the bars' bottom (nothing held) toward their top
    (the whole batch), at the points of ``Timeline.held``."""
    from matplotlib.figure import Figure

    case = case_named("med7_1")
    problem = Problem.from_dict(case["problem"])
    timeline = plan_timeline(problem, ordered_plan(ordered_entry("med7_1", index)))
    ax = Figure().subplots()
    _panel(ax, timeline, timeline.iteration_time, 1000.0)
    lines = [line for line in ax.get_lines() if line.get_color() == HELD_COLOUR]
    assert len(lines) == problem.num_stages
    for s, line in enumerate(lines):
        points = timeline.held(s)
        assert list(line.get_xdata()) == [time for time, _ in points]
        held = [
            (s + STAGE_HEIGHT / 2 - y) / STAGE_HEIGHT * problem.batch_size for y in line.get_ydata()
        ]
        assert held == pytest.approx([h for _, h in points])


@pytest.mark.parametrize("name", ["out.jpg", "out", "out.PDF"])
def test_unsupported_format_is_bad_input(tmp_path: Path, name: str) -> None:
    problem, plan = _inputs(tmp_path)
    result = run_cli("evaluate", problem, plan, "--gantt", str(tmp_path / name))
    assert result.exit_code == 2, describe(result)
    assert result.stdout == ""
    assert result.stderr.startswith("tidgap: error: --gantt: ")
    assert ".png or .svg" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / name).exists()


def test_missing_matplotlib_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without matplotlib, --gantt says how to install it, before any search starts."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    problem, _ = _inputs(tmp_path)
    result = run_cli("search", problem, "--gantt", str(tmp_path / "x.png"), "--time-limit", "60")
    assert result.exit_code == 2, describe(result)
    assert result.stderr == (
        "tidgap: error: --gantt: matplotlib is not installed (the plot extra: pip install "
        "'tidgap[plot]')\n"
    )
    assert not (tmp_path / "x.png").exists()


def test_bad_plan_writes_no_picture(tmp_path: Path) -> None:
    problem, _ = _inputs(tmp_path)
    bad = write_json(
        tmp_path / "bad.json", {"format": "tidgap.plan/1", "forward": [[1]], "backward": [[1]]}
    )
    result = run_cli("evaluate", problem, str(bad), "--gantt", str(tmp_path / "x.png"))
    assert result.exit_code == 2, describe(result)
    assert not (tmp_path / "x.png").exists()


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(problem=problems(), data=st.data())
def test_any_plan_draws(
    tmp_path_factory: pytest.TempPathFactory, problem: Problem, data: st.DataObject
) -> None:
    """Any small problem draws, including one stage, free links and an all-zero timeline."""
    timeline = plan_timeline(problem, data.draw(plans(problem)))
    ordered = plan_timeline(problem, data.draw(ordered_plans(problem)), label="ordered")
    path = tmp_path_factory.mktemp("draw") / "plan.png"
    draw([timeline, ordered], path)
    assert png_size(path) == pixel_size([timeline, ordered])


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    """Pictures are written beside the target then moved: a failure leaves the old file."""
    from tidgap.outputs.atomic import replace_atomically

    target = tmp_path / "old.png"
    target.write_bytes(b"old")

    def fail(temporary: Path) -> None:
        temporary.write_bytes(b"half")
        raise RuntimeError("renderer failed")

    with pytest.raises(RuntimeError):
        replace_atomically(target, fail)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["old.png"]
