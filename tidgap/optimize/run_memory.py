"""Memory limits priced as ``tidgap run`` holds plans: run pricing
(:data:`~tidgap.backends.ticks.RUN_PRICING`) extended from op times to memory.

model.md prices a stage's memory as its held samples times ``activation_bytes``: what a
stage that stores its forwards' graphs holds. A recomputing stage (some backward boundary
is not a forward boundary) stores no graph: it keeps its received input and gradient
chunks and its forwards' random draws, and holds one backward's working set at a time
(:mod:`tidgap.runtime.recompute_memory` walks one plan's instructions for the exact
figure, from the bytes per sample ``tidgap profile`` records under ``source.memory``).
On a transformer stage that is a fraction of the model's figure, so a search that counts
it can trade time for memory by recomputing, as activation checkpointing does.

The search needs the figure for a whole population at once: :meth:`RunMemory.held_bytes`
computes that walk's peak with array passes over the genes (equal to it, tested). Limits
stay in samples of ``activation_bytes`` (:class:`~tidgap.optimize.limits.MemoryLevel`): a
recomputing stage counts as the samples whose activations would take as many bytes
(:func:`samples_of`), at most the whole batch (a stage whose inputs and draws outweigh its
saved activations counts as holding the whole batch). :func:`run_held` gives one plan's
figures for the search's result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tidgap.backends.xp import namespace
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.order_genes import (
    counts,
    holder_per_stage,
    own_forwards,
    prefix,
    recomputing_stages,
)
from tidgap.runtime.lowering import recomputes
from tidgap.runtime.recompute_memory import predicted_held_bytes, recompute_bytes
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.held import over_limits


def samples_of(memory: Any, activation: Any, held: Any, batch_size: int) -> Any:
    """``(..., S)`` int64: ``ceil(memory / activation)`` samples, at most ``batch_size``;
    ``held`` where a stage's ``activation`` is not positive (a limit cannot bind there)."""
    xp = namespace(memory)
    positive = activation > 0
    samples = xp.ceil(memory / xp.where(positive, activation, 1.0))
    return xp.where(positive, xp.minimum(samples, batch_size), held).astype(xp.int64)


#: Rows of :attr:`RunMemory.figures`: bytes per sample received, sent, drawn, of a
#: backward's working set, and the whole batch's task tensors (bytes), per stage.
INPUT, OUTPUT, DRAWS, BACKWARD, TASK = range(5)

#: ``compiled(peaks, forward, backward, lead, memory) -> samples``: a backend's compiled
#: twin of :meth:`RunMemory.held` (its record's ``run_memory``).
CompiledHeld = Callable[[Any, Any, Any, Any, "RunMemory"], Any]


@dataclass(frozen=True)
class RunMemory:
    """What a recomputing stage holds, per stage, on the search's array module:
    ``figures`` ``(5, S)`` float64 (rows :data:`INPUT`, :data:`OUTPUT` (the next stage's
    input; 0 on the last), :data:`DRAWS`, :data:`BACKWARD` in bytes per sample, :data:`TASK`
    in bytes), ``activation`` ``(S,)`` (``activation_bytes``), ``unit`` samples per
    partition unit, and the backend's ``compiled`` twin of :meth:`held`, if any. The
    per-sample figures are rounded up to whole bytes (``tidgap profile`` writes whole
    bytes), so every backend sums exact integers."""

    figures: Any
    activation: Any
    batch_size: int
    unit: int
    compiled: CompiledHeld | None = None

    @classmethod
    def of(
        cls, problem: Problem, xp: Any = np, compiled: CompiledHeld | None = None
    ) -> RunMemory | None:
        """The problem's figures on ``xp``; ``None`` where it has no usable
        ``source.memory`` or no ``activation_bytes`` (its limits then stay the model's)."""
        stages = recompute_bytes(problem)
        if stages is None:
            return None
        column = np.ceil(np.asarray(stages, dtype=np.float64).T)  # (4, S): input .. task
        B = problem.batch_size
        output = np.append(column[0, 1:], 0.0)
        figures = np.stack([column[0], output, column[1], column[2], column[3] * B])
        activation = [float(stage.activation_bytes or 0.0) for stage in problem.stages]
        return cls(
            xp.asarray(figures), xp.asarray(activation, dtype=xp.float64), B, problem.unit, compiled
        )

    def held(self, peaks: Any, forward: Any, backward: Any, lead: Any) -> Any:
        """``(P, S)`` int64 samples as the limits count them: ``peaks`` (the model's peak
        held samples) on stages that store graphs, :func:`samples_of` the bytes
        :meth:`held_bytes` on recomputing ones."""
        if self.compiled is not None:
            return self.compiled(peaks, forward, backward, lead, self)
        counted = samples_of(
            self.held_bytes(forward, backward, lead), self.activation, peaks, self.batch_size
        )
        return namespace(peaks).where(recomputing_stages(forward, backward), counted, peaks)

    def held_bytes(self, forward: Any, backward: Any, lead: Any) -> Any:
        """``(P, S)`` float64: the most bytes each stage would hold at an op's end if it
        recomputed, as :func:`~tidgap.runtime.recompute_memory.recompute_held_bytes` walks
        it, for ``(P, S, K)`` sizes in units and the canonical ``lead`` of repaired genes.

        With backward ``k`` covering ``lo..hi`` after ``a_k`` forwards, ending at ``E``: the
        stage keeps the received input chunks from the one holding ``lo`` to the one
        holding ``E``, its forwards' draws from its own chunk holding ``lo`` to ``E``, and
        the received gradient chunks from the one holding ``lo`` to the one holding ``hi``;
        the backward adds its samples' working set (less its input and masks where one
        chunk holds them all: views) and the batch's task tensors. Before it, after the
        last forward since backward ``k - 1``, the same but the gradients only up to those
        backward ``k - 1`` received."""
        xp = namespace(forward)
        forward_prefix, backward_prefix = prefix(forward), prefix(backward)
        before = own_forwards(forward_prefix, backward_prefix) + lead.astype(xp.int64)
        before = xp.minimum(before, counts(forward)[..., None])
        lo, hi = backward_prefix[..., :-1], backward_prefix[..., 1:]
        upstream = xp.concatenate([forward_prefix[:, :1], forward_prefix[:, :-1]], axis=1)
        downstream = xp.concatenate([backward_prefix[:, 1:], backward_prefix[:, -1:]], axis=1)
        end = xp.take_along_axis(forward_prefix, before, axis=-1)
        inputs, one_input = _from_chunk_holding(upstream, lo, hi)
        inputs = _at(upstream, holder_per_stage(upstream, end)) - inputs
        draws, one_draw = _from_chunk_holding(forward_prefix, lo, hi)
        draws = end - draws
        gradients_from = _from_chunk_holding(downstream, lo, hi)[0]
        received = _at(downstream, holder_per_stage(downstream, hi))
        earlier = xp.concatenate([xp.zeros_like(received[..., :1]), received[..., :-1]], axis=-1)
        size = (hi - lo).astype(xp.float64)
        received_input, sent, drawn, work, task = (row[None, :, None] for row in self.figures)
        kept = received_input * inputs + drawn * draws
        at_backward = kept + sent * (received - gradients_from)
        at_backward += size * (work - received_input * one_input - drawn * one_draw)
        at_forward = kept + sent * xp.maximum(earlier - gradients_from, 0)
        previous = xp.concatenate([xp.full_like(before[..., :1], -1), before[..., :-1]], axis=-1)
        at_forward = xp.where(before > previous, at_forward, 0.0)
        peak = xp.maximum(at_backward * self.unit + task, at_forward * self.unit)
        backwards = xp.arange(lead.shape[-1])[None, None, :] < counts(backward)[..., None]
        return xp.where(backwards, peak, 0.0).max(axis=-1)


def _at(prefixes: Any, index: Any) -> Any:
    """``prefixes[..., index]`` along the last axis."""
    return namespace(prefixes).take_along_axis(prefixes, index, axis=-1)


def _from_chunk_holding(prefixes: Any, lo: Any, hi: Any) -> tuple[Any, Any]:
    """For chunks with prefix sums ``prefixes``: the start of the chunk holding sample
    (unit) ``lo``, and whether that chunk also holds ``hi - 1`` (``(P, S, K)`` each; a
    ``lo`` at the end, past a row's last backward, reads the last chunk)."""
    xp = namespace(prefixes)
    holding = holder_per_stage(prefixes, xp.minimum(lo + 1, prefixes[..., -1:]))
    return _at(prefixes, holding - 1), _at(prefixes, holding) >= hi


def run_held(problem: Problem, plan: Plan, evaluation: Evaluation) -> tuple[Evaluation, list[int]]:
    """``evaluation`` of ``plan`` with ``peak_memory`` (and ``over_memory_limit``) as
    ``tidgap run`` holds it (:func:`~tidgap.runtime.recompute_memory.predicted_held_bytes`),
    and each stage's samples as a run-priced search's limits count them
    (:func:`samples_of` on recomputing stages, the model's ``peak_held`` elsewhere); as
    they are where the problem has no ``source.memory``."""
    memory = predicted_held_bytes(problem, plan, evaluation.peak_memory)
    if recompute_bytes(problem) is None or memory is None:
        return evaluation, list(evaluation.peak_held)
    activation = np.asarray([s.activation_bytes for s in problem.stages], dtype=np.float64)
    peaks = np.asarray(evaluation.peak_held, dtype=np.int64)
    counted = samples_of(np.asarray(memory), activation, peaks, problem.batch_size)
    held = np.where(recomputes(plan), counted, peaks)
    priced = replace(evaluation, peak_memory=memory, over_memory_limit=over_limits(problem, memory))
    return priced, [int(h) for h in held]
