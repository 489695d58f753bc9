"""``tidgap calibrate``: re-time a profiled problem's stages through ``tidgap run``'s
workers (GPipe runs at the table sizes), so its predictions include the runtime's per-op
costs (:mod:`tidgap.runtime.calibrate`)."""

from __future__ import annotations

from typing import Any

import click

from tidgap.cli.launching import results_of
from tidgap.cli.main import end_rank_on_signals
from tidgap.cli.options import cold_start_warning, count_range, problem_argument
from tidgap.cli.run_caveats import other_model, shared_cores
from tidgap.cli.workers import (
    recorded_boundaries,
    require_batch_room,
    require_device,
    require_probe_runs,
    worker_job,
    worker_options,
)
from tidgap.model.errors import InputError
from tidgap.model.fileio import read_json
from tidgap.model.problem import load_problem, problem_path
from tidgap.model.text import printable
from tidgap.outputs.files import check_outputs, write_json
from tidgap.profiling.user_code import model_inputs
from tidgap.runtime.worker import local_processes, require_world, torchrun_rank


@click.command(name="calibrate")
@problem_argument()
@worker_options
@click.option(
    "--rounds",
    type=count_range(1),
    default=1,
    show_default=True,
    help="Run the calibration plans this many times, in rounds (each round starts the "
    "workers afresh and runs the plans in turn, iteration by iteration, so that every size "
    "meets the machine's same moments), and take the medians over all of them: a machine "
    "whose speed drifts is sampled at several moments.",
)
@click.option(
    "--every-size",
    is_flag=True,
    help="Measure every microbatch size up to the largest one (multiples of the unit), not "
    "only the profile's table sizes: a search picks any size, and between table sizes it "
    "sees the profile's straight line, not what the size costs (more runs: about one per "
    "size).",
)
@click.option(
    "--no-recompute",
    is_flag=True,
    help="Skip the recomputing twins (one of each GPipe(m) or flush run whose first chunk "
    "is over one unit; the 1F1B(m) runs have none). Without them, tidgap run prices a "
    "recomputing stage's forward as its stored-graph forward and its backward as "
    "forward plus backward (on the fidelity benchmark's GPT 5-21% above what they took); "
    "enough for plans that recompute nothing (tidgap search --no-recompute or --mirrored).",
)
@click.option(
    "--no-order",
    is_flag=True,
    help="Skip the 1F1B(m) runs. Without them, tidgap run prices a forward run right after "
    "a backward, and the last stage's backward right after its own forward, as in GPipe's "
    "order (on the fidelity benchmark's GPT 4-8% above what they took, so 1F1B(8) was "
    "predicted 6-7% slow).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    required=True,
    help="Write the calibrated problem (tidgap.problem/1) here.",
)
def calibrate_command(
    problem: str,
    model_reference: str,
    split: str | None,
    iterations: int,
    warmup: int,
    threads: int,
    seed: int,
    device: str,
    transport: str,
    timeout: float,
    rounds: int,
    every_size: bool,
    no_recompute: bool,
    no_order: bool,
    out: str,
    **options: Any,
) -> None:
    """Measure PROBLEM's op times through tidgap run's workers and write it with them.

    Runs GPipe(m) (and a flush plan for a size no GPipe holds) in turn, iteration by
    iteration, in one process per stage, so that every size of the stages' tables is
    measured (--rounds times over; under torchrun, whose process group forms once, the
    rounds run in turn in the same processes), and replaces each stage's forward
    and backward tables by the median measured op duration at each size, and each link by
    a table of its measured transfers: what the runtime really pays per op (chunking,
    sends and receives, dispatch, the other stages' processes on the same machine). Each
    plan also runs with its backward partition moved by one unit, so that every stage
    recomputes (unless --no-recompute, or PROBLEM records layers that normalise by their
    batch's statistics, source.batch_statistics: no search of it recomputes): its forwards
    without autograd's graph and its backwards re-running their forward are timed too, and
    tidgap run prices a plan's recomputing stages with them (source.calibration.recompute).
    1F1B(m) runs too (unless --no-order): a forward right after a backward of its size and
    the last stage's backward right after its own forward run faster than in GPipe's order,
    and their times go beside the tables (source.calibration.order) for tidgap run's
    prediction. Search and evaluate plans on the
    calibrated problem to predict tidgap run. With a --split
    other than the one PROBLEM records, the calibrated problem records --split (the split
    its times were measured on), names its stages after it, and leaves out, with a
    warning, the profiled stages' bytes (activation_bytes, memory_limit, source.memory,
    source.links.bytes_per_sample):
    profile with that --split for them. Under torchrun (one process per stage, on one machine or
    several) each rank runs its stage where it runs, and rank 0 alone writes the problem.
    """
    from tidgap.runtime.calibrate import (
        alternating_plans,
        calibration_plans,
        calibration_sizes,
        measured_problem,
        recomputing_plans,
        resplit,
    )
    from tidgap.runtime.lowering import recomputes

    here = torchrun_rank()
    if here is not None:
        end_rank_on_signals()
    inputs = {"PROBLEM": problem, **model_inputs("--model", model_reference)}
    if here is None or here[0] == 0:  # rank 0 alone writes it (machines share no folder)
        check_outputs(None, None, ("--out", out), inputs=inputs)
    loaded = load_problem(problem)
    if here is not None:
        require_world(here[1], loaded, problem)
    document = read_json(problem_path(problem))
    sizes = calibration_sizes(document, loaded, problem, every_size)
    plans = calibration_plans(loaded, sizes)
    # a search of a problem recording layers that normalise by their batch recomputes nowhere
    skip_twins = no_recompute or bool(loaded.batch_statistics_layers)
    twins = [] if skip_twins else recomputing_plans(plans, loaded.unit)
    plans += ([] if no_order else alternating_plans(loaded, sizes)) + twins
    job, model = worker_job(
        problem,
        "",
        loaded,
        model_reference,
        split,
        options,
        "calibrate",
        iterations=iterations,
        warmup=warmup,
        threads=threads,
        check_gradients=False,
        float64=False,
        seed=seed,
        device=device,
        transport=transport,
        timeout=timeout,
    )
    if (other := other_model(loaded, model)) is not None:  # its times would be another's
        raise InputError(
            f"{problem} was profiled with {other[0]}, not {other[1]} (source.model): "
            "calibrate times the profiled model",
            source="--model",
        )
    require_probe_runs(model, job, loaded.unit, "calibrate")
    require_device(device, transport, loaded.num_stages if here is None else None)
    require_batch_room(model, loaded, problem, None if here is None else local_processes())
    reports = here is None or here[0] == 0  # under torchrun, rank 0 alone
    if here is None and (shared := shared_cores(loaded.num_stages, threads, device)) is not None:
        click.echo(f"tidgap: warning: {shared}", err=True)
    iterations: list[Any] = []
    recomputed: list[Any] = []  # the iterations of plans in which every stage recomputes
    labels = [label for label, _ in plans]
    shown = ", ".join(labels)
    todo = [plan for _, plan in plans]
    # under torchrun the process group forms once: the rounds run in turn within it
    batches = [todo] * rounds if here is None else [todo * rounds]
    transport = "gloo"  # what the chunks travelled over (every run: the same job)
    for round_, batch in enumerate(batches):
        if reports:
            which = f" (round {round_ + 1})" if len(batches) > 1 else ""
            which += f" ({rounds} rounds in the same processes)" if len(batch) > len(todo) else ""
            click.echo(f"running {shown} in turn{which}", err=True)
        found = results_of(loaded, job, batch, f"calibrate: {shown}", here)
        for plan, results in zip(batch, found or [], strict=False):
            kept = recomputed if any(recomputes(plan)) else iterations
            kept += list(zip(*(result["iterations"] for result in results), strict=True))
            transport = results[0]["transport"]
    if not reports:
        return
    runs = labels * rounds
    fitted = measured_problem(
        document, loaded, iterations, runs, recomputed=recomputed, order=not no_order
    )
    fitted["source"]["calibration"]["transport"] = transport
    if recorded_boundaries(loaded) != job.boundaries:  # fitted's source is loaded's
        layers = [name for name, _ in model.named_layers()]
        dropped = resplit(fitted, job.boundaries, layers)
        if dropped:
            click.echo(
                f"tidgap: warning: --split: {', '.join(dropped)} left out (the profiled "
                "split's stages'; profile with this --split for them)",
                err=True,
            )
    if (cold := cold_start_warning(warmup, job.iterations, "--iterations")) is not None:
        click.echo(f"tidgap: warning: {cold}", err=True)
    write_json(out, fitted)
    again = fitted["source"]["calibration"].get("recompute") or [None] * loaded.num_stages
    for before, after, twin in zip(document["stages"], fitted["stages"], again, strict=True):
        shown = []
        for direction in ("forward", "backward"):
            was, now = before[direction]["table"]["times"], after[direction]["table"]["times"]
            shown.append(f"{direction[0].upper()} {now[0]:.4g}..{now[-1]:.4g} (profiled "
                         f"{was[0]:.4g}..{was[-1]:.4g})")  # fmt: skip
        if twin is not None:
            forward = twin["forward"]["table"]["times"]
            backward = twin["backward"]["table"]["times"]
            shown.append(f"recomputing F {forward[0]:.4g}..{forward[-1]:.4g}, "
                         f"B {backward[0]:.4g}..{backward[-1]:.4g}")  # fmt: skip
        name = printable(str(after.get("name", "")))
        click.echo(f"  {name}: {', '.join(shown)} {printable(loaded.time_unit)}")
    click.echo(
        f"calibrated problem written to {printable(out)} ({', '.join(runs)}; chunks over "
        f"{transport})"
    )
