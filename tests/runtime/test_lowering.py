"""The lowering and executor against the model's dependencies, through the in-process fakes."""

from __future__ import annotations

import random

import pytest

from tests.support.runtime_fakes import SampleStage, run_ranks
from tidgap.model.plan import Plan
from tidgap.runtime.lowering import Instruction, lower, recomputes
from tidgap.schedules.ir import first_violation, one_f_one_b_order, repair, window_order


def random_sizes(rng: random.Random, total: int, most: int) -> list[int]:
    """A random composition of ``total`` into at most ``most`` parts."""
    cuts = sorted(rng.sample(range(1, total), rng.randint(0, min(most, total) - 1)))
    return [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]


def random_plan(rng: random.Random, stages: int, batch: int) -> Plan:
    """Random partitions per stage and direction, and a repaired random-window order."""
    forward = [random_sizes(rng, batch, 8) for _ in range(stages)]
    backward = [random_sizes(rng, batch, 8) for _ in range(stages)]
    windows = [rng.randint(1, batch) for _ in range(stages)]
    order = repair(window_order(forward, backward, windows), forward, backward)
    return Plan.of(forward, backward, order=list(order.stages))


def run(plan: Plan, timeout: float = 5.0) -> list[list[tuple[str, tuple[int, int]]]]:
    """Run ``plan`` on sample-id stages; per rank the computes in the order they ran."""
    lowered = lower(plan)
    logs: list[list[tuple[str, tuple[int, int]]]] = [[] for _ in lowered]
    last = len(lowered) - 1
    run_ranks(lowered, lambda r: SampleStage(r == 0, r == last, logs[r]), timeout)
    return logs


PLANS = [random_plan(random.Random(seed), 1 + seed % 4, 7 + seed) for seed in range(24)]


@pytest.mark.parametrize("plan", PLANS, ids=[f"random{i}" for i in range(len(PLANS))])
def test_every_valid_order_runs_with_the_inputs_it_needs(plan: Plan) -> None:
    """Each rank computes its letters in order, every op finds all its samples (SampleStage
    raises otherwise), and nothing deadlocks."""
    logs = run(plan)
    order = plan.stage_order()
    for s, log in enumerate(logs):
        assert "".join(kind for kind, _ in log) == order.stages[s]
        forwards = [samples for kind, samples in log if kind == "F"]
        backwards = [samples for kind, samples in log if kind == "B"]
        assert [hi - lo for lo, hi in forwards] == plan.forward[s]
        assert [hi - lo for lo, hi in backwards] == plan.backward[s]


@pytest.mark.parametrize("plan", PLANS, ids=[f"random{i}" for i in range(len(PLANS))])
def test_a_compute_waits_for_the_chunks_it_needs_and_no_more(plan: Plan) -> None:
    """Before each compute, the chunks received from that direction's neighbour reach past
    the op's last sample, and the last of them starts before it (it is needed by this op or
    an earlier one: no receive runs ahead of need)."""
    for s, instructions in enumerate(lower(plan)):
        last = {"forward": None, "backward": None}
        for step in instructions:
            if step.kind.startswith("recv_"):
                last[step.kind.removeprefix("recv_")] = step.samples
            elif step.kind in last:
                has_neighbour = s > 0 if step.kind == "forward" else s < len(plan.forward) - 1
                received = last[step.kind]
                assert (received is not None) == has_neighbour
                if received is not None:
                    assert received[1] >= step.samples[1]
                    assert received[0] < step.samples[1]


def test_1f1b_lowers_to_the_textbook_instruction_stream() -> None:
    """1F1B(4) on 2 stages, one sample per microbatch: stage 0 sends each forward at once and
    receives each gradient just before its backward."""
    ones = [[1] * 4, [1] * 4]
    plan = Plan.of(ones, ones, order=list(one_f_one_b_order(2, 4).stages))
    first, second = lower(plan)
    kinds = [(i.kind, i.microbatch) for i in first]
    assert kinds[:4] == [("forward", 0), ("send_forward", 0), ("forward", 1), ("send_forward", 1)]
    assert ("recv_backward", 0) in kinds
    assert kinds.index(("recv_backward", 0)) == kinds.index(("backward", 0)) - 1
    assert [i.kind for i in second[:3]] == ["recv_forward", "forward", "backward"]
    assert all(i.kind != "send_forward" for i in second)
    assert all(i.kind != "send_backward" for i in first)


def test_straddling_chunks_are_received_before_the_forward_that_cuts_them() -> None:
    """Stage 1's forward of samples 0..3 needs upstream chunks (0, 2) and (2, 5)."""
    plan = Plan.of([[2, 3, 1], [3, 3]], [[6], [6]], order=["FFFB", "FFB"])
    steps = lower(plan)[1]
    assert steps[:3] == [
        Instruction("recv_forward", 0, (0, 2)),
        Instruction("recv_forward", 1, (2, 5)),
        Instruction("forward", 0, (0, 3)),
    ]
    assert run(plan)[1] == [("F", (0, 3)), ("F", (3, 6)), ("B", (0, 6))]


def test_recomputes_names_the_stages_whose_backward_boundaries_are_not_forward_ones() -> None:
    aligned = Plan.of([[2, 2, 2], [3, 3]], [[4, 2], [6]], order=["FFFBB", "FFB"])
    assert recomputes(aligned) == [False, False]
    cut = Plan.of([[2, 2, 2], [3, 3]], [[3, 3], [6]], order=["FFFBB", "FFB"])
    assert recomputes(cut) == [True, False]


def test_an_order_that_breaks_rule_2_deadlocks_and_the_fakes_say_so() -> None:
    """Stage 0 runs its backward before the forward stage 1's backward needs: no rank can
    proceed; the fakes raise instead of hanging."""
    forward, backward = [[1, 1], [1, 1]], [[1, 1], [1, 1]]
    letters = ["FBFB", "FFBB"]
    plan = Plan.of(forward, backward, order=letters)
    assert first_violation(plan.stage_order(), forward, backward) is not None
    with pytest.raises(TimeoutError):
        run(plan, timeout=0.5)


def test_handlers_tell_the_transport_every_receive_in_order() -> None:
    """The receives a rank expects are its receive instructions, in order, with the specs
    (here: sizes) and peers the receives ask for."""
    from tidgap.runtime.handlers import PipelineHandlers

    class Recording:
        def expect(self, receives: list) -> None:
            self.receives = list(receives)

    plan = Plan.of([[4, 4], [2, 2, 4], [8]], [[8], [2, 6], [3, 5]], ["FFB", "FBFFB", "FB"])
    for rank, instructions in enumerate(lower(plan)):
        transport = Recording()
        handlers = PipelineHandlers(rank, SampleStage(rank == 0, rank == 2, []), transport)
        handlers.expect(instructions)
        wanted = [
            (hi - lo, rank - 1 if step.kind == "recv_forward" else rank + 1)
            for step in instructions
            if step.kind.startswith("recv")
            for lo, hi in [step.samples]
        ]
        assert wanted and transport.receives == wanted


def test_the_fakes_refuse_a_receive_other_than_the_expected_one() -> None:
    from tests.support.runtime_fakes import QueueNetwork

    transport = QueueNetwork(2, timeout=1.0).transport(1)
    transport.expect([(3, 0)])
    with pytest.raises(RuntimeError, match="expected"):
        transport.recv(2, 0)
