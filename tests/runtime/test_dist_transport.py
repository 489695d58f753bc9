"""The torch.distributed transport's routing, without processes: each link direction has a
group of its own in which one rank only sends and the other only receives (what keeps NCCL
from deadlocking), chunks travel on the wire the backend needs, and the job's ``transport``
resolves to what every rank can use. Real gloo runs of 2 and 3 stages: ``test_run.py``."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tidgap.runtime import dist_transport, worker  # noqa: E402
from tidgap.runtime.dist_transport import DistTransport, LinkGroups  # noqa: E402


def named_groups(stages: int, backend: str = "gloo") -> LinkGroups:
    """Groups that are their names: ``("F", s)`` and ``("B", s)`` per link ``s``."""
    links = range(stages - 1)
    return LinkGroups(backend, [("F", s) for s in links], [("B", s) for s in links])  # type: ignore[misc]


@pytest.mark.parametrize("stages", [2, 3, 5])
def test_each_group_has_one_sender_and_one_receiver(stages: int) -> None:
    groups = named_groups(stages)
    senders: dict[Any, set[int]] = defaultdict(set)
    receivers: dict[Any, set[int]] = defaultdict(set)
    for rank in range(stages):
        for peer in (rank - 1, rank + 1):
            if 0 <= peer < stages:
                senders[groups.sending(rank, peer)].add(rank)
                receivers[groups.receiving(peer, rank)].add(peer)
                assert groups.sending(rank, peer) == groups.receiving(peer, rank)
    assert set(senders) == {*groups.forward, *groups.backward}
    for group in senders:
        assert len(senders[group]) == len(receivers[group]) == 1
        assert senders[group] != receivers[group]
    assert groups.sending(1, 0) == ("B", 0) and groups.receiving(0, 1) == ("B", 0)


class FakeWork:
    """A request that is complete (the fake point-to-point below runs nothing)."""

    def is_completed(self) -> bool:
        return True

    def wait(self) -> None:
        pass


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, int, Any]]:
    """Every ``isend``/``irecv`` the transport makes: (kind, tensor, peer, group)."""
    made: list[tuple[str, Any, int, Any]] = []
    for kind in ("isend", "irecv"):

        def call(tensor: Any, peer: int, group: Any = None, kind: str = kind) -> FakeWork:
            made.append((kind, tensor, peer, group))
            return FakeWork()

        monkeypatch.setattr(dist_transport.dist, kind, call)
    return made


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_chunks_travel_on_the_backends_wire_in_their_directions_group(
    backend: str, calls: list[tuple[str, Any, int, Any]]
) -> None:
    """Over gloo chunks cross host memory; over NCCL they stay on the stage's device (a
    ``meta`` device, which holds no data, stands for a GPU here)."""
    device = torch.device("meta" if backend == "nccl" else "cpu")
    transport = DistTransport(1, named_groups(3, backend), device)
    spec = ((2, 3), torch.float32)
    transport.expect([(spec, 0), (spec, 2)])
    transport.send(torch.zeros(2, 3, device=device), 2)
    transport.send(torch.zeros(2, 3, device=device), 0)
    assert [(kind, peer, group) for kind, _, peer, group in calls] == [
        ("irecv", 0, ("F", 0)),
        ("irecv", 2, ("B", 1)),
        ("isend", 2, ("F", 1)),
        ("isend", 0, ("B", 0)),
    ]
    assert {tensor.device for _, tensor, _, _ in calls} == {transport.wire}
    assert transport.wire == (device if backend == "nccl" else dist_transport.WIRE)
    received = transport.recv(spec, 0)
    assert received.device == device and received.shape == (2, 3)
    with pytest.raises(RuntimeError, match="receive from rank 2 of \\(4, 3\\)"):
        transport.recv(((4, 3), torch.float32), 2)
    transport.wait()


@pytest.fixture
def every_rank_says(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The collective :func:`worker.every_rank` answers with this rank's flag and records
    it (one rank here)."""
    asked: list[bool] = []

    def every(ok: bool) -> bool:
        asked.append(ok)
        return ok

    monkeypatch.setattr(worker, "every_rank", every)
    return asked


def with_gpus(monkeypatch: pytest.MonkeyPatch, gpus: int, processes: int) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(processes))
    from torch import distributed

    monkeypatch.setattr(distributed, "is_nccl_available", lambda: True)


def test_gloo_is_asked_of_no_rank(every_rank_says: list[bool]) -> None:
    assert worker.resolved_transport("gloo", torch.device("cuda", 0)) == "gloo"
    assert every_rank_says == []


def test_auto_is_gloo_on_the_cpu_and_nccl_refuses_it(every_rank_says: list[bool]) -> None:
    cpu = torch.device("cpu")
    assert worker.nccl_obstacle(cpu) == "it computes on the CPU"
    assert worker.resolved_transport("auto", cpu) == "gloo"
    with pytest.raises(ValueError, match="^transport nccl needs a GPU per process: it computes"):
        worker.resolved_transport("nccl", cpu)
    assert every_rank_says == [False, False]


@pytest.mark.parametrize(
    ("gpus", "processes", "auto"), [(2, 2, "nccl"), (4, 2, "nccl"), (1, 2, "gloo")]
)
def test_nccl_needs_a_gpu_per_process_on_the_machine(
    gpus: int,
    processes: int,
    auto: str,
    every_rank_says: list[bool],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_gpus(monkeypatch, gpus, processes)
    gpu = torch.device("cuda", 0)
    assert worker.resolved_transport("auto", gpu) == auto
    if auto == "gloo":
        assert worker.nccl_obstacle(gpu) == "2 processes on this machine share 1 GPU(s)"
        with pytest.raises(ValueError, match="share 1 GPU"):
            worker.resolved_transport("nccl", gpu)
    else:
        assert worker.resolved_transport("nccl", gpu) == "nccl"


def test_a_rank_that_can_is_told_when_another_cannot(monkeypatch: pytest.MonkeyPatch) -> None:
    with_gpus(monkeypatch, 2, 2)
    monkeypatch.setattr(worker, "every_rank", lambda ok: False)
    with pytest.raises(ValueError, match="another rank lacks one"):
        worker.resolved_transport("nccl", torch.device("cuda", 0))
    assert worker.resolved_transport("auto", torch.device("cuda", 0)) == "gloo"
