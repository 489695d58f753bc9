"""``tidgap calibrate``: re-time a profiled problem's stages through ``tidgap run``'s
workers (GPipe runs at the table sizes), so its predictions include the runtime's per-op
costs (:mod:`tidgap.runtime.calibrate`)."""

from __future__ import annotations

from typing import Any

import click

from tidgap.cli.options import problem_argument
from tidgap.cli.profile import build_model, model_options, require_torch
from tidgap.cli.run import absolute, boundaries_of, launched
from tidgap.model.fileio import read_json
from tidgap.model.problem import load_problem, problem_path
from tidgap.outputs.files import check_outputs, write_json
from tidgap.runtime.job import Job
from tidgap.schedules.families import SCHEDULES


@click.command(name="calibrate")
@problem_argument()
@click.option(
    "--model",
    "model_reference",
    required=True,
    metavar="gpt|vgg16|module:attribute",
    help="The model the problem was profiled from, as in tidgap profile.",
)
@model_options
@click.option("--split", metavar="B1,B2,..", help="Stage boundaries, as in tidgap run.")
@click.option(
    "--iterations", type=click.IntRange(min=1), default=5, show_default=True,
    help="Timed iterations of each GPipe run.",
)  # fmt: skip
@click.option(
    "--warmup", type=click.IntRange(min=0), default=1, show_default=True,
    help="Untimed iterations before them.",
)  # fmt: skip
@click.option(
    "--threads", type=click.IntRange(min=1), default=1, show_default=True,
    help="PyTorch threads per stage process (as the plans will run).",
)  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Weights and data.")
@click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True), default=300.0,
    show_default=True, help="Seconds each run may take.",
)  # fmt: skip
@click.option(
    "--out", type=click.Path(dir_okay=False), required=True,
    help="Write the calibrated problem (tidgap.problem/1) here.",
)  # fmt: skip
def calibrate_command(
    problem: str,
    model_reference: str,
    split: str | None,
    iterations: int,
    warmup: int,
    threads: int,
    seed: int,
    timeout: float,
    out: str,
    **options: Any,
) -> None:
    """Measure PROBLEM's op times through tidgap run's workers and write it with them.

    Runs GPipe(m) for counts m whose microbatch sizes cover the sizes of the stages'
    tables, and replaces each stage's forward and backward tables by the median measured
    op duration at each size: what the runtime really pays per op (chunking, sends and
    receives, dispatch, the other stages' processes on the same machine). Search and
    evaluate plans on the calibrated problem to predict tidgap run.
    """
    from tidgap.runtime.calibrate import (
        calibrated,
        calibration_counts,
        link_durations,
        op_durations,
        table_sizes,
    )
    from tidgap.runtime.report import measured_timeline, unit_per_second

    check_outputs(None, None, ("--out", out), inputs={"PROBLEM": problem})
    loaded = load_problem(problem)
    document = read_json(problem_path(problem))
    counts = calibration_counts(loaded, table_sizes(document, problem))
    require_torch("calibrate")
    import torch

    torch.manual_seed(seed)
    model = build_model(model_reference, options, "calibrate")
    layers = [name for name, _ in model.layers.named_children()]
    job = Job(
        problem=absolute(problem),
        plan="",
        model=model_reference,
        boundaries=boundaries_of(loaded, problem, split, layers),
        results="",
        model_options=options,
        iterations=iterations,
        warmup=warmup,
        threads=threads,
        check_gradients=False,
        float64=False,
        seed=seed,
        timeout=timeout,
    )
    iterations = []
    for m in counts:
        label = f"GPipe({m})"
        click.echo(f"running {label}", err=True)
        results = launched(loaded, job, SCHEDULES["gpipe"].baseline(loaded, m), False, label)
        iterations += list(zip(*(result["iterations"] for result in results), strict=True))
    timelines = [measured_timeline(loaded, ranks, "calibration") for ranks in iterations]
    links = link_durations(iterations, unit_per_second(loaded.time_unit))
    fitted = calibrated(document, loaded, op_durations(timelines), links, counts)
    write_json(out, fitted)
    for before, after in zip(document["stages"], fitted["stages"], strict=True):
        shown = []
        for direction in ("forward", "backward"):
            was, now = before[direction]["table"]["times"], after[direction]["table"]["times"]
            shown.append(f"{direction[0].upper()} {now[0]:.4g}..{now[-1]:.4g} (profiled "
                         f"{was[0]:.4g}..{was[-1]:.4g})")  # fmt: skip
        click.echo(f"  {before.get('name', '')}: {', '.join(shown)} {loaded.time_unit}")
    click.echo(f"calibrated problem written to {out} ({', '.join(f'GPipe({m})' for m in counts)})")
