"""Link tables measured over the real backend: ``tidgap profile --measure-links``.

Two local processes (``python -m tidgap.profiling.links JOB.json``, ranks 0 and 1; gloo on
the CPU, NCCL with ``--device cuda``, one GPU per rank) pass each boundary tensor back and
forth: link ``s`` carries ``(b, *shape)`` of stage ``s``'s output, in both directions (its
gradient has the same shape). One transfer is half a ping-pong's round trip, timed by the
rank that sends first: rank 0 for the forward direction, rank 1 for the backward. A round
trip needs one clock only, so neither the skew between the processes' clocks nor when each
left a barrier enters the figure (a barrier then a send, timed as the receiver's end minus
the sender's start, would count that skew), and the receiver's wake-up is inside it, as in
a run; halving it assumes the two directions cost the same, true on loopback and between
two like GPUs. Per size: the median of :data:`REPEATS` transfers after :data:`WARMUP`,
in rounds that each time every link at every size once (as the stage tables are timed), made
non-decreasing. The processes start in their own sessions with the launcher's watchdog
(:mod:`tidgap.runtime.launch`, :func:`tidgap.runtime.worker.start_watchdog`); every one is
killed before :func:`with_measured_links` returns or raises.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click
import torch
from torch import distributed as dist

from tidgap.model.errors import InputError
from tidgap.model.fileio import read_json, write_json_atomic
from tidgap.outputs.atomic import abandoned_at_once
from tidgap.profiling.build import Json, table
from tidgap.profiling.models import Model
from tidgap.profiling.run import stage_modules
from tidgap.runtime.calibrate import table_sizes
from tidgap.runtime.dist_transport import dist_timeout
from tidgap.runtime.launch import WorkerError, launch
from tidgap.runtime.report import unit_per_second
from tidgap.runtime.stage import probed_specs
from tidgap.runtime.worker import die_reporting, start_watchdog

#: Timed transfers per link, size and direction; untimed ones before them.
REPEATS = 20
WARMUP = 3
#: Seconds the two processes may take in all.
TIMEOUT = 600.0
JOB_FORMAT = "tidgap.links-job/1"
SOURCE = "--measure-links"


@dataclass(frozen=True)
class LinkJob:
    """What both processes measure: per link the per-sample ``shape`` and ``dtype`` (a
    ``torch`` attribute name) of its tensor, at ``sizes`` (samples), on ``device`` (``cpu``
    or ``cuda``); each rank writes ``rank<R>.json`` beside the job's file."""

    shapes: list[list[int]]
    dtypes: list[str]
    sizes: list[int]
    device: str
    repeats: int = REPEATS
    warmup: int = WARMUP
    timeout: float = TIMEOUT

    def save(self, path: Path) -> None:
        """Write the job to ``path`` (``tidgap.links-job/1``), atomically."""
        write_json_atomic(path, {"format": JOB_FORMAT, **dataclasses.asdict(self)})

    @classmethod
    def load(cls, path: str) -> LinkJob:
        """Read a job :meth:`save` wrote; another file is an :class:`InputError`."""
        document = read_json(path)
        if not isinstance(document, dict) or document.pop("format", None) != JOB_FORMAT:
            raise InputError(f"expected {JOB_FORMAT!r}", ("format",), source=path)
        return cls(**document)


def backend(device: str) -> str:
    """The torch.distributed backend for ``device``: NCCL on CUDA, else gloo."""
    return "nccl" if device == "cuda" else "gloo"


def round_trip(
    tensor: torch.Tensor, peer: int, first: bool, group: dist.ProcessGroup | None = None
) -> float:
    """Seconds for ``tensor`` to reach rank ``peer`` and come back into it (``first``: this
    rank sends first; else it receives, then sends it back), synchronised on CUDA;
    ``group``: the process group (``None``: the default one)."""
    cuda = tensor.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(tensor.device)
    start = time.perf_counter()
    if first:
        dist.send(tensor, peer, group)
        dist.recv(tensor, peer, group)
    else:
        dist.recv(tensor, peer, group)
        dist.send(tensor, peer, group)
    if cuda:
        torch.cuda.synchronize(tensor.device)
    return time.perf_counter() - start


#: A link measured between two ranks: its index, the rank sending its forward direction
#: (the upstream stage's) and the rank sending its backward direction.
Pair = tuple[int, int, int]


def pair_transfers(
    job: LinkJob,
    rank: int,
    device: torch.device,
    pairs: Sequence[Pair],
    group: dist.ProcessGroup | None = None,
) -> list[list[list[float]]]:
    """``[k][i]``: the timed transfers (half round trips, seconds) of link ``pairs[k]`` at
    ``job.sizes[i]`` in the direction rank ``rank`` (one of the pair's) sends first. Every
    round times each pair at every size once, in ``pairs``' order, so the ranks of a pair
    must list it in the same order among the pairs they share (as each send meets its
    receive)."""
    tensors = {
        link: [
            torch.zeros(
                size, *job.shapes[link], dtype=getattr(torch, job.dtypes[link]), device=device
            )
            for size in job.sizes
        ]
        for link, _, _ in pairs
    }
    kept: list[list[list[float]]] = [[[] for _ in job.sizes] for _ in pairs]
    for round_ in range(job.warmup + job.repeats):
        for k, (link, ahead, back) in enumerate(pairs):
            peer = back if rank == ahead else ahead
            for i, tensor in enumerate(tensors[link]):
                for sender in (ahead, back):
                    seconds = round_trip(tensor, peer, rank == sender, group)
                    if rank == sender and round_ >= job.warmup:
                        kept[k][i].append(seconds / 2)
    return kept


def run_rank(job: LinkJob, rank: int) -> list[list[list[float]]]:
    """Join the 2-process group as ``rank``, measure every link (:func:`pair_transfers`), leave."""
    torch.set_num_threads(1)
    device = torch.device("cuda", rank) if job.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = dist_timeout(job.timeout)
    dist.init_process_group(backend(job.device), rank=rank, world_size=2, timeout=timeout)
    transfers = pair_transfers(job, rank, device, [(link, 0, 1) for link in range(len(job.shapes))])
    dist.barrier()
    dist.destroy_process_group()
    return transfers


def main(argv: list[str] | None = None) -> int:
    """A rank's entry point: 0 on success; on failure the traceback, then one last line
    ``Error: message`` on stderr (the launcher quotes it), and exit 1 at once."""
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) != 1:
            raise ValueError("usage: python -m tidgap.profiling.links JOB.json")
        job = LinkJob.load(args[0])
        start_watchdog(job.timeout)
        rank = int(os.environ["RANK"])
        write_json_atomic(Path(args[0]).with_name(f"rank{rank}.json"), run_rank(job, rank))
    except BaseException as error:
        die_reporting(error)
    return 0


def measured_transfers(job: LinkJob) -> list[list[list[list[float]]]]:
    """``[rank][link][i]``: both ranks' transfers (seconds), measured by new processes in
    a new temporary folder, removed after, unless they failed: then a
    ``click.ClickException`` (status 1) names it (their logs)."""
    folder = Path(tempfile.mkdtemp(prefix="tidgap-links-"))
    failed = False
    with abandoned_at_once(folder):  # a timeout's watchdog removes it too
        try:
            job.save(folder / "job.json")
            launch(folder / "job.json", 2, 1, job.timeout, folder, module=__name__)
            return [read_json(folder / f"rank{rank}.json") for rank in range(2)]
        except WorkerError as error:  # a failure, not bad input: status 1, as tidgap run's
            failed = True
            raise click.ClickException(f"{SOURCE}: {error} (the logs: {folder})") from None
        finally:
            if not failed:
                shutil.rmtree(folder, ignore_errors=True)


def link_tables(
    transfers: list[list[list[list[float]]]], sizes: list[int], scale: float
) -> list[Json]:
    """Per link, ``forward`` (rank 0's transfers) and ``backward`` (rank 1's) tables at
    ``sizes``: each size's median times ``scale`` (time units per second), non-decreasing."""
    forward, backward = transfers
    return [
        {
            direction: table(sizes, [statistics.median(kept) * scale for kept in per_size])
            for direction, per_size in (("forward", ahead), ("backward", back))
        }
        for ahead, back in zip(forward, backward, strict=True)
    ]


def link_job(
    boundaries: list[int], sizes: list[int], model: Model, device: torch.device
) -> LinkJob | None:
    """What to measure of the links of ``model`` on ``device`` cut at ``boundaries``: each
    boundary tensor at ``sizes`` (samples); ``None`` for one stage (no link)."""
    stages = stage_modules(model, boundaries)
    # in eval mode: the timings ran in train mode
    specs = probed_specs(
        stages, model.input(min(sizes), device), lambda line: InputError(line, source=SOURCE)
    )[:-1]
    if not specs:
        return None
    return LinkJob(
        shapes=[list(shape) for shape, _ in specs],
        dtypes=[str(dtype).removeprefix("torch.") for _, dtype in specs],
        sizes=sizes,
        device=device.type,
    )


def with_transfers(
    document: Json,
    job: LinkJob | None,
    transfers: list[list[list[list[float]]]] | None,
    between: str,
) -> Json:
    """A copy of ``document`` whose links are :func:`link_tables` of ``transfers`` (rank
    0's, rank 1's, as :func:`measured_transfers` returns; ``None`` with no link), measured
    as ``job`` says ``between`` the processes ``between`` names, with ``source.links``
    saying how."""
    out = copy.deepcopy(document)
    sizes = table_sizes(document, SOURCE)
    if job is not None and transfers is not None:
        out["links"] = link_tables(transfers, sizes, unit_per_second(document["time_unit"]))
    out["source"]["links"] = {
        "bytes_per_sample": document["source"]["links"]["bytes_per_sample"],
        "measured": True,
        "backend": backend(document["source"]["device"]),
        "sizes": sizes,
        "shapes": [] if job is None else job.shapes,
        "rule": f"table: per size the median of {REPEATS} transfers after {WARMUP} warm-up "
        f"{between} over torch.distributed; a transfer is half the round trip of a (size, "
        "*shape) tensor sent by the direction's sender and sent back (the upstream stage's "
        "process forward, the downstream's backward: one clock, no skew between the "
        "processes); made non-decreasing",
    }
    return out


def with_measured_links(document: Json, model: Model, device: torch.device) -> Json:
    """A copy of the profiled ``document`` (``model`` on ``device``, cut at
    ``source.split.boundaries``) whose links are tables of transfers measured at the stage
    tables' sizes between 2 new local processes, with ``source.links`` saying how. One
    stage: no link, nothing spawned."""
    if device.type == "cuda" and torch.cuda.device_count() < 2:
        raise InputError(
            f"on CUDA needs 2 GPUs (NCCL puts each rank on its own), found "
            f"{torch.cuda.device_count()}",
            source=SOURCE,
        )
    boundaries = document["source"]["split"]["boundaries"]
    job = link_job(boundaries, table_sizes(document, SOURCE), model, device)
    transfers = None if job is None else measured_transfers(job)
    return with_transfers(document, job, transfers, "between 2 local processes")


if __name__ == "__main__":
    sys.exit(main())
