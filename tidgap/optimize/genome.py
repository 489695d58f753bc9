"""Plans <-> population arrays: the dual chromosome as two dense integer arrays.

A chromosome is ``(S, K)`` microbatch sizes in units, stage by stage, each row's
microbatches first and zeros after (``K`` is the most microbatches a stage may use).
A population is ``forward`` and ``backward`` chromosomes stacked: ``(P, S, K)`` each.
An ordered population also carries each stage's explicit order: ``(P, S, L)`` int8 op
codes, :data:`FORWARD_OP` / :data:`BACKWARD_OP` in the stage's order, then
:data:`NO_OP` after its ``M_s + N_s`` ops (``L = 2K`` when written by :func:`encode_order`).
The same arrays live on NumPy or CuPy (``xp``) unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tidgap.backends.xp import to_host
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.schedules.ir import Order

#: Integer type of the chromosomes (sizes in units; the unit count fits comfortably).
GENE = np.int32
#: Integer type of the order genes, and its three codes: a forward, a backward, padding.
ORDER_GENE = np.int8
FORWARD_OP, BACKWARD_OP, NO_OP = 0, 1, -1
_CODES = {"F": FORWARD_OP, "B": BACKWARD_OP}
_LETTERS = {code: letter for letter, code in _CODES.items()}


@dataclass(frozen=True)
class Population:
    """Dual chromosomes: ``forward`` and ``backward``, ``(P, S, K)`` sizes in units, and for
    ordered plans ``order``, ``(P, S, L)`` op codes (``None`` for flush populations)."""

    forward: Any
    backward: Any
    order: Any = None

    @property
    def size(self) -> int:
        """``P``."""
        return int(self.forward.shape[0])


def encode_partitions(partitions: list[list[int]], unit: int, width: int) -> np.ndarray:
    """Per-stage sizes in samples -> ``(S, width)`` sizes in units, zero-padded."""
    genes = np.zeros((len(partitions), width), dtype=GENE)
    for s, sizes in enumerate(partitions):
        if len(sizes) > width:
            raise ValueError(f"stage {s} has {len(sizes)} microbatches, more than {width}")
        genes[s, : len(sizes)] = [size // unit for size in sizes]
    return genes


def decode_partitions(genes: Any, unit: int) -> list[list[int]]:
    """``(S, K)`` sizes in units (NumPy or CuPy) -> per-stage sizes in samples."""
    rows = to_host(genes)
    return [[int(u) * unit for u in row if u > 0] for row in rows]


def encode_plan(plan: Plan, problem: Problem, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A plan as its ``(forward, backward)`` chromosomes, each ``(S, width)``."""
    return (
        encode_partitions(plan.forward, problem.unit, width),
        encode_partitions(plan.backward, problem.unit, width),
    )


def encode_order(plan: Plan, width: int) -> np.ndarray:
    """A plan's order (``plan.stage_order()``) as ``(S, 2 * width)`` op codes, padded with
    :data:`NO_OP`; ``width`` is the chromosomes' ``K``."""
    stages = plan.stage_order().stages
    genes = np.full((len(stages), 2 * width), NO_OP, dtype=ORDER_GENE)
    for s, letters in enumerate(stages):
        if len(letters) > 2 * width:
            raise ValueError(f"stage {s} has {len(letters)} operations, more than {2 * width}")
        genes[s, : len(letters)] = [_CODES[letter] for letter in letters]
    return genes


def decode_order(genes: Any) -> Order:
    """``(S, L)`` op codes (NumPy or CuPy) -> the order's letters, padding dropped."""
    rows = to_host(genes)
    unknown = set(np.unique(rows).tolist()) - set(_LETTERS) - {NO_OP}
    if unknown:
        raise ValueError(f"op code {min(unknown)} is not one of {sorted(_LETTERS)} or {NO_OP}")
    return Order.of(["".join(_LETTERS[int(code)] for code in row if code != NO_OP) for row in rows])


def decode_plan(forward: Any, backward: Any, problem: Problem, order: Any = None) -> Plan:
    """The plan of one individual's ``(S, K)`` forward and backward chromosomes and, for an
    ordered plan, its ``(S, L)`` order genes."""
    letters = None if order is None else list(decode_order(order).stages)
    return Plan.of(
        decode_partitions(forward, problem.unit),
        decode_partitions(backward, problem.unit),
        order=letters,
    )
