"""torchrun for tests of commands that behave otherwise under it: its environment set in
this process, or ``tidgap`` started under real torchrun agents."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tidgap.runtime.launch import free_port
from tidgap.runtime.worker import TORCHRUN_VARIABLES

ROOT = Path(__file__).resolve().parents[2]


def as_torchrun(monkeypatch: pytest.MonkeyPatch, rank: str = "0", world_size: str = "2") -> None:
    """Set what torchrun sets for process ``rank`` (also its local rank) of
    ``world_size`` (:data:`~tidgap.runtime.worker.TORCHRUN_VARIABLES`)."""
    values = (rank, world_size, rank, "127.0.0.1", "29500")
    for name, value in zip(TORCHRUN_VARIABLES, values, strict=True):
        monkeypatch.setenv(name, value)


def tidgap_under_torchrun(
    args: list[str], processes: int, nodes: int = 1, timeout: float = 180
) -> list[subprocess.CompletedProcess[str]]:
    """``tidgap ARGS`` under torchrun from the repository's root (so the processes import
    the tests' models): one agent (``--standalone``) starting ``processes`` processes, or
    ``nodes`` agents at once standing for as many machines (``--nnodes``, a c10d rendezvous
    on this machine), each starting ``processes``. What each agent printed, by node."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes)]
    if nodes == 1:
        commands = [[*command, "--standalone"]]
    else:
        rendezvous = ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-id", "test"]
        rendezvous += ["--rdzv-endpoint", f"127.0.0.1:{free_port()}"]
        commands = [[*command, *rendezvous, "--node-rank", str(node)] for node in range(nodes)]
    started = [
        subprocess.Popen(
            [*each, "-m", "tidgap", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for each in commands
    ]
    done = []
    for agent in started:
        try:
            stdout, stderr = agent.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for each in started:
                each.kill()
            raise
        done.append(subprocess.CompletedProcess(agent.args, agent.returncode, stdout, stderr))
    return done
