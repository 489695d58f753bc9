"""One event simulator, in plain Python, for any order (model.md, "Ordered plans", Timing).

The reference for every ordered plan and for 1F1B(m): unequal per-stage partitions,
re-chunking between stages (an operation waits for the sender's microbatch that holds its
last sample), one transfer at a time per link direction in send order, compute overlapping
the stage's own sends, tails. Stages are swept in turn, each running operations until one
waits for an input not yet computed, until all are done; an order that cannot finish
raises :class:`Deadlock`. Indices follow the spec: microbatches count from ``k = 1``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tidgap.model.problem import Problem
from tidgap.schedules.evaluation import Evaluation, iteration_time
from tidgap.schedules.ir import Order, holders, peak_held, prefix_sums
from tidgap.schedules.timeline import Step, Timeline, stage_names, tail_steps

#: ``op_time(s, op, k, size)``: how long stage ``s``'s ``op`` (``"F"`` or ``"B"``) number
#: ``k`` (1-based) of ``size`` samples takes, in the problem's time unit; by default the
#: problem's ``Tf_s(size)`` / ``Tb_s(size)``.
OpTime = Callable[[int, str, int, int], float]
#: ``link_time(l, op, k, size)``: how long link ``l -> l+1`` takes to carry the output of
#: op ``op`` number ``k`` (1-based) of ``size`` samples (``"F"``: stage ``l``'s forward,
#: ``"B"``: stage ``l+1``'s backward); by default the link's ``Cf_l(size)`` / ``Cb_l(size)``.
LinkTime = Callable[[int, str, int, int], float]


class Deadlock(RuntimeError):
    """The order cannot finish: every unfinished stage waits for an input never produced."""


@dataclass(frozen=True)
class Simulation:
    """Every operation and transfer of one order, in the problem's time unit.

    ``forward_ends[s][k]`` / ``backward_ends[s][k]``: ``EF`` / ``EB`` of stage ``s``,
    ``k = 1..`` (index 0 holds 0.0); ``stages[s]``: its compute steps in its order (no
    tail); ``links[l]``: link ``l -> l+1``'s transfers, both directions, as they are sent.
    """

    forward_ends: list[list[float]]
    backward_ends: list[list[float]]
    stages: list[list[Step]]
    links: list[list[Step]]


def simulate(
    problem: Problem,
    forward: Sequence[Sequence[int]],
    backward: Sequence[Sequence[int]],
    order: Order,
    op_time: OpTime | None = None,
    link_time: LinkTime | None = None,
    steps_kept: bool = True,
) -> Simulation:
    """Time ``order`` over the sizes ``forward[s]`` / ``backward[s]`` (samples), each op
    taking ``op_time`` and each transfer ``link_time`` (default: the problem's time
    functions). Without ``steps_kept`` the simulation's ``stages`` and ``links`` stay
    empty (the same end times, in under half the time at 1024 stages: all an evaluation
    needs).

    Forward ``k`` of ``s`` starts at ``max(free_s, A[s-1][i])``; backward ``k`` at
    ``max(free_s, EF[s][i_own], A'[s+1][i])``; ``A[s][k] = max(EF[s][k], A[s][k-1]) +
    Cf_s(f[s][k])`` and ``A'[s][k] = max(EB[s][k], A'[s][k-1]) + Cb_{s-1}(c[s][k])``.
    """
    S = problem.num_stages
    P = [prefix_sums(sizes) for sizes in forward]
    Q = [prefix_sums(sizes) for sizes in backward]
    EF: list[list[float]] = [[0.0] for _ in range(S)]
    EB: list[list[float]] = [[0.0] for _ in range(S)]
    activations: list[list[float]] = [[-math.inf] for _ in range(S)]  # A[s], sent s -> s+1
    gradients: list[list[float]] = [[-math.inf] for _ in range(S)]  # A'[s], sent s -> s-1
    steps: list[list[Step]] = [[] for _ in range(S)]
    links: list[list[Step]] = [[] for _ in range(S - 1)]
    # the microbatch holding each op's last sample: of the stage before (F), its own
    # forwards (B) and the stage after's backwards (B), as holder() finds them
    sent_forward = [[]] + [holders(P[s - 1], P[s]) for s in range(1, S)]
    own_forward = [holders(P[s], Q[s]) for s in range(S)]
    sent_backward = [holders(Q[s + 1], Q[s]) for s in range(S - 1)] + [[]]
    position, free = [0] * S, [0.0] * S
    # waiting[s]: stage s's next op waits for an input that its neighbours have not sent
    # since (a sweep skips it: the same ops in the same order, without asking again)
    waiting = [False] * S

    def ready(s: int, op: str) -> float | None:
        """When stage ``s``'s next ``op`` may start, or ``None`` while an input is missing."""
        if op == "F":
            k = len(EF[s])
            if s == 0:
                return free[s]
            i = sent_forward[s][k]
            return max(free[s], activations[s - 1][i]) if i < len(EF[s - 1]) else None
        k = len(EB[s])
        own = own_forward[s][k]
        if own >= len(EF[s]):
            return None
        if s == S - 1:
            return max(free[s], EF[s][own], 0.0)
        i = sent_backward[s][k]
        return max(free[s], EF[s][own], gradients[s + 1][i]) if i < len(EB[s + 1]) else None

    def run(s: int, op: str, start: float) -> None:
        """Run stage ``s``'s next ``op`` from ``start`` and send its output."""
        stage = problem.stages[s]
        ends, prefix, compute = (
            (EF[s], P[s], stage.forward) if op == "F" else (EB[s], Q[s], stage.backward)
        )
        k = len(ends)
        size = prefix[k] - prefix[k - 1]
        samples = (prefix[k - 1] + 1, prefix[k])
        end = start + (compute(size) if op_time is None else op_time(s, op, k, size))
        ends.append(end)
        if steps_kept:
            steps[s].append(Step(op, k - 1, samples, start, end))
        free[s] = end
        if op == "F" and s < S - 1:
            send(s, activations[s], op, k, size, samples, end)
            waiting[s + 1] = False
        elif op == "B" and s > 0:
            send(s - 1, gradients[s], op, k, size, samples, end)
            waiting[s - 1] = False

    def send(
        link: int, sent: list[float], op: str, k: int, size: int, samples: tuple, end: float
    ) -> None:
        """Carry op ``k``'s output over ``link`` once it and the link's previous transfer
        in that direction (``sent``, arrival times) are done."""
        begin = max(end, sent[-1])
        if link_time is not None:
            duration = link_time(link, op, k, size)
        else:
            carry = problem.links[link]
            duration = carry.forward(size) if op == "F" else carry.backward(size)
        sent.append(begin + duration)
        if steps_kept:
            links[link].append(Step(op, k - 1, samples, begin, sent[-1]))

    remaining = sum(len(letters) for letters in order.stages)
    while remaining:
        progressed = False
        for s, letters in enumerate(order.stages):
            if waiting[s]:
                continue
            while position[s] < len(letters):
                start = ready(s, letters[position[s]])
                if start is None:
                    waiting[s] = True
                    break
                run(s, letters[position[s]], start)
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = [
                f"stage {s} at position {position[s]}"
                for s in range(S)
                if position[s] < len(order.stages[s])
            ]
            raise Deadlock(f"the order cannot finish: {', '.join(stuck)} wait forever")
    return Simulation(EF, EB, steps, links)


def evaluate_order(
    problem: Problem,
    forward: Sequence[Sequence[int]],
    backward: Sequence[Sequence[int]],
    order: Order,
    op_time: OpTime | None = None,
    link_time: LinkTime | None = None,
) -> Evaluation:
    """End times, ``iteration_time = max_s(EB[s][N_s] + tail_s)`` and ``peak_held`` of a
    valid ``order`` over the sizes ``forward`` / ``backward`` (samples); ``op_time`` and
    ``link_time`` as :func:`simulate`."""
    simulation = simulate(problem, forward, backward, order, op_time, link_time, steps_kept=False)
    return Evaluation.of(
        problem,
        [ends[-1] for ends in simulation.forward_ends],
        [ends[-1] for ends in simulation.backward_ends],
        peak_held(order, forward, backward),
    )


def order_timeline(
    problem: Problem,
    forward: Sequence[Sequence[int]],
    backward: Sequence[Sequence[int]],
    order: Order,
    label: str,
    op_time: OpTime | None = None,
    link_time: LinkTime | None = None,
) -> Timeline:
    """Every step of a valid ``order``, each stage's tail after its last backward;
    ``op_time`` and ``link_time`` as :func:`simulate`."""
    simulation = simulate(problem, forward, backward, order, op_time, link_time)
    stages = [
        steps + tail_steps(problem, s, steps[-1].end) for s, steps in enumerate(simulation.stages)
    ]
    iteration = iteration_time(problem, [ends[-1] for ends in simulation.backward_ends])
    return Timeline(
        label, problem.time_unit, stage_names(problem), stages, simulation.links, iteration
    )
