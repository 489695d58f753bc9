"""What a recomputing stage of ``tidgap run`` holds, predicted from its plan and its profile.

The model (model.md, "Memory") prices a stage's memory as its held samples times
``activation_bytes``: what a stage that stores its forwards' graphs holds. A recomputing
stage (:func:`~tidgap.runtime.lowering.recomputes`) stores no graph: it keeps its
received input chunks, its forwards' random draws (to replay them) and the received
gradient chunks, and holds one backward's activations at a time, those of the forward it
re-runs. :func:`recompute_held_bytes` walks the stage's instructions
(:func:`~tidgap.runtime.lowering.lower`) and counts those at each op's end, as the stage
counts what it holds (:class:`~tidgap.runtime.stage.HeldBytes`), from the bytes per sample
that ``tidgap profile`` records under ``source.memory`` (:func:`recompute_bytes`).
:func:`stored_held_bytes` does the same for a stage that stores its graphs: its held
samples' ``activation_bytes`` and the received chunks it keeps past its ops.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from tidgap.model.plan import Plan
from tidgap.model.problem import MAX_BYTES, Problem
from tidgap.runtime.lowering import Instruction, lower, recomputes

#: The ``source.memory`` fields ``tidgap profile`` writes, per stage (bytes per sample):
#: :class:`RecomputeBytes`'s fields in order.
FIELDS = (
    "input_bytes_per_sample",
    "draw_bytes_per_sample",
    "recompute_backward_bytes_per_sample",
    "task_bytes_per_sample",
)
#: The field of a backward's working set per forward (bytes; :class:`RecomputeBytes`'s
#: last), which profiles before it lack (their working set per sample includes it).
CHUNK_FIELD = "recompute_backward_bytes_per_chunk"
#: The field of the draws' bytes per sample that a re-run forward's working set takes as
#: views of the kept draws (``nn.Dropout`` masks; other random operators' outputs are
#: copied): :class:`RecomputeBytes`'s ``shared_draws``, which profiles before 2026-12-07
#: lack (every draw is then taken as shared).
SHARED_DRAWS_FIELD = "shared_draw_bytes_per_sample"


class RecomputeBytes(NamedTuple):
    """Bytes per sample of what a recomputing stage holds
    (:func:`~tidgap.profiling.measure.recompute_bytes_per_sample`): the ``input`` it
    receives (0 on the first stage) and its forwards' random ``draws`` (0 without random
    operators or in eval mode), kept until the backward of their samples; a ``backward``'s
    working set (what autograd saves in the re-run forward, its input and its output, each
    storage once, the task's tensors left out); and the ``task``'s tensors it cuts its
    chunks from (the model's input on the first stage, the targets on the last), held
    whole (``batch_size`` samples) by any chunk's backward; and ``backward_chunk``, the
    working set's bytes per forward (tensors made once per forward, a GPT's positions and
    masks, and the loss on the last stage), so ``n`` samples' working set is
    ``backward_chunk + n * backward``; ``shared_draws``, the draws' bytes that working set
    takes as views of the kept draws where one forward chunk holds the backward's samples
    (``nn.Dropout`` masks; ``None``: every draw, as profiles before the field count)."""

    input: float
    draws: float
    backward: float
    task: float
    backward_chunk: float = 0.0
    shared_draws: float | None = None

    def draw_views(self) -> float:
        """The draws' bytes per sample a backward within one forward chunk shares with
        them: ``shared_draws``, or every draw where the profile did not say."""
        return self.draws if self.shared_draws is None else self.shared_draws


#: The ``source.memory`` fields of a stored graph's bytes, per stage: :class:`GraphBytes`.
GRAPH_FIELDS = ("graph_bytes_per_sample", "graph_bytes_per_chunk")


class GraphBytes(NamedTuple):
    """What one stored forward graph of ``n`` samples holds: ``chunk + n * sample`` bytes
    (:func:`~tidgap.profiling.measure.graph_growth`)."""

    sample: float
    chunk: float


def graph_bytes(problem: Problem) -> list[GraphBytes]:
    """Per stage, its :class:`GraphBytes` from ``source.memory``; where the profile did not
    record them, ``activation_bytes`` a sample and nothing a chunk."""
    memory = problem.source_fields.get("memory")
    columns = _columns(memory if isinstance(memory, dict) else {}, GRAPH_FIELDS, problem)
    if columns is None:
        return [GraphBytes(float(st.activation_bytes or 0.0), 0.0) for st in problem.stages]
    return [GraphBytes(*map(float, row)) for row in zip(*columns, strict=True)]


#: The most a ``source.memory`` figure may be for the whole batch, in a stage's
#: ``activation_bytes``: far above what any stage holds, low enough that a search's counts
#: of the figures' sums (:data:`tidgap.optimize.run_memory.FINE` units of a sample's
#: activations) fit int64.
MOST_ACTIVATIONS = 2.0**40


def _columns(memory: dict, fields: tuple[str, ...], problem: Problem) -> list[list] | None:
    """``memory``'s lists ``fields``, one number >= 0 per stage each, whose whole batch's
    bytes are at most :data:`~tidgap.model.problem.MAX_BYTES` and :data:`MOST_ACTIVATIONS`
    times the stage's ``activation_bytes`` (where positive), or ``None``."""
    columns = [memory.get(field) for field in fields]
    most = [
        min(MAX_BYTES, MOST_ACTIVATIONS * (stage.activation_bytes or math.inf)) / problem.batch_size
        for stage in problem.stages
    ]
    for column in columns:
        if not isinstance(column, list) or len(column) != problem.num_stages:
            return None
        if not all(_is_count(value, top) for value, top in zip(column, most, strict=True)):
            return None
    return columns


def recompute_bytes(problem: Problem) -> list[RecomputeBytes] | None:
    """Per stage, its :class:`RecomputeBytes` from ``source.memory``; ``None`` where the
    problem has none usable (not profiled by this version, or a malformed free-form entry)
    or no ``activation_bytes``."""
    memory = problem.source_fields.get("memory")
    if not isinstance(memory, dict) or not problem.has_memory:
        return None
    columns = _columns(memory, FIELDS, problem)
    if columns is None:
        return None
    columns += _columns(memory, (CHUNK_FIELD,), problem) or [[0.0] * problem.num_stages]
    stages = [RecomputeBytes(*map(float, row)) for row in zip(*columns, strict=True)]
    shared = _columns(memory, (SHARED_DRAWS_FIELD,), problem)
    if shared is None:
        return stages
    return [
        stage._replace(shared_draws=min(float(views), stage.draws))
        for stage, views in zip(stages, shared[0], strict=True)
    ]


def _is_count(value: object, most: float) -> bool:
    """Whether ``value`` is a number from 0 to ``most`` (not a boolean)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= most


def recompute_held_bytes(
    plan: Plan, s: int, stages: Sequence[RecomputeBytes], batch_size: int
) -> float:
    """The most bytes recomputing stage ``s`` of ``plan`` holds at an op's end, as
    :class:`~tidgap.runtime.stage.HeldBytes` counts it: the received input and gradient
    chunks and the forwards' draws still kept, and at a backward of ``n`` samples (counted
    after its forward re-ran) ``n`` samples' working set (and its bytes per forward) and
    the whole batch's task tensors, less what the working set shares with what is kept:
    its input where it is a view of one received chunk, its ``nn.Dropout`` masks
    (:meth:`RecomputeBytes.draw_views`) where they are views of one forward's draws.
    ``stages``: every stage's :class:`RecomputeBytes` (stage ``s + 1``'s input bytes are
    ``s``'s output's and its gradient's)."""
    own = stages[s]
    received = _Received(own.input, 0.0 if s == len(stages) - 1 else stages[s + 1].input)
    draws: list[tuple[int, int]] = []
    peak = 0.0
    for step in received.computing(plan, s):
        lo, hi = step.samples
        if step.kind == "forward":
            draws.append(step.samples)
            peak = max(peak, received.kept() + own.draws * _samples(draws))
        elif step.kind == "backward":
            n = hi - lo
            shared = n * own.input * _within_one(received.inputs, lo, hi)
            shared += n * own.draw_views() * _within_one(draws, lo, hi)
            kept = received.kept() + own.draws * _samples(draws)
            working = own.backward_chunk + n * own.backward
            peak = max(peak, kept + working - shared + batch_size * own.task)
            received.inputs = _after(received.inputs, hi)
            received.gradients = _after(received.gradients, hi)
            draws = _after(draws, hi)
    return peak


def stored_held_bytes(
    plan: Plan, s: int, stages: Sequence[RecomputeBytes], graph: GraphBytes, batch_size: int
) -> float:
    """The most bytes stage ``s`` of ``plan``, storing its forwards' graphs, holds at an
    op's end, as :class:`~tidgap.runtime.stage.HeldBytes` counts it (after its forwards:
    a stored stage counts nothing else): each alive graph's :class:`GraphBytes` (what
    autograd saved, the graph's input and output), the task's tensors its chunks are cut
    from, whole (``batch_size`` samples of ``task``: the first and last stages), and the
    received chunks it still keeps, whole: the input chunk that reaches past the last
    forward (a forward takes its own copy of part of a chunk) and the gradient chunk that
    reaches past the last backward."""
    received = _Received(stages[s].input, 0.0 if s == len(stages) - 1 else stages[s + 1].input)
    graphs: list[tuple[int, int]] = []
    task = batch_size * stages[s].task
    peak = 0.0
    for step in received.computing(plan, s):
        hi = step.samples[1]
        if step.kind == "forward":
            graphs.append(step.samples)
            received.inputs = _after(received.inputs, hi)
            alive = graph.sample * _samples(graphs) + graph.chunk * len(graphs)
            peak = max(peak, alive + task + received.kept())
        elif step.kind == "backward":
            graphs = _after(graphs, hi)
            received.gradients = _after(received.gradients, hi)
    return peak


class _Received:
    """The chunks a stage received and keeps, as it walks its instructions: ``inputs`` of
    ``input_bytes`` a sample and ``gradients`` of ``output_bytes`` (``(lo, hi)`` each)."""

    def __init__(self, input_bytes: float, output_bytes: float) -> None:
        self.input_bytes, self.output_bytes = input_bytes, output_bytes
        self.inputs: list[tuple[int, int]] = []
        self.gradients: list[tuple[int, int]] = []

    def computing(self, plan: Plan, s: int) -> Iterator[Instruction]:
        """Stage ``s``'s instructions but its receives, which it records."""
        for step in lower(plan)[s]:
            if step.kind == "recv_forward":
                self.inputs.append(step.samples)
            elif step.kind == "recv_backward":
                self.gradients.append(step.samples)
            else:
                yield step

    def kept(self) -> float:
        """The bytes of the chunks kept."""
        inputs, gradients = _samples(self.inputs), _samples(self.gradients)
        return self.input_bytes * inputs + self.output_bytes * gradients


def _after(chunks: list[tuple[int, int]], sample: int) -> list[tuple[int, int]]:
    """``chunks`` but those that end at or before ``sample`` (a stage drops them)."""
    return [c for c in chunks if c[1] > sample]


def _samples(chunks: list[tuple[int, int]]) -> int:
    """The samples of ``chunks`` ``(lo, hi)``."""
    return sum(hi - lo for lo, hi in chunks)


def _within_one(chunks: list[tuple[int, int]], lo: int, hi: int) -> bool:
    """Whether one of ``chunks`` holds samples ``lo..hi`` (a cut of them is a view)."""
    return any(a <= lo and hi <= b for a, b in chunks)


def predicted_held_bytes(
    problem: Problem, plan: Plan, model_peaks: list[float] | None
) -> list[float] | None:
    """Each stage's predicted peak of what it holds for its backwards (bytes): the model's
    ``model_peaks``, except where the problem's profile says what stages hold besides
    their graphs (:func:`recompute_bytes`): there :func:`recompute_held_bytes` on the
    recomputing stages and :func:`stored_held_bytes` on the others."""
    flags = recomputes(plan)
    stages = recompute_bytes(problem)
    if model_peaks is None or stages is None:
        return model_peaks
    graphs, B = graph_bytes(problem), problem.batch_size
    return [
        recompute_held_bytes(plan, s, stages, B)
        if flag
        else stored_held_bytes(plan, s, stages, graphs[s], B)
        for s, flag in enumerate(flags)
    ]
