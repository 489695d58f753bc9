"""``tidgap profile`` (measure a PyTorch model into a problem) and ``tidgap synth``.

Neither imports PyTorch until ``tidgap profile`` runs. Bad input raises
:class:`~tidgap.model.errors.InputError`, which the ``tidgap`` group prints as one line (exit 2).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from tidgap.cli.main import end_rank_on_signals
from tidgap.cli.options import (
    SEED,
    Command,
    Number,
    cold_start_warning,
    count_range,
    describe_problem,
    require_folder_name,
    require_name,
    with_options,
)
from tidgap.model.errors import InputError
from tidgap.model.fileio import MAX_INTEGER_DIGITS
from tidgap.model.numbers import MAX_COUNT, MAX_STAGES, MAX_THREADS
from tidgap.model.problem import Problem
from tidgap.model.text import brief, counted, printable, without_surrogates
from tidgap.outputs.files import (
    check_outputs,
    json_file,
    output_folder,
    write_files,
    write_json,
)
from tidgap.profiling.model_options import MODEL_OPTIONS
from tidgap.profiling.synth import SHAPES, synth_problem
from tidgap.profiling.user_code import model_inputs
from tidgap.runtime.optimizers import DEFAULT_LR, MAX_LR, OPTIMIZERS
from tidgap.runtime.worker import start_watchdog, torchrun_rank

#: The most problems one synth writes.
MAX_SYNTH_COUNT = 10**5
#: Link defaults: PCIe 3.0 x16-class bandwidth, a small per-transfer latency.
DEFAULT_BANDWIDTH_GBPS = 10.0
DEFAULT_LATENCY_MS = 0.05
#: Warn when other processes kept more cores than this busy while measuring.
BUSY_CORES = 0.25
INSTALL_HINT = (
    "PyTorch is not installed; install tidgap's profile extra: pip install '.[profile]' in "
    "tidgap's checkout, or pip install torch (without a GPU, first its CPU build: pip "
    "install torch --index-url https://download.pytorch.org/whl/cpu)"
)


def _emit(document: Any, out: str | None, as_json: bool) -> None:
    """Write ``document`` to ``out``; print it when there is no ``out`` or with ``--json``."""
    if out is not None:
        write_json(out, document)
    if out is None or as_json:
        click.echo(json.dumps(document, indent=1, allow_nan=False))


def _shape(text: str) -> tuple[int, ...]:
    """``3,32,32`` (or ``3x32x32``) -> ``(3, 32, 32)``: positive integers."""
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise InputError(
            f"expected positive integers like 3,32,32, got {brief(text)!r}", source="--input-shape"
        )
    if math.prod(shape) > MAX_COUNT:
        raise InputError(
            f"{brief(text)!r} is more than {MAX_COUNT} values per sample", source="--input-shape"
        )
    return shape


def require_torch(command: str) -> None:
    """Exit 2 with one line (naming ``command``) saying how to install PyTorch when it is
    missing."""
    try:
        importlib.import_module("torch")
    except ImportError:
        raise InputError(INSTALL_HINT, source=command) from None


def build_model(reference: str, options: dict[str, Any], command: str = "profile") -> Any:
    """Build the model named ``gpt``, ``vgg16`` or ``module:attribute`` from the
    :func:`model_options` (imports PyTorch; a missing PyTorch is an error naming
    ``command``); a :class:`tidgap.profiling.models.Model`."""
    kind = reference if reference in ("gpt", "vgg16") else "module:attribute"
    if kind == "module:attribute" and ":" not in reference:
        raise InputError("expected gpt, vgg16 or module:attribute", source=reference)
    for key, kinds in MODEL_OPTIONS.items():
        if options.get(key) is not None and kind not in kinds:
            option = "--" + key.replace("_", "-")
            raise click.UsageError(f"{option} applies to {' and '.join(kinds)} models only")
    given = {key: value for key, value in options.items() if value is not None}
    if kind == "module:attribute" and "input_shape" not in given:
        raise click.UsageError("--input-shape is required for a module:attribute model")
    shape = _shape(given.pop("input_shape")) if kind == "module:attribute" else ()
    require_torch(command)
    from tidgap.profiling import models

    if kind == "gpt":
        return models.gpt(**given)
    if kind == "vgg16":
        return models.vgg16(**given)
    if os.getcwd() not in sys.path:  # module:attribute may name a module here, as python -m
        sys.path.insert(0, os.getcwd())
    return models.from_reference(reference, shape, given.get("vocab"))


def _command_line(context: click.Context) -> str:
    """The ``tidgap profile`` command line as given (for ``source``), output flags aside."""
    words = ["tidgap", "profile"]
    for parameter in context.command.params:
        name, value = parameter.name, context.params.get(parameter.name)
        given = context.get_parameter_source(name) == ParameterSource.COMMANDLINE
        if isinstance(parameter, click.Argument):
            words.append(str(value))
        elif given and name not in ("quiet", "as_json"):
            words.append(parameter.opts[0])
            if not getattr(parameter, "is_flag", False):
                words.append(str(value))
    return without_surrogates(shlex.join(words))


@contextlib.contextmanager
def _progress(total: int, label: str, enabled: bool) -> Iterator[Callable[[str], None]]:
    """A step callback drawing a progress bar on stderr when ``enabled``."""
    if not enabled:
        yield lambda item: None
        return
    with click.progressbar(
        length=total, label=label, file=sys.stderr, item_show_func=lambda item: item
    ) as bar:
        yield lambda item: bar.update(1, item)


def shape_options(batch_size: int) -> Callable[[Command], Command]:
    """``--stages``, ``--batch-size`` (default ``batch_size``) and ``--unit``, shared by
    ``profile`` and ``synth``."""
    options = [
        click.option(
            "--stages",
            "-s",
            type=count_range(1, MAX_STAGES),
            default=4,
            show_default=True,
            help="Pipeline stages.",
        ),
        click.option(
            "--batch-size",
            "-b",
            type=count_range(1),
            default=batch_size,
            show_default=True,
            help="Mini-batch size in samples.",
        ),
        click.option(
            "--unit",
            type=count_range(1),
            default=1,
            show_default=True,
            help="Microbatch sizes are multiples of this.",
        ),
    ]

    return lambda command: with_options(command, options)


def model_options(command: Command) -> Command:
    """The model options (:data:`MODEL_OPTIONS`), shared by ``profile`` and ``run``; they
    reach the command as keyword arguments, ``None`` when not given."""
    options = [
        click.option("--layers", type=count_range(1), help="gpt: transformer blocks [14]."),
        click.option("--hidden", type=count_range(1), help="gpt: hidden size [768]."),
        click.option("--heads", type=count_range(1), help="gpt: attention heads [hidden/64]."),
        click.option("--seq-len", type=count_range(1), help="gpt: tokens per sample [512]."),
        click.option(
            "--vocab",
            type=count_range(1),
            help="gpt: vocabulary [40478]; module:attribute: feed token ids below this "
            "instead of random floats.",
        ),
        click.option(
            "--image-size", type=count_range(1), help="vgg16: image side in pixels [224]."
        ),
        click.option("--classes", type=count_range(1), help="vgg16: classes [1000]."),
        click.option(
            "--input-shape",
            metavar="D1,D2,..",
            help="module:attribute: the shape of one input sample.",
        ),
    ]
    return with_options(command, options)


def optimizer_options(command: Command) -> Command:
    """``--optimizer`` and ``--lr``, shared by ``profile`` (time the step into each stage's
    ``tail``) and ``run`` (step after each stage's last backward); read them with
    :func:`learning_rate`."""
    options = [
        click.option(
            "--optimizer",
            type=click.Choice(sorted(OPTIMIZERS)),
            help="The optimizer step as each stage's tail: torch.optim.SGD or Adam over the "
            "stage's parameters, step() then zero_grad(set_to_none=True) after its last "
            "backward. Default: no step.",
        ),
        click.option(
            "--lr",
            type=Number(min=0, min_open=True, max=MAX_LR),
            help=f"--optimizer's learning rate [{DEFAULT_LR:g}].",
        ),
    ]
    return with_options(command, options)


def learning_rate(optimizer: str | None, lr: float | None) -> float | None:
    """``--lr`` (default :data:`~tidgap.runtime.optimizers.DEFAULT_LR`) with an
    ``--optimizer``, ``None`` without one; ``--lr`` alone is a usage error."""
    if optimizer is None:
        if lr is not None:
            raise click.UsageError("--lr needs --optimizer")
        return None
    return DEFAULT_LR if lr is None else lr


@click.command(name="profile")
@click.argument("model", metavar="MODEL")
@shape_options(batch_size=32)
@click.option(
    "--max-microbatch",
    type=count_range(1),
    help="Largest microbatch (a memory cap, a multiple of --unit); default --batch-size.",
)
@click.option(
    "--split",
    metavar="B1,B2,..",
    help="Stage boundaries: the first layer (index or name) of stages 1..S-1. "
    "Default: balanced by measured per-layer time.",
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="Where to measure.",
)
@click.option(
    "--repeats",
    type=count_range(1),
    default=5,
    show_default=True,
    help="Timed rounds, each timing every stage at every size once; medians are kept.",
)
@click.option(
    "--warmup",
    type=count_range(0),
    default=2,
    show_default=True,
    help="Untimed rounds before them.",
)
@click.option(
    "--threads",
    type=count_range(1, MAX_THREADS),
    help="torch.set_num_threads (default: PyTorch's choice); recorded in source.",
)
@click.option(
    "--bandwidth",
    type=Number(min=1e-9, max=1e9),
    default=DEFAULT_BANDWIDTH_GBPS,
    show_default=True,
    help="Link bandwidth in GB/s (1e9 bytes/s), both ways.",
)
@click.option(
    "--latency",
    type=Number(min=0, max=1e9),
    default=DEFAULT_LATENCY_MS,
    show_default=True,
    help="Link latency per transfer in ms.",
)
@click.option(
    "--recompute",
    is_flag=True,
    help="Each backward time includes the stage's forward of the same samples: what "
    "tidgap run costs on a stage that recomputes (a plan whose backward boundaries are not "
    "forward boundaries).",
)
@click.option(
    "--measure-links",
    is_flag=True,
    help="Measure each link instead of the --bandwidth/--latency guess (not with them): "
    "its boundary tensor sent between 2 local processes over torch.distributed (gloo; NCCL "
    "with --device cuda, 2 GPUs), or under torchrun between the ranks of its two stages, "
    "at every size of the stage tables, both ways; each link becomes tables of the median "
    "of 20 transfers (half a ping-pong's round trip) after 3 warm-up per size and "
    "direction.",
)
@optimizer_options
@click.option(
    "--timeout",
    type=Number(min=0, min_open=True),
    help="Seconds the profile may take, the model's import included; then it exits with "
    "status 124 and writes nothing. Under torchrun each rank's own limit: a rank that hangs "
    "or waits for one that hangs ends, and torchrun stops the others (default: no limit; a "
    "rank waits up to an hour for the others at each step).",
)
@click.option("--name", help="Problem name (default: the output file's stem, else the model).")
@model_options
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="Write the problem (tidgap.problem/1) here; without it, print it.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no per-stage lines.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the problem as JSON (also with --out)."
)
def profile_command(
    model: str,
    stages: int,
    batch_size: int,
    unit: int,
    max_microbatch: int | None,
    split: str | None,
    device: str,
    repeats: int,
    warmup: int,
    threads: int | None,
    bandwidth: float,
    latency: float,
    recompute: bool,
    optimizer: str | None,
    lr: float | None,
    measure_links: bool,
    timeout: float | None,
    name: str | None,
    out: str | None,
    quiet: bool,
    as_json: bool,
    **model_options: Any,
) -> None:
    """Measure a PyTorch MODEL split into stages; write a tidgap.problem/1 file.

    MODEL is gpt (a GPT-style decoder), vgg16, or a torch.nn.Sequential given as
    module:attribute (its top-level entries are the layers, a module placed twice at
    each place; the current folder is importable). Each stage's forward and backward
    times are measured at microbatch sizes unit*2^k and the cap, the activation bytes
    crossing each boundary give the links. Under torchrun (one process per stage, on
    one machine or several) each rank measures its own stage where it runs (the
    processes of one machine in turn) and rank 0 alone writes the problem. Needs
    PyTorch: the profile extra, pip install '.[profile]' in tidgap's checkout.
    """
    require_name(name)
    lr = learning_rate(optimizer, lr)
    if batch_size % unit:
        raise InputError(f"{batch_size} is not a multiple of --unit {unit}", source="--batch-size")
    if max_microbatch is not None and max_microbatch % unit:
        raise InputError(
            f"{max_microbatch} is not a multiple of --unit {unit}", source="--max-microbatch"
        )
    cap = min(max_microbatch or batch_size, batch_size)
    context = click.get_current_context()
    guessed = [
        f"--{key}"
        for key in ("bandwidth", "latency")
        if context.get_parameter_source(key) == ParameterSource.COMMANDLINE
    ]
    if measure_links and guessed:
        raise click.UsageError(
            f"--measure-links measures the links: give it without {' and '.join(guessed)}"
        )
    here = torchrun_rank()
    if here is not None:
        end_rank_on_signals()
    if here is None or here[0] == 0:  # rank 0 alone writes it (machines share no folder)
        check_outputs(None, None, ("--out", out), inputs=model_inputs("MODEL", model))
    watchdog = None
    if timeout is not None:
        who = "tidgap profile" + ("" if here is None else f" (rank {here[0]})")
        watchdog = start_watchdog(timeout, who, launched=here is not None)
    built = build_model(model, model_options)
    from tidgap.profiling.run import (
        SHARED_ACROSS_STAGES,
        Settings,
        profile,
        shared_between_stages,
        step_count,
        torch_device,
    )

    settings = Settings(
        name=without_surrogates(name or (Path(out).stem if out else built.name)),
        stages=stages,
        batch_size=batch_size,
        unit=unit,
        cap=cap,
        split=split,
        device=device,
        repeats=repeats,
        warmup=warmup,
        threads=threads,
        bandwidth=bandwidth,
        latency=latency,
        recompute=recompute,
        optimizer=optimizer,
        lr=lr,
    )
    command = _command_line(context)
    show = not (quiet or as_json) and sys.stderr.isatty() and here is None
    with contextlib.redirect_stdout(sys.stderr):  # what the model prints stays off --json
        if here is not None:
            from tidgap.profiling.ranks import profile_rank

            try:
                mine = profile_rank(built, settings, command, *here, measure_links, timeout)
            except InputError as error:
                raise error.within(model) from None
            if mine is None:  # rank 0 reports
                return
            document = mine
        else:
            try:
                with _progress(
                    step_count(built, settings), f"profiling {built.name}", show
                ) as step:
                    document = profile(built, settings, command, step)
            except InputError as error:
                raise error.within(model) from None
            if measure_links:
                from tidgap.profiling.links import with_measured_links

                document = with_measured_links(document, built, torch_device(device))
    if watchdog is not None:  # measured: what is left is quick, and writes
        watchdog.set()
    loaded = Problem.from_dict(document)
    other = document["source"]["other_processes_cores"]
    if other is not None and other > BUSY_CORES:
        click.echo(
            f"tidgap: warning: other processes kept {other:g} cores busy on average while "
            "measuring, so the times may be inflated (source.other_processes_cores)",
            err=True,
        )
    if (cold := cold_start_warning(warmup, repeats, "--repeats")) is not None:
        click.echo(f"tidgap: warning: {cold}", err=True)
    shared = shared_between_stages(built, document["source"]["split"]["boundaries"])
    if shared is not None:
        click.echo(
            f"tidgap: warning: {shared}: tidgap run refuses this split, as {SHARED_ACROSS_STAGES}",
            err=True,
        )
    _emit(document, out, as_json)
    if out is None or as_json:
        return
    source = document["source"]
    click.echo(
        f"{describe_problem(loaded)}, measured on {printable(source['machine'])} ({device}, "
        f"{counted(source['threads'], 'thread')})"
    )
    if not quiet:
        for s, stage in enumerate(loaded.stages):
            f, b = stage.forward, stage.backward
            sent = source["links"]["bytes_per_sample"]
            link = f", sends {sent[s]} B/sample" if s < len(sent) else ""
            click.echo(
                f"  {loaded.stage_name(s)}: F {f(unit):.4g}..{f(cap):.4g} ms, "
                f"B {b(unit):.4g}..{b(cap):.4g} ms at {unit}..{cap} samples{link}"
            )
    click.echo(f"problem written to {printable(out)}")


@click.command(name="synth")
@click.option(
    "--seed",
    type=SEED,
    default=0,
    show_default=True,
    help="Random seed; the same seed gives the same file.",
)
@shape_options(batch_size=64)
@click.option(
    "--heterogeneity",
    type=Number(min=0, max=2),
    default=0.5,
    show_default=True,
    help="Spread between stages: each parameter is the reference's times "
    "exp(H * N(0,1)); 0 makes every stage alike.",
)
@click.option(
    "--shape",
    type=click.Choice(SHAPES),
    default="affine",
    show_default=True,
    help="Time functions: affine; saturating (flat up to a knee, then linear); "
    "table (measured-like).",
)
@click.option("--name", help="Problem name (default synth-SEED).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="Write the problem here; without --out or --out-dir, print it.",
)
@click.option(
    "--count",
    type=count_range(1, MAX_SYNTH_COUNT),
    default=1,
    show_default=True,
    help="With --out-dir: how many problems, seeds SEED..SEED+COUNT-1.",
)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False),
    help="Write COUNT problems here as synth-SEED.json (created if missing).",
)
@click.option("--quiet", "-q", is_flag=True, help="Do not list the files written.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the problem as JSON (also with --out)."
)
def synth_command(
    seed: int,
    stages: int,
    batch_size: int,
    unit: int,
    heterogeneity: float,
    shape: str,
    name: str | None,
    out: str | None,
    count: int,
    out_dir: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Random simulated networks (the paper's simulation networks), reproducible by seed."""
    require_name(name)
    if out is not None and out_dir is not None:
        raise click.UsageError("give --out or --out-dir, not both")
    if count > 1 and out_dir is None:
        raise click.UsageError("--count needs --out-dir")
    require_folder_name(out_dir)
    if count > 1 and (name is not None or as_json):
        raise click.UsageError("--name and --json are for one problem, not --count > 1")
    if batch_size % unit:
        raise InputError(f"{batch_size} is not a multiple of --unit {unit}", source="--batch-size")
    if SEED.too_long(seed + count - 1):
        raise InputError(
            f"the last seed, SEED + COUNT - 1, has more than {MAX_INTEGER_DIGITS} digits "
            "(files keep no longer integer)",
            source="--count",
        )
    if out_dir is None:
        check_outputs(None, None, ("--out", out))
        document = synth_problem(seed, stages, batch_size, unit, heterogeneity, shape, name)
        _emit(document, out, as_json)
        if out is not None and not (quiet or as_json):
            click.echo(f"wrote {printable(out)}")
        return
    if name is not None and (Path(name).name != name or name in (".", "..")):
        raise InputError(
            "names the file in --out-dir: no folder in it, not . or ..", source="--name"
        )
    documents = [
        synth_problem(seed + index, stages, batch_size, unit, heterogeneity, shape, name)
        for index in range(count)
    ]
    with output_folder(out_dir) as folder:  # its new folders go again if the files fail
        paths = [str(folder / f"{document['name']}.json") for document in documents]
        check_outputs(None, None, *[("--out-dir", path) for path in paths])
        files = [
            json_file(path, d, f"wrote {printable(path)}")
            for d, path in zip(documents, paths, strict=True)
        ]
        written = write_files(files)
    if as_json:  # one problem (--count 1)
        click.echo(json.dumps(documents[0], indent=1, allow_nan=False))
    elif not quiet:
        click.echo("\n".join(written))
