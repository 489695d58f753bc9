"""One rank of a ``torch.distributed.pipelining`` run of an exported compute-only CSV:
``python -m tests.support.pipelining_rank CSV SIDECAR SCHEDULE RANK WORLD STORE``.

Stage ``s`` is ``Linear(4, 4)`` then ``Tanh`` (float64, the same weights on every rank);
the schedule (``multi``: ``PipelineScheduleMulti``, ``runtime``: ``_PipelineScheduleRuntime``)
loads the CSV and runs one ``step()`` of the sidecar's batch with its ``n_microbatches``
and a mean-squared-error loss. Prints, as one JSON line, the rank and the largest
relative difference between its stage's gradients and those of one whole-batch step of
the whole model in this process. Imports torch only, not tidgap.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import PipelineScheduleMulti, _PipelineScheduleRuntime

SCHEDULES = {"multi": PipelineScheduleMulti, "runtime": _PipelineScheduleRuntime}
WIDTH = 4


def main(
    csv_path: str, sidecar_path: str, schedule: str, rank: int, world: int, store: str
) -> None:
    """Run this rank's stage and print its gradients' difference (see the module)."""
    torch.set_default_dtype(torch.float64)
    with open(sidecar_path, encoding="utf-8") as file:
        sidecar = json.load(file)
    batch, count = sidecar["batch_size"], sidecar["n_microbatches"]
    torch.manual_seed(0)
    stages = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(world)]
    x, target = torch.randn(batch, WIDTH), torch.randn(batch, WIDTH)
    whole = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in stages])
    whole.load_state_dict(nn.Sequential(*stages).state_dict())
    nn.functional.mse_loss(whole(x), target).backward()

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        stage = PipelineStage(stages[rank], rank, world, torch.device("cpu"))
        runner = SCHEDULES[schedule]([stage], n_microbatches=count, loss_fn=nn.MSELoss())
        runner._load_csv(csv_path, format="compute_only")
        if rank == 0:
            runner.step(x)
        elif rank == world - 1:
            runner.step(target=target)
        else:
            runner.step()
    finally:
        dist.destroy_process_group()
    pairs = zip(stages[rank].parameters(), whole[rank].parameters(), strict=True)
    difference = max(
        float((mine.grad - theirs.grad).abs().max() / theirs.grad.abs().max())
        for mine, theirs in pairs
    )
    print(json.dumps({"rank": rank, "difference": difference}), flush=True)


if __name__ == "__main__":
    csv_file, sidecar_file, kind, rank_text, world_text, store_file = sys.argv[1:]
    main(csv_file, sidecar_file, kind, int(rank_text), int(world_text), store_file)
