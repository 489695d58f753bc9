"""Timeline pictures (PNG or SVG) with matplotlib, the optional extra ``plot``.

One panel per timeline, all on the same time axis: a lane per stage (forwards and
backwards in two colours, the tail in grey, microbatch sizes written where they fit), a
thin lane between neighbouring stages for the link transfers (activations above,
gradients below), a thin step line across each stage's lane for the samples it holds
(:meth:`tidgap.schedules.timeline.Timeline.held`: the lane's bottom is none, its top the
whole batch), and a dashed line at the end of the iteration.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from tidgap.analysis.report import report
from tidgap.model.errors import InputError, first_line
from tidgap.outputs.atomic import Producer, replace_atomically
from tidgap.schedules.timeline import Step, Timeline

FORMATS = (".png", ".svg")
MISSING = (
    "matplotlib is not installed (tidgap's plot extra: pip install matplotlib, or "
    "pip install '.[plot]' in tidgap's checkout)"
)
COLOURS = {"F": "#4c72b0", "B": "#dd8452", "T": "#8c8c8c", "end": "#c44e52"}
LINK_COLOURS = {"F": "#55a868", "B": "#8172b3"}
HELD_COLOUR = "#222222"
#: Figure width and dots per inch; heights follow the number of panels and stages.
WIDTH_INCHES = 12.0
DPI = 100
LANE_INCHES = 0.42
#: The tallest picture at :data:`LANE_INCHES` a stage (16,000 pixels): deeper pipelines get
#: thinner lanes (800 stages in two panels made a 1200 x 67,385 PNG, past the 65,535
#: pixels many viewers take, in 108 s), down to this many inches a lane.
MAX_HEIGHT_INCHES = 160.0
MIN_LANE_INCHES = 0.04
PANEL_EXTRA_INCHES = 0.65
LEGEND_INCHES = 0.55
#: Between panels: the panel above's time ticks and the title of the one below.
GAP_INCHES = 0.55
FONT_SIZE = 7.0
STAGE_HEIGHT = 0.62
LINK_HEIGHT = 0.14
#: A compute bar narrower than this (pixels) is outlined in its own colour, not white: a
#: white outline would cover it.
OUTLINED_PIXELS = 4.0
#: Stage names longer than this are shown with their middle elided.
NAME_CHARACTERS = 40


def check_picture_path(path: str) -> None:
    """Raise :class:`InputError` (on ``--gantt``) unless ``path`` ends in .png or .svg and
    matplotlib can be imported: checked before any long work."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        shown = suffix or "none"
        raise InputError(
            f"{path}: unsupported picture format ({shown}); use .png or .svg", source="--gantt"
        )
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(MISSING, source="--gantt") from None
    except ValueError as error:  # its settings: MPLBACKEND=nonexistent
        backend = os.environ.get("MPLBACKEND")
        if backend is None:
            raise InputError(f"matplotlib does not start: {first_line(error)}") from None
        raise InputError(
            f"{backend!r} is not a matplotlib backend (unset it: tidgap draws without one)",
            source="MPLBACKEND",
        ) from None


def lane_inches(timelines: list[Timeline]) -> float:
    """Height in inches of a stage's lane in the picture of ``timelines``:
    :data:`LANE_INCHES`, thinner where the picture would pass :data:`MAX_HEIGHT_INCHES`
    (down to :data:`MIN_LANE_INCHES`)."""
    stages = sum(t.num_stages for t in timelines)
    extras = len(timelines) * PANEL_EXTRA_INCHES + LEGEND_INCHES
    return max(MIN_LANE_INCHES, min(LANE_INCHES, (MAX_HEIGHT_INCHES - extras) / stages))


def _panel_inches(timeline: Timeline, lane: float) -> float:
    """Height in inches of one timeline's panel, at ``lane`` inches a stage."""
    return lane * timeline.num_stages + PANEL_EXTRA_INCHES


def figure_size(timelines: list[Timeline]) -> tuple[float, float]:
    """``(width, height)`` in inches of the picture of ``timelines``."""
    lane = lane_inches(timelines)
    panels = sum(_panel_inches(t, lane) for t in timelines)
    return WIDTH_INCHES, round(panels + LEGEND_INCHES, 2)


def pixel_size(timelines: list[Timeline]) -> tuple[int, int]:
    """``(width, height)`` in pixels of the PNG picture of ``timelines``."""
    width, height = figure_size(timelines)
    return round(width * DPI), round(height * DPI)


#: Bars to draw, by their style ``(face colour, edge colour, line width)``: each a
#: rectangle's corners ``[(x0, y0), (x1, y0), (x1, y1), (x0, y1)]``, in data units.
Bars = dict[tuple[str, str, float], list[list[tuple[float, float]]]]


def _bars(
    bars: Bars,
    steps: list[Step],
    y: float,
    height: float,
    colours: dict[str, str],
    outlined: float | None,
) -> None:
    """Add to ``bars`` one horizontal bar per step, centred on ``y``: outlined in white
    where at least ``outlined`` time units long (neighbours stay apart), else (and with
    ``None`` always) in its own colour, so that even the shortest step shows as a line."""
    low, high = y - height / 2, y + height / 2
    for step in steps:
        colour = colours.get(step.kind)
        if colour is None:
            continue
        wide = outlined is not None and step.duration >= outlined
        style = (colour, "white", 0.4) if wide else (colour, colour, 0.7)
        corners = [(step.start, low), (step.end, low), (step.end, high), (step.start, high)]
        bars.setdefault(style, []).append(corners)


def _draw_bars(ax: Any, bars: Bars) -> None:
    """One collection per style of ``bars`` (a patch per bar took 11 of 13 s to draw 200
    stages), in the order bars were drawn one by one: by kind (:data:`COLOURS`, then
    :data:`LINK_COLOURS`), each kind's white-outlined ones first, so that a narrow bar's
    outline covers no shorter tail."""
    from matplotlib.collections import PolyCollection

    kinds = [*COLOURS.values(), *LINK_COLOURS.values()]
    drawn = sorted(bars.items(), key=lambda item: (kinds.index(item[0][0]), item[0][1] != "white"))
    for (face, edge, line), rectangles in drawn:
        ax.add_collection(
            PolyCollection(rectangles, facecolors=face, edgecolors=edge, linewidths=line)
        )


def _labels(ax: Any, steps: list[Step], y: float, units_per_pixel: float) -> None:
    """The microbatch size inside each compute bar wide enough to hold it."""
    char_pixels = FONT_SIZE * 0.62 * DPI / 72
    for step in steps:
        if step.samples is None:
            continue
        text = str(step.size)
        if step.duration / units_per_pixel >= (len(text) + 1) * char_pixels:
            middle = (step.start + step.end) / 2
            ax.text(middle, y, text, ha="center", va="center", fontsize=FONT_SIZE, color="white")


def shown_name(name: str) -> str:
    """``name``, or its first and last characters around ``...`` where it is longer than
    :data:`NAME_CHARACTERS`."""
    if len(name) <= NAME_CHARACTERS:
        return name
    half = (NAME_CHARACTERS - 3) // 2
    return f"{name[:half]}...{name[-(NAME_CHARACTERS - 3 - half) :]}"


def left_margin(timelines: list[Timeline]) -> float:
    """The share of the picture's width left of the panels: room for the longest stage
    name as shown (about 0.6 of the font size per character) and its tick."""
    longest = max(len(shown_name(name)) for t in timelines for name in t.stage_names)
    inches = longest * (FONT_SIZE + 1) * 0.6 / 72 + 0.25
    return max(0.1, inches / WIDTH_INCHES)


def batch_size(timeline: Timeline) -> int:
    """Samples in the batch: the sizes of stage 0's forwards."""
    return sum(step.size for step in timeline.stages[0] if step.kind == "F")


def _held(ax: Any, points: list[tuple[float, int]], s: int, batch: int) -> None:
    """Stage ``s``'s held samples (``(time, samples)`` steps) as a step line over its lane:
    none at the bottom of the bars, ``batch`` at their top."""
    heights = [s + STAGE_HEIGHT * (0.5 - held / max(batch, 1)) for _, held in points]
    times = [time for time, _ in points]
    ax.step(times, heights, where="post", color=HELD_COLOUR, linewidth=0.9)


def _panel(
    ax: Any, timeline: Timeline, span: float, width_pixels: float, lane: float = LANE_INCHES
) -> None:
    """Draw ``timeline`` on ``ax``: stage ``s`` is lane ``s`` from the top, ``lane`` inches
    high; where it is too thin for text, the bars go without their sizes and only every
    few stages are named."""
    units_per_pixel = span / width_pixels
    text_pixels = (FONT_SIZE + 1) * DPI / 72
    sized = STAGE_HEIGHT * lane * DPI >= text_pixels
    batch = batch_size(timeline)
    held = [timeline.held(s) for s in range(timeline.num_stages)]
    bars: Bars = {}
    for s, steps in enumerate(timeline.stages):
        _bars(bars, steps, s, STAGE_HEIGHT, COLOURS, OUTLINED_PIXELS * units_per_pixel)
        if sized:
            _labels(ax, steps, s, units_per_pixel)
        _held(ax, held[s], s, batch)
    for link, steps in enumerate(timeline.links):
        for kind, offset in (("F", -LINK_HEIGHT / 2), ("B", LINK_HEIGHT / 2)):
            chosen = [step for step in steps if step.kind == kind]
            _bars(bars, chosen, link + 0.5 + offset, LINK_HEIGHT, {kind: LINK_COLOURS[kind]}, None)
    _draw_bars(ax, bars)
    end = timeline.iteration_time
    ax.axvline(end, color=COLOURS["end"], linestyle="--", linewidth=1.1)
    ax.text(  # in the margin above the first lane, below the frame and the title
        end,
        -0.58,
        f" end {end:.6g} ",
        color=COLOURS["end"],
        fontsize=FONT_SIZE + 0.5,
        va="top",
        ha="left" if end < 0.85 * span else "right",
    )
    # Names come from the problem file: drawn as they are, never parsed as $math$.
    every = math.ceil(text_pixels / (lane * DPI))  # stages a name, so that names stay apart
    named = range(0, timeline.num_stages, every)
    names = [shown_name(timeline.stage_names[s]) for s in named]
    ax.set_yticks(named, names, fontsize=FONT_SIZE + 1, parse_math=False)
    ax.set_ylim(timeline.num_stages - 0.5, -0.6)
    bubble = report(timeline, None).overall_bubble
    peak = max(samples for points in held for _, samples in points)
    ax.set_title(
        f"{timeline.label}: iteration {end:.6g} {timeline.time_unit}, bubble {bubble:.1%}, "
        f"peak held {peak} of {batch} samples",
        loc="left",
        fontsize=FONT_SIZE + 2,
        parse_math=False,
    )
    ax.grid(axis="x", linewidth=0.3, alpha=0.6)
    ax.set_axisbelow(True)


def _legend(figure: Any, timelines: list[Timeline]) -> None:
    """The legend of what the panels of ``timelines`` draw: a tail or a link's transfers
    only where some panel has one that takes time (one stage has no links; free links
    draw nothing)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    def lasting(lanes: list[list[Step]]) -> set[str]:
        return {step.kind for steps in lanes for step in steps if step.end > step.start}

    ops = set().union(*(lasting(t.stages) for t in timelines))
    sent = set().union(*(lasting(t.links) for t in timelines))
    shown = [
        Patch(color=COLOURS[kind], label=label)
        for kind, label in (("F", "forward"), ("B", "backward"), ("T", "tail"))
        if kind in ops
    ] + [
        Patch(color=LINK_COLOURS[kind], label=label)
        for kind, label in (("F", "activations sent (link)"), ("B", "gradients sent (link)"))
        if kind in sent
    ]
    handles = shown + [
        Line2D([], [], color=HELD_COLOUR, linewidth=0.9, label="samples held (lane = batch)"),
        Line2D([], [], color=COLOURS["end"], linestyle="--", label="iteration end"),
    ]
    figure.legend(
        handles=handles,
        loc="upper center",
        ncol=len(handles),
        fontsize=FONT_SIZE + 1,
        frameon=False,
    )


def picture(timelines: list[Timeline]) -> Producer:
    """What draws ``timelines`` (top to bottom, one time axis) into the file it is given,
    for :func:`tidgap.outputs.atomic.write_together`; the format follows that file's
    suffix (.png or .svg)."""
    return lambda temporary: _save(timelines, temporary)


def draw(timelines: list[Timeline], path: str | os.PathLike[str]) -> None:
    """Write the picture of ``timelines`` to ``path`` (see :func:`picture`), atomically."""
    replace_atomically(path, picture(timelines))


def _save(timelines: list[Timeline], path: Path) -> None:
    from matplotlib import rc_context

    # SVG text stays text (selectable, searchable), not glyph outlines
    with rc_context({"svg.fonttype": "none"}):
        figure(timelines).savefig(path, format=path.suffix.lower().lstrip("."), dpi=DPI)


def figure(timelines: list[Timeline]) -> Any:
    """The matplotlib ``Figure`` of ``timelines`` (see :func:`picture`)."""
    from matplotlib.figure import Figure

    width, height = figure_size(timelines)
    drawn = Figure(figsize=(width, height), dpi=DPI)
    lane = lane_inches(timelines)
    weights = [_panel_inches(t, lane) for t in timelines]
    axes = drawn.subplots(len(timelines), 1, sharex=True, squeeze=False, height_ratios=weights)
    span = max(t.iteration_time for t in timelines) * 1.02 or 1.0
    top, bottom, left = 1 - LEGEND_INCHES / height, 0.55 / height, left_margin(timelines)
    # hspace is a share of the panels' mean height: a gap of GAP_INCHES whatever the stages
    count = len(timelines)
    mean = ((top - bottom) * height - (count - 1) * GAP_INCHES) / count
    drawn.subplots_adjust(
        left=left, right=0.98, top=top, bottom=bottom, hspace=GAP_INCHES / max(mean, 0.1)
    )
    width_pixels = width * DPI * (0.98 - left)
    for ax, timeline in zip(axes[:, 0], timelines, strict=True):
        _panel(ax, timeline, span, width_pixels, lane)
    axes[-1, 0].set_xlim(0, span)
    axes[-1, 0].set_xlabel(
        f"time ({timelines[0].time_unit})", fontsize=FONT_SIZE + 1, parse_math=False
    )
    for ax in axes[:, 0]:  # every panel its own time ticks: a tall picture's top has some
        ax.tick_params(axis="x", labelsize=FONT_SIZE + 1, labelbottom=True)
    _legend(drawn, timelines)
    return drawn
