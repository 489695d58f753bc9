"""``tidgap profile`` under torchrun: each rank measures its own stage where it runs.

torchrun starts one process per stage (``RANK`` = stage, ``WORLD_SIZE`` = stage count), on
as many machines as the pipeline spans. They form one gloo group; rank 0 chooses the split
(``--split``, or balanced on its machine) and shares it; then each rank times its stage on
its own machine and device, fed by the stages before it (computed untimed), its ``Place``
recorded. The processes on one machine take turns (by ``LOCAL_RANK``, a barrier between
turns), so a stage is timed alone on its machine, as a one-process profile times it. With
``--measure-links`` each link is measured between the two ranks that run its stages, over
the real path between them (the upstream rank times the forward direction, the downstream
the backward, as :mod:`tidgap.profiling.links` does between two local processes; links
measured in two phases, even then odd, so that no rank is in two at once). Everything
reaches rank 0 (``gather_object``), which alone builds the problem; the others return
``None``. A rank that fails ends with an exception, and torchrun's agent stops the others;
with ``tidgap profile --timeout`` a rank that hangs, or waits for one that hangs, is ended
by its watchdog (:func:`tidgap.runtime.worker.start_watchdog`, started by the command).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import distributed as dist

from tidgap.model.errors import InputError
from tidgap.profiling.allocator import keep_freed_memory
from tidgap.profiling.build import Json, measurement_sizes
from tidgap.profiling.links import (
    LinkJob,
    Pair,
    backend,
    link_job,
    pair_transfers,
    with_transfers,
)
from tidgap.profiling.measure import OtherLoad
from tidgap.profiling.models import Model
from tidgap.profiling.run import (
    Place,
    Settings,
    Split,
    StageMeasurements,
    Step,
    checked_split,
    chosen_split,
    joined_measurements,
    measure_stages,
    place_here,
    prepared,
    problem_from,
    torch_device,
)
from tidgap.runtime.dist_transport import dist_timeout
from tidgap.runtime.worker import local_processes, rank_device, stage_count_mismatch

#: Seconds a rank may wait for the others at any point (the longest stage's measurement).
TIMEOUT = 3600.0


def require_world(world_size: int, stages: int) -> None:
    """:class:`InputError` on ``--stages`` unless torchrun started one process per stage."""
    why = stage_count_mismatch(stages, world_size)
    if why is not None:
        raise InputError(why, source="--stages")


def require_link_devices(device: torch.device) -> None:
    """On CUDA, :class:`InputError` on ``--measure-links`` unless each process on this
    machine has a GPU of its own (NCCL puts each rank on its own)."""
    if device.type == "cuda" and torch.cuda.device_count() < local_processes():
        raise InputError(
            f"on CUDA needs a GPU per process: {local_processes()} processes on this machine, "
            f"{torch.cuda.device_count()} GPUs",
            source="--measure-links",
        )


def neighbour_pairs(rank: int, stages: int) -> list[Pair]:
    """The links rank ``rank`` (stage ``rank``) takes part in, each as (link, upstream rank,
    downstream rank), even links first: the order both ranks of every link agree on."""
    links = [link for link in (rank - 1, rank) if 0 <= link < stages - 1]
    return [(link, link, link + 1) for link in sorted(links, key=lambda link: (link % 2, link))]


T = TypeVar("T")


def shared(rank: int, value: Callable[[], T]) -> T:
    """``value()``, called on rank 0 only, on every rank."""
    box = [value() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def in_turns(action: Callable[[], T]) -> T:
    """``action()`` on each process of a machine in turn (by ``LOCAL_RANK``), every rank
    waiting at a barrier between turns; its result."""
    turns = torch.tensor([local_processes()])
    dist.all_reduce(turns, op=dist.ReduceOp.MAX)
    mine = int(os.environ.get("LOCAL_RANK", "0"))
    result: T | None = None
    for turn in range(int(turns.item())):
        if turn == mine:
            result = action()
        dist.barrier()
    assert result is not None, "LOCAL_RANK is below LOCAL_WORLD_SIZE"
    return result


def link_transfers(
    job: LinkJob | None, rank: int, stages: int, device: torch.device
) -> list[list[list[float]]]:
    """This rank's transfers ``[k][i]`` of :func:`neighbour_pairs` (none without a job),
    over NCCL on CUDA (a group of every rank), else the default gloo group."""
    if job is None:
        return []
    group = dist.new_group(backend=backend(device.type)) if device.type == "cuda" else None
    return pair_transfers(job, rank, device, neighbour_pairs(rank, stages), group)


def assembled_transfers(
    each: list[list[list[list[float]]]], stages: int
) -> list[list[list[list[float]]]]:
    """``[forward, backward]`` per link from every rank's :func:`link_transfers` (``each``):
    link ``s``'s forward from rank ``s``, its backward from rank ``s + 1``."""

    def sent_by(rank: int, link: int) -> list[list[float]]:
        index = [pair[0] for pair in neighbour_pairs(rank, stages)].index(link)
        return each[rank][index]

    links = range(stages - 1)
    return [[sent_by(s, s) for s in links], [sent_by(s + 1, s) for s in links]]


def profile_rank(
    model: Model,
    settings: Settings,
    command: str,
    rank: int,
    world_size: int,
    measure_links: bool,
    timeout: float | None = None,
    on_step: Step = lambda label: None,
) -> Json | None:
    """Profile stage ``rank`` of ``model`` in this process (torchrun's rank ``rank`` of
    ``world_size``, one per stage) and, with ``measure_links``, its links to its
    neighbours: on rank 0 the problem document, on the others ``None``. A rank waits for
    the others at most ``timeout`` seconds at each step (default :data:`TIMEOUT`). Bad
    settings raise :class:`InputError` before the group forms."""
    require_world(world_size, settings.stages)
    given = checked_split(model, settings)
    device = torch_device(settings.device)
    if measure_links:
        require_link_devices(device)
    device = rank_device(device.type)  # this rank's GPU: LOCAL_RANK modulo the GPUs
    kept_freed_memory = keep_freed_memory()
    waits = dist_timeout(TIMEOUT if timeout is None else timeout)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=waits)
    try:
        with prepared(model, settings, device):
            split: Split = shared(
                rank, lambda: chosen_split(model, settings, given, device, on_step)
            )
            sizes = measurement_sizes(settings.unit, settings.cap)

            def measure_mine() -> tuple[StageMeasurements, Place]:
                load = OtherLoad()
                measured = measure_stages(model, settings, split, device, sizes, on_step, rank)
                return measured, place_here(device, load)

            measured, place = in_turns(measure_mine)
        job = link_job(split[0], sizes, model, device) if measure_links else None
        transfers = link_transfers(job, rank, world_size, device)
        every: list[Any] | None = [None] * world_size if rank == 0 else None
        dist.gather_object((measured, place, transfers), every, dst=0)
    finally:
        dist.destroy_process_group()
    if every is None:
        return None
    parts, places, each = zip(*every, strict=True)
    document = problem_from(
        model, settings, joined_measurements(parts), places, device, kept_freed_memory, command
    )
    if not measure_links:
        return document
    every_link = None if job is None else assembled_transfers(list(each), world_size)
    between = "between the ranks of the link's two stages (under torchrun)"
    return with_transfers(document, job, every_link, between)
