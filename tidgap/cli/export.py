"""``tidgap export``: a plan for PyTorch, for same-partition runtimes, or as a schedule."""

from __future__ import annotations

import os
import stat

import click

from tidgap.analysis.search_summary import best_rival
from tidgap.cli.options import SEED, Number, about_problem, count_range, problem_argument
from tidgap.cli.search import DEFAULT_TIME_LIMIT
from tidgap.model.errors import InputError
from tidgap.model.lists import compact_sizes
from tidgap.model.plan import Plan, load_plan
from tidgap.model.problem import Problem, load_problem
from tidgap.model.text import counted, printable
from tidgap.optimize.backward_rules import MIRRORED
from tidgap.optimize.driver import search
from tidgap.optimize.interrupts import stop_on_signals
from tidgap.outputs.exports import (
    REFINEMENTS,
    lowered_plan,
    microbatches_document,
    microbatches_path,
    pytorch_csv,
    pytorch_rivals,
    schedule_document,
    slower_than_rival_warning,
)
from tidgap.outputs.files import check_outputs, json_file, text_file, write_files, write_json
from tidgap.schedules.baselines import BaselineResult, tractable
from tidgap.schedules.families import evaluate, family_of, plan_timeline

EXPORTS = ("pytorch-csv", "same-partition", "json-schedule")


@click.command(name="export")
@problem_argument()
@click.argument("plan_file", metavar="PLAN")
@click.option(
    "--to", "target", type=click.Choice(EXPORTS), help="What to write (see above).  [required]"
)
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="Write it here.")
@click.option(
    "--microbatch-sizes",
    "sizes",
    type=click.Choice(list(REFINEMENTS)),
    help="pytorch-csv: equal (default) or common (see above).",
)
@click.option("--seed", type=SEED, help="same-partition: random seed (default 0).")
@click.option(
    "--generations", type=count_range(0), help="same-partition: stop after G generations."
)
@click.option(
    "--time-limit",
    type=Number(min=0, infinite=True),
    help="same-partition: stop after this many seconds (default 10 unless --generations).",
)
def export_command(
    problem: str,
    plan_file: str,
    target: str | None,
    out: str,
    sizes: str | None,
    seed: int | None,
    generations: int | None,
    time_limit: float | None,
) -> None:
    """Write PLAN for other runtimes and tools.

    PROBLEM comes first, as in `tidgap evaluate`: a plan file names its problem but does
    not hold it.

    \b
    pytorch-csv     the compute-only schedule CSV that torch.distributed.pipelining
                    loads (_load_csv; a row per rank, cells like 0F3, 1B0, in the
                    lockstep columns PipelineScheduleMulti runs) for PLAN lowered
                    to one partition (an ordered plan keeps its order): with
                    --microbatch-sizes equal (the default), equal microbatches
                    that refine every stage's, which PyTorch's stages and step()
                    run as they are; with common, the coarsest common refinement
                    (fewer microbatches of several sizes, for stages that take a
                    different size per microbatch: PyTorch's PipelineStage does
                    not). With OUT's .microbatches.json sidecar: every
                    microbatch's samples and both predicted times; warns when the
                    lowered plan is slower than the best GPipe that PyTorch runs
                    as is (an ordered plan: the best of GPipe and 1F1B)
    same-partition  the best flush plan with one partition for every stage and
                    both directions (`tidgap search --same-partition --mirrored`,
                    seeded with PLAN lowered), which Megatron (variable sequence
                    lengths) or DynaPipe can run as is, and tidgap run at the
                    model's costs; never slower than the best GPipe; writes a
                    tidgap.plan/1; refuses an ordered plan
    json-schedule   tidgap.schedule/1: per stage, its order and the operations in
                    it with start and end times, sample ranges and the transfers it
                    sends
    """
    if target is None:
        raise click.UsageError(f"missing option --to ({', '.join(EXPORTS)})")
    if target != "same-partition" and (seed, generations, time_limit) != (None, None, None):
        raise click.UsageError("--seed, --generations and --time-limit go with --to same-partition")
    if target != "pytorch-csv" and sizes is not None:
        raise click.UsageError("--microbatch-sizes goes with --to pytorch-csv")
    sidecar = str(microbatches_path(out)) if target == "pytorch-csv" and out else None
    if sidecar is not None and not _may_have_a_sidecar(out):
        raise InputError(
            f"is a stream, not a file: the microbatches go beside the CSV ({printable(sidecar)}); "
            "give a file",
            source="--out",
        )
    inputs = {"PROBLEM": problem, "PLAN": plan_file}
    check_outputs(None, None, ("--out", out), ("--out's sidecar", sidecar), inputs=inputs)
    loaded = load_problem(problem)
    plan = load_plan(plan_file, loaded)
    if target == "same-partition":
        require_flush(plan, plan_file)
    with about_problem(problem):
        _export(target, loaded, plan, out, sidecar, sizes, seed, generations, time_limit)


def _may_have_a_sidecar(out: str) -> bool:
    """Whether ``out`` is a regular file or none yet (through symlinks): a device or a FIFO
    (``/dev/stdout``) has no folder of its own for the sidecar (it went into ``/dev``)."""
    try:
        return stat.S_ISREG(os.stat(out).st_mode)
    except OSError:  # none yet, or check_outputs names why it cannot be written
        return True


def require_flush(plan: Plan, plan_file: str) -> None:
    """Raise :class:`InputError` on ``order`` / ``windows`` if ``plan`` is an ordered plan:
    the same-partition search searches flush plans only."""
    if family_of(plan).has_flush:
        return
    raise InputError(
        "--to same-partition searches flush plans, and this plan has an order; "
        "--to pytorch-csv keeps the order on one partition",
        (plan.order_field,),
        source=plan_file,
    )


def _rival(problem: Problem, plan: Plan) -> BaselineResult | None:
    """What a lowered ``plan`` is measured against, of the baselines PyTorch runs as they
    are (:func:`pytorch_rivals`): for a flush plan the best GPipe, for an ordered plan the
    best of GPipe and 1F1B; ``None`` where the problem has too many units to time them
    (:func:`~tidgap.schedules.baselines.require_tractable`)."""
    if not tractable(problem):
        return None
    rivals = pytorch_rivals(problem)
    if family_of(plan).has_flush:
        rivals.pop("1f1b")
    return best_rival(rivals)


def _export(
    target: str,
    loaded: Problem,
    plan: Plan,
    out: str,
    sidecar: str | None,
    sizes: str | None,
    seed: int | None,
    generations: int | None,
    time_limit: float | None,
) -> None:
    """Write ``plan`` as ``target`` to ``out`` (and ``sidecar``); ``sizes`` names the
    pytorch-csv refinement (default ``equal``)."""
    if target == "json-schedule":
        timeline = plan_timeline(loaded, plan)
        write_json(out, schedule_document(loaded, timeline))
        click.echo(
            f"schedule of the plan (iteration {timeline.iteration_time:.6g} "
            f"{loaded.time_unit}) written to {printable(out)}"
        )
    elif target == "pytorch-csv":
        _export_pytorch_csv(loaded, plan, out, sidecar, sizes or "equal")
    else:
        _export_same_partition(loaded, plan, out, seed, generations, time_limit)


def _export_pytorch_csv(
    problem: Problem, plan: Plan, out: str, sidecar: str, refinement: str
) -> None:
    """The CSV of PLAN lowered to its ``refinement`` (a key of :data:`REFINEMENTS`, in its
    order), and the sidecar beside it; a warning on stderr when the lowered plan is slower
    than its rival (:func:`_rival`)."""
    sizes = REFINEMENTS[refinement](plan)
    common = lowered_plan(plan, sizes)
    evaluation = evaluate(problem, plan)
    lowered = evaluate(problem, common)
    unit = problem.time_unit
    rival = _rival(problem, plan)
    if rival is None:
        warning: str | None = (
            "tidgap: warning: not compared with PyTorch's own GPipe and 1F1B runs: too many "
            f"units ({problem.num_units}) to time them"
        )
    else:
        warning = slower_than_rival_warning(lowered, rival, unit, family_of(plan).has_flush)
    document = microbatches_document(problem, sizes, evaluation, lowered, out)
    write_files([text_file(out, pytorch_csv(common.stage_order())), json_file(sidecar, document)])
    kept = "" if family_of(plan).has_flush else ", in the plan's order"
    which = (
        f"{counted(len(sizes), 'microbatch', 'microbatches')} of {counted(sizes[0], 'sample')}"
        if len(set(sizes)) == 1
        else f"{len(sizes)} microbatches of {min(sizes)} to {max(sizes)} samples"
    )
    click.echo(
        f"lowered to one partition of {which} (every stage's boundaries"
        f"{kept}): "
        f"iteration {lowered.iteration_time:.6g} {unit}, plan "
        f"{evaluation.iteration_time:.6g} {unit} "
        f"({lowered.iteration_time / evaluation.iteration_time - 1:+.2%})"
    )
    click.echo(f"schedule written to {printable(out)}, microbatches to {printable(sidecar)}")
    if warning is not None:
        click.echo(warning, err=True)


def _export_same_partition(
    problem: Problem,
    plan: Plan,
    out: str,
    seed: int | None,
    generations: int | None,
    time_limit: float | None,
) -> None:
    """The same-partition search, seeded with PLAN lowered, under the mirrored rule (one
    partition for both directions, which is what a runtime that runs each microbatch's
    backward on its forward's graph needs); writes a tidgap.plan/1."""
    if time_limit is None and generations is None:
        time_limit = DEFAULT_TIME_LIMIT
    with stop_on_signals() as signals:
        result = search(
            problem,
            seed=0 if seed is None else seed,
            generations=generations,
            time_limit=time_limit,
            same_partition=True,
            backward=MIRRORED,
            initial_plans=[lowered_plan(plan)],
            interrupted=signals.received,
        )
        write_json(out, result.plan_document())
    unit = problem.time_unit
    click.echo(
        f"same-partition plan: iteration {result.evaluation.iteration_time:.6g} {unit}, "
        f"plan {evaluate(problem, plan).iteration_time:.6g} {unit}, best GPipe "
        f"{result.baselines['gpipe'].iteration_time:.6g} {unit}"
        + (f" (interrupted: {result.stop_reason})" if result.interrupted else "")
    )
    click.echo(f"  every stage, forward and backward: {compact_sizes(result.plan.forward[0])}")
    click.echo(f"plan written to {printable(out)}")
    signals.exit_if_received()
