"""The GAs' breeding as compiled loops (Numba), one child per iteration, the children shared
out among threads (:mod:`tidgap.fallback_cpu.threads`): the CPU twin of
``kernels/breed.cuh`` and ``kernels/joint_breed.cuh``.

:func:`numba_breed`, :func:`numba_joint_breed` and :func:`numba_joint_mutate` give exactly
the children of :func:`tidgap.optimize.operators.breed`,
:func:`tidgap.optimize.joint_operators.joint_breed` and of
:func:`~tidgap.optimize.joint_operators.joint_mutate` followed by the repair, with the same
draws: child ``c`` reads element ``c`` (``c * S + s``, ``c * size + j``, ``c * 3 + j``) of
each draw's stream (:class:`tidgap.optimize.rng.CounterRng`), so it needs no other child.
The NumPy operators run one array operation per mutation kind over the population; these
loops do the same work without the arrays in between (measured in ``bench/``).

The registries' numbering reaches the loops as arrays (``kinds``: registry position ->
:data:`PARTITION_KINDS` / :data:`ORDER_KINDS` number), not as compiled-in constants, so a
reordered registry never meets a stale disk cache. Numba is imported only when this module
is.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit

from tidgap.fallback_cpu.numba_cache import CACHING
from tidgap.fallback_cpu.repair_numba import _individual as _repair
from tidgap.fallback_cpu.rows import copy_row, copy_rows
from tidgap.fallback_cpu.threads import over_rows
from tidgap.optimize.joint_operators import JOINT_MUTATIONS, JointGenes, mutation_table
from tidgap.optimize.operators import BREED_DRAWS, MUTATE_DRAWS, MUTATIONS
from tidgap.optimize.rng import CounterRng

#: The partition mutations, in the numbering the loops use.
PARTITION_KINDS = (
    "move_boundary",
    "shift_boundary",
    "split_microbatch",
    "merge_microbatches",
    "copy_neighbour",
    "equalise_stage",
)
#: The joint GA's order mutations, numbered after :data:`PARTITION_KINDS`.
ORDER_KINDS = (
    "align_directions",
    "nudge_lead",
    "shift_leads",
    "set_lead",
    "flush_stage",
    "lead_from_neighbour",
)
MOVE, SHIFT, SPLIT, MERGE, COPY, EQUALISE = range(len(PARTITION_KINDS))
ALIGN, NUDGE, SHIFT_LEADS, SET_LEAD, FLUSH, FROM_NEIGHBOUR = range(
    len(PARTITION_KINDS), len(PARTITION_KINDS) + len(ORDER_KINDS)
)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@functools.cache
def partition_kinds() -> np.ndarray:
    """``(len(MUTATIONS),)`` int64: each partition mutation's kind number (read-only)."""
    kinds = np.array([PARTITION_KINDS.index(name) for name in MUTATIONS], dtype=np.int64)
    kinds.flags.writeable = False
    return kinds


@functools.cache
def joint_kinds(mirrored: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(kinds, on_backward)``, one entry per mutation of
    :func:`~tidgap.optimize.joint_operators.mutation_table` (``mirrored`` or not), in its
    order: each one's kind number and whether it changes the backward partitions
    (read-only)."""
    kinds, backward = [], []
    names = list(JOINT_MUTATIONS)
    for name in (names[position] for position in mutation_table(mirrored)):
        direction, _, partition = name.partition("_")
        if direction in ("forward", "backward") and partition in PARTITION_KINDS:
            kinds.append(PARTITION_KINDS.index(partition))
            backward.append(direction == "backward")
        else:
            kinds.append(len(PARTITION_KINDS) + ORDER_KINDS.index(name))
            backward.append(False)
    arrays = np.array(kinds, dtype=np.int64), np.array(backward, dtype=np.bool_)
    for array in arrays:
        array.flags.writeable = False
    return arrays


@njit(cache=CACHING, nogil=True)
def _uniform(stream, index):  # pragma: no cover - compiled
    """Element ``index`` of ``stream`` as a uniform double (``tidgap.optimize.rng``)."""
    x = stream + np.uint64(index) + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    x = x ^ (x >> np.uint64(31))
    return np.float64(x >> np.uint64(11)) * 2.0**-53


@njit(cache=CACHING, nogil=True)
def _uniform_int(u, low, high):  # pragma: no cover - compiled
    """``low + min(floor(u * (high - low)), high - low - 1)``."""
    span = high - low
    return low + min(np.int64(np.floor(u * np.float64(span))), span - 1)


@njit(cache=CACHING, nogil=True)
def _count(row):  # pragma: no cover - compiled
    """Microbatches of a row of sizes (its leading nonzero entries)."""
    count = 0
    while count < row.shape[0] and row[count] > 0:
        count += 1
    return count


@njit(cache=CACHING, nogil=True)
def _tournament(stream, child, size, fitness):  # pragma: no cover - compiled
    """The fittest (first on ties) of ``size`` entrants drawn for ``child``."""
    best = -1
    for j in range(size):
        entrant = _uniform_int(_uniform(stream, child * size + j), 0, fitness.shape[0])
        if best < 0 or fitness[entrant] < fitness[best]:
            best = entrant
    return best


@njit(cache=CACHING, nogil=True)
def _mutate_partition(kind, u0, u1, u2, child, caps):  # pragma: no cover - compiled
    """Partition mutation ``kind`` on one stage of ``child`` ``(S, K)`` (its ``caps``)."""
    stages, width = child.shape
    stage = _uniform_int(u0, 0, stages)
    row = child[stage]
    cap = caps[stage]
    count = _count(row)
    if kind in (MOVE, SHIFT, MERGE):
        k = _uniform_int(u1, 0, max(count - 1, 1))
        left = np.int64(row[k])
        right = np.int64(row[min(k + 1, width - 1)])
        total = left + right
        if kind == MERGE:
            if count >= 2 and total <= cap:
                row[k] = total
                for col in range(k + 1, width - 1):
                    row[col] = row[col + 1]
                row[width - 1] = 0
            return
        low = max(1, total - cap)
        high_raw = min(cap, total - 1)
        high = max(high_raw, low)
        if kind == SHIFT:
            new_left = min(max(left + (-1 if u2 < 0.5 else 1), low), high)
        else:
            new_left = _uniform_int(u2, low, high + 1)
        if count >= 2 and high_raw >= low:
            row[k] = new_left
            row[k + 1] = total - new_left
    elif kind == SPLIT:
        k = _uniform_int(u1, 0, max(count, 1))
        size = np.int64(row[k])
        head = _uniform_int(u2, 1, max(size, 2))
        if size >= 2 and count < width:
            for col in range(width - 1, k, -1):
                row[col] = row[col - 1]
            row[k] = head
            row[k + 1] = size - head
    elif kind == COPY:
        neighbour = min(max(stage + (-1 if u1 < 0.5 else 1), 0), stages - 1)
        if neighbour != stage and child[neighbour].max() <= cap:
            copy_row(row, child[neighbour])
    elif kind == EQUALISE:
        total = np.int64(row.sum())
        fewest = (total + cap - 1) // cap
        m = _uniform_int(u1, fewest, max(fewest, min(width, total)) + 1)
        for col in range(width):
            row[col] = total // m + (1 if col < total % m else 0) if col < m else 0


@njit(cache=CACHING, nogil=True)
def _mutate_order(
    kind, u0, u1, u2, forward, backward, lead, forward_caps, backward_caps
):  # pragma: no cover - compiled
    """Order mutation ``kind`` (the joint GA's) on one stage of a child's ``(S, K)`` rows."""
    stages, width = lead.shape
    stage = _uniform_int(u0, 0, stages)
    row = lead[stage]
    step = -1 if u2 < 0.5 else 1
    if kind == ALIGN:
        to_backward = u1 < 0.5 and forward[stage].max() <= backward_caps[stage]
        to_forward = not to_backward and backward[stage].max() <= forward_caps[stage]
        if to_backward:
            copy_row(backward[stage], forward[stage])
        elif to_forward:
            copy_row(forward[stage], backward[stage])
    elif kind == NUDGE:
        row[_uniform_int(u1, 0, max(_count(backward[stage]), 1))] += step
    elif kind == SHIFT_LEADS:
        for k in range(_uniform_int(u1, 0, max(_count(backward[stage]), 1)), width):
            row[k] += step
    elif kind == SET_LEAD:
        row[:] = _uniform_int(u1, 0, stages + 1)
    elif kind == FLUSH:
        row[:] = width
    elif kind == FROM_NEIGHBOUR:
        last = stage == stages - 1
        neighbour = max(stage - 1, 0) if last else stage + 1
        for k in range(width):
            row[k] = lead[neighbour, k] + (-1 if last else 1)


@njit(cache=CACHING, nogil=True)
def _drawn(c, count, rate, streams, first):  # pragma: no cover - compiled
    """Child ``c``'s mutation number (``-1``: none) and its three uniforms, from the
    mutation draws at ``streams[first:first + 3]``."""
    op = _uniform_int(_uniform(streams[first], c), 0, count)
    if _uniform(streams[first + 1], c) >= rate:
        op = -1
    u = streams[first + 2]
    return op, _uniform(u, c * 3), _uniform(u, c * 3 + 1), _uniform(u, c * 3 + 2)


@njit(cache=CACHING, nogil=True)
def _parents(c, fitness, size, crossover_rate, streams):  # pragma: no cover - compiled
    """Child ``c``'s two tournament winners and whether it crosses them (streams 0, 1, 3)."""
    first = _tournament(streams[0], c, size, fitness)
    second = _tournament(streams[1], c, size, fitness)
    return first, second, _uniform(streams[3], c) < crossover_rate


@njit(cache=CACHING, nogil=True)
def _stage_parent(c, s, stages, first, second, use_cross, streams):  # pragma: no cover
    """The parent child ``c`` takes stage ``s`` from (stream 2)."""
    take_first = _uniform(streams[2], c * stages + s) < 0.5
    return second if use_cross and not take_first else first


@njit(cache=CACHING, nogil=True)
def _breed(
    genes, fitness, caps, kinds, size, crossover_rate, mutation_rate, streams, out, begin, end
):  # pragma: no cover - compiled
    """:func:`numba_breed`'s children ``begin..end-1`` into ``out`` ``(C, S, K)``."""
    stages = out.shape[1]
    for c in range(begin, end):
        first, second, use_cross = _parents(c, fitness, size, crossover_rate, streams)
        for s in range(stages):
            copy_row(
                out[c, s], genes[_stage_parent(c, s, stages, first, second, use_cross, streams), s]
            )
        op, u0, u1, u2 = _drawn(c, kinds.shape[0], mutation_rate, streams, 4)
        if op >= 0:
            _mutate_partition(kinds[op], u0, u1, u2, out[c], caps)


@njit(cache=CACHING, nogil=True)
def _mutate_joint(
    op, u0, u1, u2, kinds, on_backward, forward, backward, lead, fcaps, bcaps
):  # pragma: no cover - compiled
    """Joint mutation number ``op`` (``-1``: none) on one child's ``(S, K)`` rows."""
    if op < 0:
        return
    kind = kinds[op]
    if kind < ALIGN:
        if on_backward[op]:
            _mutate_partition(kind, u0, u1, u2, backward, bcaps)
        else:
            _mutate_partition(kind, u0, u1, u2, forward, fcaps)
    else:
        _mutate_order(kind, u0, u1, u2, forward, backward, lead, fcaps, bcaps)


@njit(cache=CACHING, nogil=True)
def _mirror(forward, backward, bcaps):  # pragma: no cover - compiled
    """One child's backward rows set to its forward ones if every forward microbatch is
    within ``bcaps`` (:func:`tidgap.optimize.joint_operators.mirror`)."""
    stages, width = forward.shape
    for s in range(stages):
        for k in range(width):
            if forward[s, k] > bcaps[s]:
                return
    copy_rows(backward, forward)


@njit(cache=CACHING, nogil=True)
def _repaired(forward, backward, lead, codes):  # pragma: no cover - compiled
    """The repair of one child in place (``lead`` canonical, ``codes`` written; the repair
    reads each lead before it writes it, so one array serves as both)."""
    stages, width = forward.shape
    fp = np.empty((stages, width + 1), dtype=np.int64)
    bp = np.empty((stages, width + 1), dtype=np.int64)
    before = np.empty((stages, width), dtype=np.int64)
    _repair(forward, backward, lead, lead, codes, fp, bp, before)


@njit(cache=CACHING, nogil=True)
def _joint_breed(
    parents,
    fitness,
    fcaps,
    bcaps,
    kinds,
    on_backward,
    mirrored,
    size,
    crossover_rate,
    mutation_rate,
    streams,
    out,
    begin,
    end,
):  # pragma: no cover - compiled
    """:func:`numba_joint_breed`'s children ``begin..end-1`` into ``out`` (forward,
    backward, lead, codes)."""
    forward, backward, lead = parents
    stages = out[0].shape[1]
    for c in range(begin, end):
        first, second, use_cross = _parents(c, fitness, size, crossover_rate, streams)
        for s in range(stages):
            parent = _stage_parent(c, s, stages, first, second, use_cross, streams)
            copy_row(out[0][c, s], forward[parent, s])
            copy_row(out[1][c, s], backward[parent, s])
            copy_row(out[2][c, s], lead[parent, s])
        op, u0, u1, u2 = _drawn(c, kinds.shape[0], mutation_rate, streams, 4)
        _mutate_joint(
            op, u0, u1, u2, kinds, on_backward, out[0][c], out[1][c], out[2][c], fcaps, bcaps
        )
        if mirrored:
            _mirror(out[0][c], out[1][c], bcaps)
        _repaired(out[0][c], out[1][c], out[2][c], out[3][c])


@njit(cache=CACHING, nogil=True)
def _joint_mutate(
    fcaps, bcaps, kinds, on_backward, mirrored, rate, streams, out, begin, end
):  # pragma: no cover - compiled
    """:func:`numba_joint_mutate` in place on ``out``'s individuals ``begin..end-1``
    (forward, backward, lead, codes)."""
    for c in range(begin, end):
        op, u0, u1, u2 = _drawn(c, kinds.shape[0], rate, streams, 0)
        _mutate_joint(
            op, u0, u1, u2, kinds, on_backward, out[0][c], out[1][c], out[2][c], fcaps, bcaps
        )
        if mirrored:
            _mirror(out[0][c], out[1][c], bcaps)
        _repaired(out[0][c], out[1][c], out[2][c], out[3][c])


def _int32(array: np.ndarray) -> np.ndarray:
    """``array`` as contiguous int32 (a copy only where needed)."""
    return np.ascontiguousarray(array, dtype=np.int32)


def _int64(array: np.ndarray) -> np.ndarray:
    """``array`` as contiguous int64 (a copy only where needed)."""
    return np.ascontiguousarray(array, dtype=np.int64)


def numba_breed(
    genes: np.ndarray,
    fitness: np.ndarray,
    caps: np.ndarray,
    rng: CounterRng,
    children: int,
    crossover_rate: float,
    mutation_rate: float,
    tournament_size: int,
) -> np.ndarray:
    """:func:`tidgap.optimize.operators.breed`, compiled: ``genes`` ``(P, S, K)`` int32,
    ``fitness`` ``(P,)``, ``caps`` ``(S,)`` units; returns ``(children, S, K)`` int32."""
    genes = _int32(genes)
    streams = rng.streams(BREED_DRAWS)
    out = np.empty((children, *genes.shape[1:]), dtype=np.int32)
    parents = (genes, _int64(fitness), _int64(caps), partition_kinds(), tournament_size)
    rates = float(crossover_rate), float(mutation_rate)
    over_rows(_breed, children, *parents, *rates, streams, out, cheap=True)
    return out


def numba_joint_breed(
    genes: JointGenes,
    fitness: np.ndarray,
    forward_caps: np.ndarray,
    backward_caps: np.ndarray,
    rng: CounterRng,
    children: int,
    crossover_rate: float,
    mutation_rate: float,
    tournament_size: int,
    mirrored: bool = False,
    out: JointGenes | None = None,
) -> JointGenes:
    """:func:`tidgap.optimize.joint_operators.joint_breed`, compiled: the same repaired
    children (``(children, S, K)`` int32 rows, ``(children, S, 2K)`` int8 codes), written
    into ``out`` (C-contiguous arrays) where given."""
    parents = tuple(_int32(rows) for rows in genes.rows())
    streams = rng.streams(BREED_DRAWS)
    if out is None:
        out = JointGenes.empty(children, *parents[0].shape[1:], np)
    kinds, on_backward = joint_kinds(mirrored)
    settings = (
        _int64(fitness),
        _int64(forward_caps),
        _int64(backward_caps),
        kinds,
        on_backward,
        mirrored,
        tournament_size,
        float(crossover_rate),
        float(mutation_rate),
        streams,
        out.arrays(),
    )
    over_rows(_joint_breed, children, parents, *settings)
    return out


def numba_joint_mutate(
    genes: JointGenes,
    forward_caps: np.ndarray,
    backward_caps: np.ndarray,
    rng: CounterRng,
    rate: float,
    mirrored: bool = False,
) -> JointGenes:
    """:func:`tidgap.optimize.joint_operators.mutate_repaired`, compiled: new repaired
    individuals (``genes`` is left as it is)."""
    out = JointGenes.empty(genes.size, *genes.forward.shape[1:], np)
    for mine, given in zip(out.rows(), genes.rows(), strict=True):
        mine[...] = given
    streams = rng.streams(MUTATE_DRAWS)
    kinds, on_backward = joint_kinds(mirrored)
    caps = _int64(forward_caps), _int64(backward_caps)
    settings = (kinds, on_backward, mirrored, float(rate), streams, out.arrays())
    over_rows(_joint_mutate, genes.size, *caps, *settings)
    return out
