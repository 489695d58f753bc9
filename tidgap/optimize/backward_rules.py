"""What a search may do with each stage's backward partition, by rule name.

- ``free``: any backward partition (model.md: the backward partition is its own);
- ``aligned``: every backward boundary of a stage is one of its forward boundaries, so
  ``tidgap run`` runs each backward on its forwards' stored graphs and recomputes nothing
  (:func:`tidgap.runtime.lowering.recomputes`);
- ``mirrored``: each stage's backward partition is its forward one, so every backward runs
  on one forward's stored graph and ``tidgap run`` runs the plan at the model's op costs
  (:func:`tidgap.runtime.pricing.run_op_times` prices nothing): its prediction is
  the model's time.
"""

from __future__ import annotations

from typing import Any

from tidgap.backends.xp import namespace
from tidgap.model.problem import Problem
from tidgap.optimize.order_genes import misaligned

FREE = "free"
ALIGNED = "aligned"
MIRRORED = "mirrored"
#: The rules, by name.
BACKWARD_RULES = (FREE, ALIGNED, MIRRORED)


def check_rule(rule: str) -> str:
    """``rule`` if it names a rule, else :class:`ValueError`."""
    if rule not in BACKWARD_RULES:
        raise ValueError(f"unknown backward rule {rule!r}; known: {', '.join(BACKWARD_RULES)}")
    return rule


def admitted_rule(rule: str, problem: Problem) -> str:
    """``rule``, or ``aligned`` where it is ``free`` and ``problem`` records layers that
    normalise by their batch's statistics (:attr:`~tidgap.model.problem.Problem.
    batch_statistics_layers`): recomputed on the backward's chunks, such a layer would
    normalise by other statistics than the forward did, and ``tidgap run`` refuses a
    recomputing stage holding one (:func:`tidgap.cli.workers.require_consistent_recompute`).
    Every stage is kept from recomputing: in the models that have them (ResNets, VGG-BN),
    every stage holds one."""
    return ALIGNED if rule == FREE and problem.batch_statistics_layers else rule


def breaks(rule: str, forward: Any, backward: Any) -> Any:
    """``(P,)`` bool: the individuals whose ``(P, S, K)`` partitions ``rule`` refuses."""
    if rule == ALIGNED:
        return misaligned(forward, backward)
    if rule == MIRRORED:
        return (forward != backward).any(axis=(1, 2))
    return namespace(forward).zeros(forward.shape[0], dtype=bool)


def rule_caps(rule: str, forward_caps: Any, backward_caps: Any) -> tuple[Any, Any]:
    """The ``(S,)`` caps (units) of each direction under ``rule``: a mirrored partition is
    within both directions' caps."""
    if rule != MIRRORED:
        return forward_caps, backward_caps
    both = namespace(forward_caps).minimum(forward_caps, backward_caps)
    return both, both


def refusal(rule: str) -> str:
    """What ``rule`` asks of a plan, to end "no plan found ...": empty for ``free``."""
    if rule == MIRRORED:
        return " whose backward partitions are its forward ones"
    return "" if rule == FREE else " that needs no recomputation"
