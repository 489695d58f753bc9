"""The torch.distributed transport's routing, without processes: each link direction has a
group of its own in which one rank only sends and the other only receives, and so every
kind of plan runs under NCCL's ordering (each rank's calls in a group complete in the order
posted, a send with its receive; groups connect on first use: :mod:`tests.support.
in_order_p2p`), where one group per link deadlocks, and so does skipping the handshake;
chunks travel on the wire the backend needs; the job's ``transport`` resolves to what every
rank can use. Real gloo runs of 2 and 3 stages: ``test_run.py``."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.runtime.test_lowering import random_plan  # noqa: E402
from tests.support.in_order_p2p import InOrderNetwork, act_as_rank  # noqa: E402
from tests.support.runtime_fakes import SampleStage  # noqa: E402
from tidgap.model.plan import Plan  # noqa: E402
from tidgap.runtime import dist_transport, worker  # noqa: E402
from tidgap.runtime.dist_transport import DistTransport, LinkGroups, handshake  # noqa: E402
from tidgap.runtime.executor import execute  # noqa: E402
from tidgap.runtime.failures import handler_error  # noqa: E402
from tidgap.runtime.handlers import PipelineHandlers  # noqa: E402
from tidgap.runtime.lowering import lower  # noqa: E402
from tidgap.schedules.ir import one_f_one_b_order  # noqa: E402


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


GPU_A, GPU_B = ("host1", "GPU-aaaa"), ("host1", "GPU-bbbb")


@pytest.mark.parametrize(
    ("ranks", "why"),
    [
        ([(True, GPU_A), (True, GPU_B)], None),
        ([(True, GPU_A), (True, ("host2", GPU_A[1]))], None),  # the same index, two machines
        ([(True, GPU_A), (True, None)], "rank 1 computes on the CPU"),
        ([(False, GPU_A), (True, GPU_B)], "rank 0's PyTorch has no NCCL"),
        ([(True, GPU_A), (True, GPU_B), (True, GPU_A)], "ranks 0 and 2 share a GPU on host1"),
    ],
)
def test_nccl_needs_a_gpu_of_its_own_for_every_rank(ranks: list[Any], why: str | None) -> None:
    assert worker.nccl_obstacle(ranks) == why


@pytest.fixture
def ranks_say(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """:func:`worker.gathered` of two ranks: this one, then one on its own GPU; returns
    what this rank said, call by call."""
    asked: list[Any] = []

    def gathered(value: Any) -> list[Any]:
        asked.append(value)
        return [value, (True, GPU_B)]

    monkeypatch.setattr(worker, "gathered", gathered)
    return asked


def on_a_gpu(monkeypatch: pytest.MonkeyPatch, uuid: str | None = "GPU-aaaa") -> Any:
    """A CUDA device 0 whose properties give ``uuid`` (none: no such attribute), NCCL
    available, this host named ``host1``."""
    from torch import distributed

    properties = type("Properties", (), {} if uuid is None else {"uuid": uuid})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: properties)
    monkeypatch.setattr(distributed, "is_nccl_available", lambda: True)
    monkeypatch.setattr(worker.socket, "gethostname", lambda: "host1")
    return torch.device("cuda", 0)


def test_a_gpu_is_known_by_its_host_and_uuid_else_by_its_visible_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert worker.gpu_identity(torch.device("cpu")) is None
    assert worker.gpu_identity(on_a_gpu(monkeypatch)) == GPU_A
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert worker.gpu_identity(on_a_gpu(monkeypatch, None)) == ("host1", "3,5/0")


def test_the_transport_is_what_every_rank_can_use(
    ranks_say: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert worker.resolved_transport("gloo", torch.device("cpu")) == "gloo"
    assert ranks_say == []  # gloo asks no rank
    gpu = on_a_gpu(monkeypatch)
    assert worker.resolved_transport("auto", gpu) == "nccl"
    assert worker.resolved_transport("nccl", gpu) == "nccl"
    assert ranks_say == [(True, GPU_A)] * 2
    assert worker.resolved_transport("auto", torch.device("cpu")) == "gloo"
    with pytest.raises(ValueError, match="^transport nccl needs a GPU per process: rank 0 "):
        worker.resolved_transport("nccl", torch.device("cpu"))


def test_a_rank_that_can_is_told_when_another_shares_its_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker, "gathered", lambda value: [value, value])
    gpu = on_a_gpu(monkeypatch)
    assert worker.resolved_transport("auto", gpu) == "gloo"
    with pytest.raises(ValueError, match="ranks 0 and 1 share a GPU on host1"):
        worker.resolved_transport("nccl", gpu)


class TensorSampleStage(SampleStage):
    """:class:`SampleStage` whose payloads are tensors of sample ids, as the transport
    sends."""

    def input_spec(self, samples: tuple[int, int]) -> Any:
        return (samples[1] - samples[0],), torch.int64

    gradient_spec = input_spec

    def receive_input(self, samples: tuple[int, int], payload: Any) -> None:
        super().receive_input(samples, payload.tolist())

    def forward(self, samples: tuple[int, int]) -> Any:
        return torch.tensor(super().forward(samples))

    def receive_gradient(self, samples: tuple[int, int], payload: Any) -> None:
        super().receive_gradient(samples, payload.tolist())

    def backward(self, samples: tuple[int, int]) -> Any:
        return torch.tensor(super().backward(samples))


def run_in_order(
    plan: Plan,
    groups: LinkGroups,
    monkeypatch: pytest.MonkeyPatch,
    timeout: float = 10.0,
    lazy: bool = True,
    shake: bool = True,
) -> list[list[tuple[str, tuple[int, int]]]]:
    """Run ``plan``'s lowered instructions through :class:`DistTransport` in ``groups``
    with NCCL's ordering (:mod:`tests.support.in_order_p2p`; ``lazy``: groups connect on
    first use), a thread per rank, each first shaking hands (``shake``) as the worker does;
    per rank its computes. Raises a rank's error (``TimeoutError`` on a deadlock)."""
    network = InOrderNetwork(timeout, lazy)
    monkeypatch.setattr(dist_transport.dist, "isend", network.isend)
    monkeypatch.setattr(dist_transport.dist, "irecv", network.irecv)
    lowered = lower(plan)
    logs: list[list[tuple[str, tuple[int, int]]]] = [[] for _ in lowered]
    errors: list[BaseException] = []

    def rank_thread(rank: int) -> None:
        act_as_rank(rank)
        stage = TensorSampleStage(rank == 0, rank == len(lowered) - 1, logs[rank])
        handlers = PipelineHandlers(rank, stage, DistTransport(rank, groups))
        try:
            if shake:
                handshake(groups, rank, torch.device("cpu"))
            handlers.expect(lowered[rank])
            execute(lowered[rank], handlers)
        except BaseException as error:  # reported below
            errors.append(handler_error(error))

    threads = [threading.Thread(target=rank_thread, args=(r,)) for r in range(len(lowered))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return logs


def in_order_plans() -> dict[str, Plan]:
    """1F1B and GPipe on 2 and 4 stages, a forward cut from two upstream chunks, and
    random valid ordered plans (unequal partitions, backwards apart from forwards)."""
    plans = {}
    for stages, m in ((2, 4), (4, 8)):
        ones = [[1] * m] * stages
        plans[f"1F1B({m}), {stages} stages"] = Plan.of(
            ones, ones, order=list(one_f_one_b_order(stages, m).stages)
        )
        plans[f"GPipe({m}), {stages} stages"] = Plan.of(ones, ones)
    plans["straddling chunks"] = Plan.of([[2, 3, 1], [3, 3]], [[6], [6]], order=["FFFB", "FFB"])
    for seed in range(12):  # random partitions and repaired random windows, 1-4 stages
        plans[f"random{seed}"] = random_plan(random.Random(seed), 1 + seed % 4, 7 + seed)
    return plans


@pytest.mark.parametrize("name", sorted(in_order_plans()))
def test_a_group_per_link_and_direction_runs_every_plan_with_nccls_ordering(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = in_order_plans()[name]
    logs = run_in_order(plan, named_groups(len(plan.forward), "nccl"), monkeypatch)
    order = plan.stage_order()
    for s, log in enumerate(logs):
        assert "".join(kind for kind, _ in log) == order.stages[s]


def test_one_group_per_link_would_deadlock_with_nccls_ordering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Why the groups are per direction: with one group per link, each rank's receives,
    posted ahead, sit before its sends, so 1F1B's first chunk never goes."""
    plan = in_order_plans()["1F1B(4), 2 stages"]
    shared = [("link", 0)]
    with pytest.raises(TimeoutError, match="never matched"):
        run_in_order(plan, LinkGroups("nccl", shared, shared), monkeypatch, timeout=0.5)  # type: ignore[arg-type]


def test_groups_that_connect_on_first_use_need_the_handshake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Why the worker shakes hands first: NCCL connects a pair on its first call, both
    ranks blocking; posting receives ahead, stage 1 connects its forward group while stage
    0 connects its backward one, each waiting for the other."""
    plan = in_order_plans()["1F1B(4), 2 stages"]
    with pytest.raises(TimeoutError, match="waited for its peer to connect"):
        run_in_order(plan, named_groups(2, "nccl"), monkeypatch, timeout=0.5, shake=False)
    logs = run_in_order(plan, named_groups(2, "nccl"), monkeypatch)
    assert ["".join(kind for kind, _ in log) for log in logs] == list(plan.stage_order().stages)
