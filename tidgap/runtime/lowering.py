"""A plan's order lowered to per-rank instructions: receive, compute, send (model.md, Ordered
plans, Timing).

Stage ``s`` runs its letters in order. Before its forward ``k`` (1-based here) it receives,
in send order, the upstream chunks up to the one that holds the forward's last sample
(``holder(P[s-1], P[s][k])``); before backward ``k`` the downstream gradient chunks up to
``holder(Q[s+1], Q[s][k])``. A forward's output goes downstream and a backward's input
gradient upstream as soon as it is computed (sends are asynchronous; each link direction
keeps its send order, so receives need no tags). Samples are 0-based, half-open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tidgap.model.plan import Plan
from tidgap.schedules.ir import holder, prefix_sums

Kind = Literal[
    "recv_forward", "forward", "send_forward", "recv_backward", "backward", "send_backward"
]


@dataclass(frozen=True)
class Instruction:
    """One step of a rank. ``microbatch``: 0-based, this stage's own in its direction, except
    for a receive: the sender's chunk (the upstream stage's forward for ``recv_forward``, the
    downstream stage's backward for ``recv_backward``). ``samples``: ``(lo, hi)`` of that
    microbatch or chunk, 0-based, ``hi`` excluded."""

    kind: Kind
    microbatch: int
    samples: tuple[int, int]


def chunk(prefix: list[int], k: int) -> tuple[int, int]:
    """Microbatch ``k`` (0-based) of the partition with prefix sums ``prefix``: ``(lo, hi)``."""
    return prefix[k], prefix[k + 1]


def lower(plan: Plan) -> list[list[Instruction]]:
    """Per rank (stage), its instructions in execution order."""
    order = plan.stage_order()
    S = len(order.stages)
    P = [prefix_sums(sizes) for sizes in plan.forward]
    Q = [prefix_sums(sizes) for sizes in plan.backward]
    ranks: list[list[Instruction]] = []
    for s, letters in enumerate(order.stages):
        out: list[Instruction] = []
        received = {"F": 0, "B": 0}  # chunks received from upstream / downstream
        done = {"F": 0, "B": 0}
        for op in letters:
            k = done[op]
            if op == "F":
                if s > 0:
                    needed = holder(P[s - 1], P[s][k + 1])
                    for i in range(received["F"], needed):
                        out.append(Instruction("recv_forward", i, chunk(P[s - 1], i)))
                    received["F"] = max(received["F"], needed)
                out.append(Instruction("forward", k, chunk(P[s], k)))
                if s < S - 1:
                    out.append(Instruction("send_forward", k, chunk(P[s], k)))
            else:
                if s < S - 1:
                    needed = holder(Q[s + 1], Q[s][k + 1])
                    for i in range(received["B"], needed):
                        out.append(Instruction("recv_backward", i, chunk(Q[s + 1], i)))
                    received["B"] = max(received["B"], needed)
                out.append(Instruction("backward", k, chunk(Q[s], k)))
                if s > 0:
                    out.append(Instruction("send_backward", k, chunk(Q[s], k)))
            done[op] += 1
        ranks.append(out)
    return ranks


def recomputes(plan: Plan) -> list[bool]:
    """Per stage: whether some backward boundary is not a forward boundary, so its backward
    chunks re-run their forward from the stage's stored inputs (rematerialisation)."""
    flags = []
    for forward, backward in zip(plan.forward, plan.backward, strict=True):
        boundaries = set(prefix_sums(forward))
        flags.append(any(q not in boundaries for q in prefix_sums(backward)))
    return flags
