"""Plans <-> population arrays: the dual chromosome as two dense integer arrays.

A chromosome is ``(S, K)`` microbatch sizes in units, stage by stage, each row's
microbatches first and zeros after (``K`` is the most microbatches a stage may use).
A population is ``forward`` and ``backward`` chromosomes stacked: ``(P, S, K)`` each.
The same arrays live on NumPy or CuPy (``xp``) unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem

#: Integer type of the chromosomes (sizes in units; the unit count fits comfortably).
GENE = np.int32


@dataclass(frozen=True)
class Population:
    """Dual chromosomes: ``forward`` and ``backward``, ``(P, S, K)`` sizes in units."""

    forward: Any
    backward: Any

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
    rows = np.asarray(genes.get() if hasattr(genes, "get") else genes)
    return [[int(u) * unit for u in row if u > 0] for row in rows]


def encode_plan(plan: Plan, problem: Problem, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A plan as its ``(forward, backward)`` chromosomes, each ``(S, width)``."""
    return (
        encode_partitions(plan.forward, problem.unit, width),
        encode_partitions(plan.backward, problem.unit, width),
    )


def decode_plan(forward: Any, backward: Any, problem: Problem) -> Plan:
    """The plan of one individual's ``(S, K)`` forward and backward chromosomes."""
    return Plan.of(
        decode_partitions(forward, problem.unit), decode_partitions(backward, problem.unit)
    )
