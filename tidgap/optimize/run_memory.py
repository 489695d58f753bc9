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

The search needs the figures for a whole population at once: :meth:`RunMemory.held`
computes those walks' peaks with array passes over the genes (equal to them, tested), for
recomputing stages and for stages that store graphs (which also keep the received chunks
reaching past their last op; a forward copies its part of a chunk). It counts them in
:data:`FINE` units, a 65536th of a sample's activations, rounded up (a stage may hold
more than its whole batch's activations: inputs and draws, tensors made once per forward,
the task's; on a stage with a byte limit in force the unit is stretched, by less than one
part in the units the limit holds, so that a plan is within the limit in units exactly when
it is in bytes: :meth:`RunMemory.fitted`), and compares them with each level's byte limit
where it has one and, where the level is bound by the best 1F1B's samples, with those
samples plus what the best 1F1B holds beyond them (or less: its overhead may be negative),
even at the whole batch and where a byte limit allows fewer samples (:meth:`RunMemory.limit`,
so the 1F1B level admits 1F1B and nothing holding more); nothing where the whole batch
comes from no limit.
:func:`run_evaluated` gives one plan's figures for the search's result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tidgap.backends.xp import namespace, to_host
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.limits import MemoryLevel
from tidgap.optimize.operators import microbatch_counts
from tidgap.optimize.order_genes import (
    holder_per_stage,
    own_forwards,
    prefix,
    recomputing_stages,
)
from tidgap.runtime.recompute_memory import graph_bytes, predicted_held_bytes, recompute_bytes
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.held import ROUNDING, over_limits

#: Fine units per sample: a search counting memory as ``tidgap run`` holds it counts each
#: stage in ``1 / FINE`` of a sample's activations (a power of two: scaling is exact).
FINE = 1 << 16


def fine_units(memory: Any, activation: Any, held: Any) -> Any:
    """``(..., S)`` int64: ``memory`` bytes in :data:`FINE` units of ``activation`` bytes,
    rounded up (more than the batch's where a stage holds more than its activations);
    ``held`` samples where a stage's ``activation`` is not positive (a limit cannot bind
    there)."""
    xp = namespace(memory)
    positive = activation > 0
    units = xp.ceil(memory * FINE / xp.where(positive, activation, 1.0))
    return xp.where(positive, units, held * FINE).astype(xp.int64)


#: What :meth:`RunMemory.limit` allows a stage no limit binds (the whole batch, no byte
#: limit), in :data:`FINE` units: more than any count.
NO_LIMIT = 2**62


#: Rows of :attr:`RunMemory.figures`: bytes per sample received, sent, drawn, of a
#: backward's working set, the whole batch's task tensors (bytes), a stored graph's bytes
#: per sample and per chunk, a backward's working set's bytes per chunk, and the draws'
#: bytes per sample that working set shares with one forward's kept draws, per stage.
INPUT, OUTPUT, DRAWS, BACKWARD, TASK = range(5)
GRAPH_SAMPLE, GRAPH_CHUNK, BACKWARD_CHUNK, DRAW_VIEWS = range(5, 9)
#: The number of those rows.
ROWS = 9

#: ``compiled(peaks, forward, backward, lead, memory) -> units``: a backend's compiled
#: twin of :meth:`RunMemory.held` (its record's ``run_memory``).
CompiledHeld = Callable[[Any, Any, Any, Any, "RunMemory"], Any]


@dataclass(frozen=True)
class RunMemory:
    """The figures that say what stages hold as ``tidgap run`` runs them, per stage, on the
    search's array module: ``figures`` ``(ROWS, S)`` float64 (rows :data:`INPUT`,
    :data:`OUTPUT` (the next stage's input; 0 on the last), :data:`DRAWS`, :data:`BACKWARD`
    in bytes per sample, :data:`TASK` in bytes, :data:`GRAPH_SAMPLE` and
    :data:`GRAPH_CHUNK`: :class:`~tidgap.runtime.recompute_memory.GraphBytes`,
    :data:`BACKWARD_CHUNK` in bytes, :data:`DRAW_VIEWS` in bytes per sample:
    :meth:`~tidgap.runtime.recompute_memory.RecomputeBytes.draw_views`), ``activation``
    ``(S,)``: the bytes :data:`FINE` units make (``activation_bytes``; a little more on a
    stage :meth:`fitted` to a byte limit), ``unit`` samples per partition unit, the
    backend's ``compiled`` twin of :meth:`held`, if any, and ``overhead`` ``(S,)``: the
    units the best 1F1B holds beyond its samples (:meth:`with_reference`), which a limit in
    samples allows. The figures are rounded up to whole bytes (``tidgap profile`` writes
    whole bytes), so every backend sums exact integers."""

    figures: Any
    activation: Any
    batch_size: int
    unit: int
    compiled: CompiledHeld | None = None
    overhead: Any = None

    @classmethod
    def of(cls, problem: Problem) -> RunMemory | None:
        """The problem's figures on the host (:meth:`on` moves them); ``None`` where it has
        no usable ``source.memory`` or no ``activation_bytes`` (its limits then stay the
        model's)."""
        stages = recompute_bytes(problem)
        if stages is None:
            return None
        rows = [(*stage[:5], stage.draw_views()) for stage in stages]
        column = np.ceil(np.asarray(rows, dtype=np.float64).T)  # (6, S): input .. views
        graphs = np.ceil(np.asarray(graph_bytes(problem), dtype=np.float64).T)  # (2, S)
        B = problem.batch_size
        output = np.append(column[0, 1:], 0.0)
        figures = np.stack(
            [column[0], output, column[1], column[2], column[3] * B, *graphs, *column[4:]]
        )
        activation = [float(stage.activation_bytes or 0.0) for stage in problem.stages]
        return cls(figures, np.asarray(activation, dtype=np.float64), B, problem.unit)

    def fitted(self, caps: tuple[float, ...] | None) -> RunMemory:
        """These figures with each stage's unit fitted to its byte limit in ``caps``
        ``(S,)`` (``inf``: none; ``None``: on no stage; a level's ``bytes_cap``):
        :attr:`activation` ``a`` made a little larger, ``a'`` (by less than one part in
        ``L = floor(cap * FINE / a)``, the limit's units, below ``2**53`` of them), such that
        ``cap * FINE / a'`` rounds to ``L`` or a few ulps below (a unit is ``a' / FINE``
        bytes); not where ``L`` is 0 or :data:`NO_LIMIT` or more.
        :meth:`held` then counts a plan holding at most ``cap`` bytes at most ``L`` units
        and one holding a byte more over ``L``, and :meth:`limit` allows ``L``; with the
        unit ``activation / FINE`` the limit (rounded down) and the plan (rounded up) fall
        apart, and a plan holding exactly the limit, the best 1F1B's own bytes, was
        refused. Another byte limit on the stage is kept as before (a plan within one unit
        under it may be refused)."""
        if caps is None:
            return self
        xp = namespace(self.activation)
        activation = to_host(self.activation).astype(np.float64)
        for s, cap in enumerate(caps):
            unit = float(activation[s])
            if not (np.isfinite(cap) and unit > 0):
                continue
            whole = np.floor(cap * FINE / unit)
            if not 1 <= whole < NO_LIMIT:  # no unit to fit, or none a limit can hold
                continue
            unit = cap * FINE / whole
            while cap * FINE / unit > whole:
                unit = np.nextafter(unit, np.inf)
            activation[s] = unit
        return replace(self, activation=xp.asarray(activation, dtype=xp.float64))

    def on(self, xp: Any, compiled: CompiledHeld | None = None) -> RunMemory:
        """These figures on the array module ``xp`` with the backend's ``compiled`` twin
        of :meth:`held` (``None``: the array passes)."""
        overhead = None if self.overhead is None else xp.asarray(to_host(self.overhead))
        return replace(
            self,
            figures=xp.asarray(to_host(self.figures)),
            activation=xp.asarray(to_host(self.activation)),
            compiled=compiled,
            overhead=overhead,
        )

    def with_reference(self, peaks: Any, forward: Any, backward: Any, lead: Any) -> RunMemory:
        """These figures with :attr:`overhead` set from one reference plan (the best 1F1B:
        ``(1, S)`` peaks and ``(1, S, K)`` genes): what it holds beyond its samples, so that
        a level in its samples admits it and no plan holding more (negative where it holds
        less than its samples' activations: a profile's per-chunk bytes spread over chunks
        larger than it measured)."""
        xp = namespace(self.activation)
        units = self.held(peaks, forward, backward, lead)[0] - peaks[0] * FINE
        return replace(self, overhead=xp.asarray(units, dtype=xp.int64))

    def samples_units(self, peaks: Any) -> Any:
        """``(P, S)`` int64 units of plans known only by their ``(P, S)`` peak held samples
        (an ask/tell caller's): the samples whole, less the best 1F1B's :attr:`overhead`
        where it is negative (so a plan holding its samples is within the 1F1B level)."""
        units = peaks * FINE
        if self.overhead is None:
            return units
        xp = namespace(units)
        return xp.maximum(units + xp.minimum(self.overhead, 0), 0)

    def limit(self, level: MemoryLevel) -> Any:
        """``(S,)`` int64: what ``level`` allows each stage, in :data:`FINE` units: where it
        has a byte limit, that limit in units rounded down (even above the batch's
        activations; as model.md, bytes within :data:`~tidgap.schedules.held.ROUNDING`
        above a limit are at it, so a limit :meth:`fitted` a few ulps below ``L`` units
        allows ``L``), and where it has a ``bound`` also those samples and the best 1F1B's
        :attr:`overhead`, the least of the two; else its samples and that overhead, or
        :data:`NO_LIMIT` where they are the whole batch and no bound."""
        xp = namespace(self.activation)
        bounds = level.bound or (None,) * len(level.held)
        bound = xp.asarray([b is not None for b in bounds], dtype=bool)
        samples = [h if b is None else b for h, b in zip(level.held, bounds, strict=True)]
        samples = xp.asarray(samples, dtype=xp.int64)
        held = samples * FINE
        if self.overhead is not None:
            held = xp.maximum(held + self.overhead, 0)
        held = xp.where((samples >= self.batch_size) & ~bound, NO_LIMIT, held)
        if level.bytes_cap is None:
            return held
        caps = xp.asarray(level.bytes_cap, dtype=xp.float64)
        binding = xp.isfinite(caps) & (self.activation > 0)
        # caps / activation, then times FINE (a power of two: the same float as caps * FINE
        # / activation, which the counts compute), at most NO_LIMIT (no overflow to 1e308)
        in_samples = xp.where(binding, caps, 0.0) / xp.where(binding, self.activation, 1.0)
        units = xp.minimum(in_samples, NO_LIMIT // FINE) * FINE
        units = xp.minimum(xp.floor(units + units * ROUNDING), NO_LIMIT).astype(xp.int64)
        return xp.where(binding, xp.where(bound, xp.minimum(units, held), units), held)

    def held(self, peaks: Any, forward: Any, backward: Any, lead: Any) -> Any:
        """``(P, S)`` int64, in :data:`FINE` units, what each stage holds as ``tidgap run``
        runs it, for ``(P, S, K)`` sizes in units, the canonical ``lead`` of repaired genes
        and the model's ``(P, S)`` peak held samples ``peaks``: on recomputing stages the
        bytes :meth:`held_bytes`, on stages that store graphs :meth:`_stored_bytes`, both
        in units by :func:`fine_units`."""
        if self.compiled is not None:
            return self.compiled(peaks, forward, backward, lead, self)
        chunks = _Chunks.of(forward, backward, lead)
        recomputing = fine_units(self._recomputing_bytes(chunks), self.activation, peaks)
        stored = fine_units(self._stored_bytes(chunks), self.activation, peaks)
        return namespace(peaks).where(recomputing_stages(forward, backward), recomputing, stored)

    def held_bytes(self, forward: Any, backward: Any, lead: Any) -> Any:
        """``(P, S)`` float64: the most bytes each stage would hold at an op's end if it
        recomputed, as :func:`~tidgap.runtime.recompute_memory.recompute_held_bytes` walks
        it (arguments as :meth:`held`)."""
        return self._recomputing_bytes(_Chunks.of(forward, backward, lead))

    def _recomputing_bytes(self, chunks: _Chunks) -> Any:
        """:meth:`held_bytes`. With backward ``k`` covering ``lo..hi`` after ``a_k``
        forwards, ending at ``E``: the stage keeps the received input chunks from the one
        holding ``lo`` to the one holding ``E``, its forwards' draws from its own chunk
        holding ``lo`` to ``E``, and the received gradient chunks from the one holding
        ``lo`` to the one holding ``hi``; the backward adds its samples' working set (less
        its input and masks where one chunk holds them all: views), its bytes per chunk
        and the batch's task tensors. Before it, after the last forward since backward
        ``k - 1``, the same but the gradients only up to those backward ``k - 1``
        received. The masks it shares are :data:`DRAW_VIEWS` bytes a sample."""
        xp = namespace(chunks.before)
        before, forward_prefix = chunks.before, chunks.forward
        upstream, downstream = chunks.upstream, chunks.downstream
        lo, hi = chunks.backward[..., :-1], chunks.backward[..., 1:]
        end = xp.take_along_axis(forward_prefix, before, axis=-1)
        inputs, one_input = _from_chunk_holding(upstream, lo, hi)
        inputs = _at(upstream, holder_per_stage(upstream, end)) - inputs
        draws, one_draw = _from_chunk_holding(forward_prefix, lo, hi)
        draws = end - draws
        gradients_from = _from_chunk_holding(downstream, lo, hi)[0]
        received = _at(downstream, holder_per_stage(downstream, hi))
        earlier = xp.concatenate([xp.zeros_like(received[..., :1]), received[..., :-1]], axis=-1)
        size = (hi - lo).astype(xp.float64)
        received_input, sent, drawn, work, task = (row[None, :, None] for row in self.figures[:5])
        views = self.figures[DRAW_VIEWS][None, :, None]
        kept = received_input * inputs + drawn * draws
        at_backward = kept + sent * (received - gradients_from)
        at_backward += size * (work - received_input * one_input - views * one_draw)
        at_forward = kept + sent * xp.maximum(earlier - gradients_from, 0)
        previous = xp.concatenate([xp.full_like(before[..., :1], -1), before[..., :-1]], axis=-1)
        at_forward = xp.where(before > previous, at_forward, 0.0)
        work_chunk = self.figures[BACKWARD_CHUNK][None, :, None]
        peak = xp.maximum(at_backward * self.unit + task + work_chunk, at_forward * self.unit)
        return xp.where(chunks.backwards, peak, 0.0).max(axis=-1)

    def _stored_bytes(self, chunks: _Chunks) -> Any:
        """``(P, S)`` float64: the most bytes a stage that stores its graphs holds, as
        :func:`~tidgap.runtime.recompute_memory.stored_held_bytes` walks it: after each
        forward ``k``, ending at ``E`` with the backwards up to ``hi`` done, its alive graphs
        (``E - hi`` samples in ``k + 1`` chunks less those backwarded), the task's tensors,
        and the received input chunk reaching past ``E`` and gradient chunk reaching past
        ``hi``, kept whole."""
        xp = namespace(chunks.before)
        forward_prefix = chunks.forward
        upstream, downstream = chunks.upstream, chunks.downstream
        forwards = chunks.forwards
        k = xp.arange(chunks.before.shape[-1])[None, None, :]
        done = holder_per_stage(chunks.before, xp.minimum(k + 1, forwards))
        end = forward_prefix[..., 1:]
        last = _at(chunks.backward, done)
        received = _at(upstream, holder_per_stage(upstream, end))
        inputs = xp.where(received > end, received - _from_chunk_holding(upstream, end, end)[0], 0)
        gradients = _at(downstream, holder_per_stage(downstream, last))
        gradients = xp.where(
            gradients > last, gradients - _from_chunk_holding(downstream, last, last)[0], 0
        )
        received_input, sent = (row[None, :, None] for row in self.figures[:2])
        task, sample, chunk = (
            self.figures[row][None, :, None] for row in (TASK, GRAPH_SAMPLE, GRAPH_CHUNK)
        )
        alive = k + 1 - holder_per_stage(forward_prefix, last)
        held = (sample * (end - last) + received_input * inputs + sent * gradients) * self.unit
        held = held + chunk * alive + task
        return xp.where(k < forwards, held, 0.0).max(axis=-1)


@dataclass(frozen=True)
class _Chunks:
    """A population's ``(P, S, K+1)`` prefix sums in units, ``forward`` and ``backward``,
    those of each stage's ``upstream`` neighbour's forwards and ``downstream`` neighbour's
    backwards (a stage's own on the first / last stage, where the bytes that read them are
    0), ``before`` ``(P, S, K)``: the forwards run before each backward (padding ``M_s``),
    ``backwards`` ``(P, S, K)``: which backward slots are real, and ``forwards`` ``(P, S,
    1)``: each stage's ``M_s``."""

    forward: Any
    backward: Any
    upstream: Any
    downstream: Any
    before: Any
    backwards: Any
    forwards: Any

    @classmethod
    def of(cls, forward: Any, backward: Any, lead: Any) -> _Chunks:
        """From ``(P, S, K)`` sizes in units and the canonical ``lead`` of repaired genes."""
        xp = namespace(forward)
        forward_prefix, backward_prefix = prefix(forward), prefix(backward)
        before = own_forwards(forward_prefix, backward_prefix) + lead.astype(xp.int64)
        before = xp.minimum(before, microbatch_counts(forward)[..., None])
        upstream = xp.concatenate([forward_prefix[:, :1], forward_prefix[:, :-1]], axis=1)
        downstream = xp.concatenate([backward_prefix[:, 1:], backward_prefix[:, -1:]], axis=1)
        columns = xp.arange(lead.shape[-1])[None, None, :]
        backwards = columns < microbatch_counts(backward)[..., None]
        forwards = microbatch_counts(forward)[..., None]
        return cls(
            forward_prefix, backward_prefix, upstream, downstream, before, backwards, forwards
        )


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


def least_bytes(problem: Problem, recomputes: bool) -> list[float] | None:
    """Per stage, bytes that every plan holds at some op as ``tidgap run`` holds it (as
    :meth:`RunMemory.held` counts, from its :attr:`~RunMemory.figures`): the task's tensors
    and the stored graph of one unit of samples (its first forward's, at least) or, where
    the search may recompute (``recomputes``), the least of that and a recomputed
    backward's working set of one unit; ``None`` where the search counts the model's memory
    (:meth:`RunMemory.of` finds no usable ``source.memory``)."""
    memory = RunMemory.of(problem)
    if memory is None:
        return None
    figures, unit = memory.figures, memory.unit
    held = unit * figures[GRAPH_SAMPLE] + figures[GRAPH_CHUNK]
    if recomputes:
        held = np.minimum(held, unit * figures[BACKWARD] + figures[BACKWARD_CHUNK])
    return (held + figures[TASK]).tolist()


def run_evaluated(problem: Problem, plan: Plan, evaluation: Evaluation) -> Evaluation:
    """``evaluation`` of ``plan`` with ``peak_memory`` (and ``over_memory_limit``) as
    ``tidgap run`` holds it (:func:`~tidgap.runtime.recompute_memory.predicted_held_bytes`);
    as it is where the problem has no ``source.memory``."""
    memory = predicted_held_bytes(problem, plan, evaluation.peak_memory)
    if memory is None or memory == evaluation.peak_memory:
        return evaluation
    return replace(evaluation, peak_memory=memory, over_memory_limit=over_limits(problem, memory))
