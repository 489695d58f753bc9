"""What a search may do with each stage's backward partition, by rule name.

- ``free``: any backward partition (model.md: the backward partition is its own);
- ``aligned``: every backward boundary of a stage is one of its forward boundaries, so
  ``tidgap run`` runs each backward on its forwards' stored graphs and recomputes nothing
  (:func:`tidgap.runtime.lowering.recomputes`).
"""

from __future__ import annotations

from typing import Any

from tidgap.backends.xp import namespace
from tidgap.optimize.order_genes import misaligned

FREE = "free"
ALIGNED = "aligned"
#: The rules, by name.
BACKWARD_RULES = (FREE, ALIGNED)


def check_rule(rule: str) -> str:
    """``rule`` if it names a rule, else :class:`ValueError`."""
    if rule not in BACKWARD_RULES:
        raise ValueError(f"unknown backward rule {rule!r}; known: {', '.join(BACKWARD_RULES)}")
    return rule


def breaks(rule: str, forward: Any, backward: Any) -> Any:
    """``(P,)`` bool: the individuals whose ``(P, S, K)`` partitions ``rule`` refuses."""
    if rule == ALIGNED:
        return misaligned(forward, backward)
    return namespace(forward).zeros(forward.shape[0], dtype=bool)


def refusal(rule: str) -> str:
    """What ``rule`` asks of a plan, to end "no plan found ...": empty for ``free``."""
    return "" if rule == FREE else " that needs no recomputation"
