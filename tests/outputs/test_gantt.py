"""Timeline pictures: non-empty PNG and SVG files of the expected size, clear errors."""

from __future__ import annotations

import re
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
from tidgap.profiling.synth import synth_problem
from tidgap.schedules.families import baseline_timeline, plan_timeline
from tidgap.schedules.timeline import Timeline

pytest.importorskip("matplotlib", reason="pictures need the optional extra plot (matplotlib)")

from tidgap.outputs.gantt import (  # noqa: E402  (after the skip: needs matplotlib)
    COLOURS,
    DPI,
    GAP_INCHES,
    HELD_COLOUR,
    LANE_INCHES,
    LINK_COLOURS,
    MAX_HEIGHT_INCHES,
    NAME_CHARACTERS,
    STAGE_HEIGHT,
    _panel,
    draw,
    figure,
    lane_inches,
    pixel_size,
    shown_name,
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
    # labels are text elements (selectable, searchable), not glyph outlines
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", text)
    assert any("GPipe(8)" in label for label in labels)
    assert any("1F1B(8)" in label for label in labels)


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


def test_a_step_too_short_for_a_white_outline_is_outlined_in_its_colour() -> None:
    """A bar a pixel or two wide under a white outline was drawn white: a busy stage looked
    idle (a heterogeneous problem's fast stages). Bars under 4 pixels keep their colour."""
    from matplotlib.colors import to_rgba
    from matplotlib.figure import Figure

    problem = Problem.from_dict(case_named("med7_1")["problem"])
    timeline = baseline_timeline(problem, "gpipe", 4)
    span = timeline.iteration_time
    ax = Figure().subplots()
    _panel(ax, timeline, span, 1000.0)
    forward = to_rgba(COLOURS["F"])

    def edges_of_forwards() -> set[tuple[float, ...]]:
        """The edge colours of the collections of forward bars."""
        drawn = [c for c in ax.collections if tuple(c.get_facecolor()[0]) == forward]
        assert drawn and all(len(c.get_paths()) > 0 for c in drawn)
        return {tuple(c.get_edgecolor()[0]) for c in drawn}

    assert edges_of_forwards() == {to_rgba("white")}
    ax = Figure().subplots()
    _panel(ax, timeline, span, 20.0)  # a picture 20 pixels wide: every bar is narrow
    assert edges_of_forwards() == {forward}


@pytest.mark.parametrize("stages", [4, 32])
def test_panels_are_a_fixed_gap_apart_each_with_its_time_ticks(stages: int) -> None:
    """The gap between panels was a share of their height (413 pixels at 32 stages) and only
    the bottom panel had time ticks."""
    problem = Problem.from_dict(synth_problem(3, stages, 64, 1, 0.5, "affine", "s"))
    shown = [baseline_timeline(problem, "gpipe", 4), baseline_timeline(problem, "1f1b", 4)]
    drawn = figure(shown)
    height = drawn.get_figheight()
    upper, lower = (ax.get_position() for ax in drawn.axes[:2])
    assert (upper.y0 - lower.y1) * height == pytest.approx(GAP_INCHES, rel=1e-6)
    drawn.draw_without_rendering()
    for ax in drawn.axes[:2]:
        assert any(label.get_visible() and label.get_text() for label in ax.get_xticklabels())


@pytest.mark.parametrize(
    ("stages", "tail", "free_links"),
    [(1, 0.0, False), (3, 0.0, False), (3, 0.5, False), (3, 0.0, True)],
)
def test_the_legend_lists_what_is_drawn(stages: int, tail: float, free_links: bool) -> None:
    """One stage has no links, free links draw nothing and a problem without tails none:
    the legend listed them."""
    document = synth_problem(3, stages, 16, 1, 0.5, "affine", "s")
    for stage in document["stages"]:
        stage["tail"] = tail
    if free_links:
        free = {"affine": {"base": 0.0, "per_sample": 0.0}}
        document["links"] = [{"forward": free, "backward": free}] * (stages - 1)
    problem = Problem.from_dict(document)
    drawn = figure([baseline_timeline(problem, "1f1b", 4)])
    (legend,) = drawn.legends
    labels = [text.get_text() for text in legend.get_texts()]
    sending = stages > 1 and not free_links
    links = ["activations sent (link)", "gradients sent (link)"] if sending else []
    expected = ["forward", "backward", *(["tail"] if tail else []), *links]
    assert labels == [*expected, "samples held (lane = batch)", "iteration end"]


def test_long_stage_names_are_elided_in_the_middle_and_fit() -> None:
    """A name of 46 characters was cut at the picture's left edge: names over
    NAME_CHARACTERS keep their ends, and the margin widens to the longest shown."""
    name = "model.encoder.layers.0-model.encoder.layers.11"
    shown = shown_name(name)
    assert len(shown) == NAME_CHARACTERS and shown.startswith("model.encoder.lay")
    assert shown.endswith("encoder.layers.11") and "..." in shown
    assert shown_name("s0") == "s0"
    document = case_named("tiny7_1")["problem"]
    document["stages"][0]["name"] = name
    timeline = baseline_timeline(Problem.from_dict(document), "gpipe", 2)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure([timeline]))
    canvas.draw()
    for label in canvas.figure.axes[0].get_yticklabels():
        assert label.get_window_extent(canvas.get_renderer()).x0 >= 0, label.get_text()


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
        "tidgap: error: --gantt: matplotlib is not installed (tidgap's plot extra: pip install "
        "matplotlib, or pip install '.[plot]' in tidgap's checkout)\n"
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


def test_a_deep_pipeline_is_drawn_in_thinner_lanes_within_the_height_cap() -> None:
    """800 stages in two panels made a 1200 x 67,385 PNG (past what many viewers take) in
    108 s; lanes now thin to stay within MAX_HEIGHT_INCHES, the bars go without their sizes
    and every few stages are named, so names stay apart. A shallow pipeline is as before."""
    from matplotlib.figure import Figure

    problem = Problem.from_dict(synth_problem(0, 500, 8))
    deep = baseline_timeline(problem, "gpipe", 2)
    assert pixel_size([deep] * 3)[1] <= MAX_HEIGHT_INCHES * DPI
    lane = lane_inches([deep] * 3)
    assert lane < LANE_INCHES and lane_inches(timelines()) == LANE_INCHES
    ax = Figure().subplots()
    _panel(ax, deep, deep.iteration_time, 1000.0, lane)
    ticks = list(ax.get_yticks())
    assert 10 < len(ticks) < 500 and ticks[0] == 0 and ticks[1] > 1
    assert not [text for text in ax.texts if text.get_text().isdigit()]  # no sizes in bars


def test_bars_are_drawn_by_kind_each_outlined_one_first() -> None:
    """Collections drawn in the order their styles first came made a narrow backward's
    outline cover short tails (a 120-stage GPipe lost a fifth of its tail pixels)."""
    from matplotlib.colors import to_rgba
    from matplotlib.figure import Figure

    problem = Problem.from_dict(synth_problem(0, 12, 8))
    timeline = baseline_timeline(problem, "gpipe", 2)
    ax = Figure().subplots()
    _panel(ax, timeline, timeline.iteration_time, 60.0)  # narrow bars and wide ones
    faces = [tuple(c.get_facecolor()[0]) for c in ax.collections]
    kinds = [to_rgba(c) for c in [*COLOURS.values(), *LINK_COLOURS.values()]]
    order = [kinds.index(face) for face in faces]
    assert order == sorted(order) and len(set(order)) >= 3
