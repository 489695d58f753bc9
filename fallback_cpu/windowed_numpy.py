"""Ordered plans in NumPy: the event simulation of model.md (Ordered plans, Timing),
vectorised over the population and the stages at once.

A *pair* is one stage of one individual, flat ``q = p S + s``. Each round, every pair whose
next op has its input runs it, all at once (an op's end depends only on its inputs, not on
when it is simulated, so rounds give the sweeps' results); a round in which no pair can run
ends the simulation. Individuals with ops left (a deadlock) or whose order breaks rule
``count`` score :data:`~tidgap.backends.evaluator.INVALID`. All arithmetic is int64 ``max``
and ``+`` on ticks, so the results equal :mod:`tidgap.fallback_cpu.windowed_numba`'s exactly.

An op waits for its stage (``free``, the end of its previous op) and for one arrival from a
neighbour: a forward ``k`` of ``s`` for ``A[s-1][i]``, a backward for ``A'[s+1][i]`` (none on
the first / last stage: its own slot 0). A backward also waits for its own forward; the
stage runs its ops in order, so that forward has run, and ended by ``free``, iff the units
held after the backward are ``>= 0`` (rule 1), known before the simulation: a backward
breaking it never runs.

State: ``times`` ``(N (W + 1),)`` int64 arrivals, -1 until computed, ``W = (K_f + 1) +
(K_b + 1)``; pair ``q``'s slots start at ``q (W + 1)``: slot ``t (K_f + 1) + k`` for the
``k``-th (1-based) op of type ``t`` (0 forward ``A``, 1 backward ``A'``; slot 0 of each: 0),
then slot ``W``, never written, the input of an op that never runs. Static: one record per
op, ``(N, L)`` flat ``q L + n`` (:func:`op_records`: its slot, its entry in the duration
tables and op ``n+1``'s input, relative to the pair's first slot). Per active pair: its
cursor into the records, its next op's input and its ``free``. A round gathers ``times`` at
the active pairs' inputs; the pairs with one ``>= 0`` run, each reading one record.
"""

from __future__ import annotations

import numpy as np

from tidgap.backends.evaluator import INVALID, not_partitions
from tidgap.backends.run_pricing import op_ticks, order_dependent_ticks
from tidgap.backends.ticks import TickedProblem, stage_link_ticks
from tidgap.optimize.genome import BACKWARD_OP, FORWARD_OP, NO_OP

#: Individuals simulated together: a round's gathers over a larger population leave the
#: caches (65,536 plans of S = 8, B = 256, K = 32 on the 2-core development VM, 2026-12-06:
#: 1.8e4/s in one simulation, 3.7e4/s in chunks of 512, 3.1e4/s of 1024, 3.4e4/s of 256).
CHUNK = 512


def prefix_sums(sizes: np.ndarray, num_units: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(P, S, K)`` integer sizes in units -> ``(P, S, K+1)`` prefix sums (int32 where
    ``K U`` fits) and ``(P, S)`` microbatch counts; ``ValueError`` unless every row is a
    partition of ``num_units`` (sizes in ``0..U``, zeros only at the end: the first
    ``count`` sum to ``U``), naming the individual as number ``first`` + its index."""
    dtype = np.int32 if sizes.shape[2] * num_units < 2**31 else np.int64
    prefix = np.zeros((*sizes.shape[:2], sizes.shape[2] + 1), dtype=dtype)
    np.cumsum(sizes, axis=2, dtype=dtype, out=prefix[:, :, 1:])
    short = prefix[:, :, 1:] < num_units  # before the microbatch that completes the row
    unsigned = sizes.view(f"u{sizes.itemsize}")  # negatives read as too large
    bad = (
        (unsigned > num_units) | (short & (sizes == 0))  # a zero before the row is complete
    ).any(axis=(1, 2)) | (prefix[:, :, -1] != num_units).any(axis=1)
    if bad.any():
        raise ValueError(not_partitions(first + int(np.argmax(bad)), num_units))
    used = short.view(np.int8).sum(axis=2, dtype=np.int64) + 1
    return prefix, used


def count_dtype(width: int) -> type[np.signedinteger]:
    """The smallest signed integer dtype that holds ``-width..width``."""
    for dtype in (np.int8, np.int16, np.int32):
        if width <= np.iinfo(dtype).max:
            return dtype
    return np.int64


def unit_holders(sizes: np.ndarray, num_units: int) -> np.ndarray:
    """``(..., K)`` partitions of ``U = num_units`` -> ``(..., U+1)``: entry ``v`` is
    ``min{i : prefix[i] >= v}`` (the microbatch holding unit ``v``; 0 for ``v = 0``), one
    ``repeat`` of the microbatch indices by their sizes."""
    width = sizes.shape[-1]
    dtype = count_dtype(width)
    counts = np.ones((*sizes.shape[:-1], width + 1), dtype=np.int64)
    counts[..., 1:] = sizes
    indices = np.broadcast_to(np.arange(width + 1, dtype=dtype), counts.shape)
    return np.repeat(indices.ravel(), counts.ravel()).reshape(*sizes.shape[:-1], num_units + 1)


def holders(table: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``(A, B, U+1)`` :func:`unit_holders` and ``(A, B, J)`` prefix sums ->
    ``min{i : prefix[a, b, i] >= queries[a, b, j]}``, ``(A, B, J)`` (``table``'s dtype)."""
    rows = np.arange(table.shape[0] * table.shape[1], dtype=np.int64).reshape(table.shape[:2])
    flat = rows[..., None] * table.shape[2] + queries
    return table.ravel()[flat]


def counts_hold(order: np.ndarray, forwards: np.ndarray, backwards: np.ndarray) -> np.ndarray:
    """``(P,)`` bool: every stage's order row holds exactly ``M_s`` forwards and ``N_s``
    backwards, then :data:`NO_OP` only."""
    length = forwards + backwards
    padding = np.arange(order.shape[2]) >= length[..., None]
    dtype = count_dtype(order.shape[2])
    return (
        ((order == FORWARD_OP).view(np.int8).sum(axis=2, dtype=dtype) == forwards)
        & ((order == BACKWARD_OP).view(np.int8).sum(axis=2, dtype=dtype) == backwards)
        & ((order == NO_OP) == padding).all(axis=2)
    ).all(axis=1)


def input_slots(
    forward: np.ndarray, backward: np.ndarray, P: np.ndarray, Q: np.ndarray, U: int
) -> np.ndarray:
    """``(N, W + 1)`` times index of each slot's input, from its pair's first slot (pairs
    are ``W + 1`` apart): forward ``k`` of ``s`` -> ``A[s-1][i]``, ``i = min{i : P[s-1][i]
    >= P[s][k]}``; backward ``k`` -> ``A'[s+1][i]``, ``i = min{i : Q[s+1][i] >= Q[s][k]}``;
    0 (its own slot 0) on the first / last stage; ``W`` (its never written slot) in the last
    column. ``forward`` / ``backward`` ``(P', S, K)`` sizes, ``P`` / ``Q`` ``(P', S, K+1)``
    their prefix sums."""
    count, stages, width_f = P.shape
    width = width_f + Q.shape[2]
    dtype = count_dtype(2 * width + 2)
    slots = np.zeros((count, stages, width + 1), dtype=dtype)
    slots[..., width] = width
    if stages > 1:
        upstream = holders(unit_holders(forward[:, :-1], U), P[:, 1:]).astype(dtype)
        downstream = holders(unit_holders(backward[:, 1:], U), Q[:, :-1]).astype(dtype)
        slots[:, 1:, :width_f] = upstream - dtype(width + 1)
        slots[:, :-1, width_f:width] = downstream + dtype(width + 1 + width_f)
    return slots.reshape(count * stages, width + 1)


def op_positions(
    order: np.ndarray, length: np.ndarray, width_f: int, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per op ``n`` of each pair, ``(N, L)`` each: its slot (int32; ``W`` for every
    ``n >= length``), its index into flat ``(N, W+1)`` slot tables (int64) and whether it
    is a forward; ``order`` ``(N, L)`` op codes, ``length`` ``(N,)`` ops per pair."""
    forward = order == FORWARD_OP
    i = np.cumsum(forward.view(np.int8), axis=1, dtype=np.int32)
    n = np.arange(order.shape[1], dtype=np.int32)
    slot = np.where(forward, i, (width_f + 1) + n - i)
    slot[n >= length[:, None]] = width
    flat = slot + (np.arange(len(order), dtype=np.int64) * (width + 1))[:, None]
    return slot, flat, forward


def op_records(wait: np.ndarray, slot: np.ndarray, entry: np.ndarray, never: int) -> np.ndarray:
    """``(N, L)`` records of the ops: ``slot``, ``entry`` and ``wait``, the next op's input
    (:func:`input_slots`; ``never``, ``W``, in the last column); ``wait`` ``(N, L)`` each
    op's own. The smallest fields that hold them, in a record of 4, 8 or 16 bytes (gathered
    as one word)."""
    index = count_dtype(2 * never + 2)
    cost = count_dtype(entry.max(initial=0))
    size = 2 * np.dtype(index).itemsize + np.dtype(cost).itemsize
    records = np.empty(
        wait.shape,
        dtype={
            "names": ["wait", "slot", "entry"],
            "formats": [index, index, cost],
            "itemsize": 1 << (size - 1).bit_length(),
        },
    )
    records["wait"][:, :-1] = wait[:, 1:]
    records["wait"][:, -1] = never
    records["slot"] = slot
    records["entry"] = entry
    return records


def cost_tables(ticked: TickedProblem) -> tuple[np.ndarray, np.ndarray]:
    """Flat ``(2S (U+1),)`` compute and link ticks: forwards then backwards per stage;
    the link of the last stage's forwards and the first stage's backwards is 0."""
    compute = np.concatenate((ticked.forward_compute, ticked.backward_compute))
    transfer = np.concatenate(stage_link_ticks(ticked))
    return compute.astype(np.int64).ravel(), transfer.ravel()


def simulate(
    records: np.ndarray,
    inputs: np.ndarray,
    active: np.ndarray,
    costs: tuple[np.ndarray, np.ndarray],
    widths: tuple[int, int],
    op_compute: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Run rounds until none can; returns each pair's ``free`` (the end of its last op
    run) and the number of ops it ran, ``(N,)`` each.

    ``records``: :func:`op_records` ``(N, L)``; ``active``: the pairs with ops to run,
    ``inputs``: the times index of their first ops' inputs; ``costs``: :func:`cost_tables`;
    ``widths``: ``(K_f + 1, W)``; ``op_compute``: ``(N L,)`` each op's compute ticks,
    instead of ``costs``' compute (run pricing)."""
    (compute, transfer), (width_f, width) = costs, widths
    count, positions = records.shape
    times = np.full((count, width + 1), -1, dtype=np.int64)
    times[:, [0, width_f]] = 0
    times = times.ravel()
    free_all = np.zeros(count, dtype=np.int64)
    cursor_all = np.arange(count, dtype=np.int64) * positions
    cursor, free = cursor_all[active], np.zeros(len(active), dtype=np.int64)
    base = active * (width + 1)
    record = records.dtype
    words = records.ravel().view(np.dtype((np.void, record.itemsize)))  # fast gathers
    rounds = 0
    while True:
        start = times[inputs]
        ready = np.flatnonzero(start >= 0)
        if not len(ready):
            break
        at = cursor[ready]
        op = words[at].view(record)
        end = np.maximum(start[ready], free[ready])
        cost = op["entry"].astype(np.intp)
        end += compute[cost] if op_compute is None else op_compute[at]
        here = base[ready]
        slot = here + op["slot"]
        sent = np.maximum(end, times[slot - 1])
        sent += transfer[cost]
        times[slot] = sent
        free[ready] = end
        cursor[ready] = at + 1
        inputs[ready] = here + op["wait"]
        rounds += 1
        if rounds % 8 == 0:
            gone = inputs - base == width  # finished, or at a backward breaking rule 1
            if 4 * np.count_nonzero(gone) > len(gone):
                free_all[active[gone]], cursor_all[active[gone]] = free[gone], cursor[gone]
                keep = ~gone
                active, cursor, free = active[keep], cursor[keep], free[keep]
                base, inputs = base[keep], inputs[keep]
    free_all[active], cursor_all[active] = free, cursor
    return free_all, cursor_all - np.arange(count, dtype=np.int64) * positions


def ordered_ends(
    forward: np.ndarray, backward: np.ndarray, order: np.ndarray, ticked: TickedProblem
) -> tuple[np.ndarray, np.ndarray]:
    """Iteration ticks ``(P,)`` and ``peak_held`` ``(P, S)`` (samples) of every individual.

    ``forward`` / ``backward``: ``(P, S, K)`` sizes in units; ``order``: ``(P, S, L)`` op
    codes. :data:`~tidgap.backends.evaluator.INVALID` and 0 where the order cannot finish.
    Simulated :data:`CHUNK` individuals at a time.
    """
    forward, backward, order = np.asarray(forward), np.asarray(backward), np.asarray(order)
    if len(forward) <= CHUNK:
        return _chunk_ends(forward, backward, order, ticked)
    parts = [
        _chunk_ends(*(a[i : i + CHUNK] for a in (forward, backward, order)), ticked, i)
        for i in range(0, len(forward), CHUNK)
    ]
    return np.concatenate([t for t, _ in parts]), np.concatenate([h for _, h in parts])


def _chunk_ends(
    forward: np.ndarray,
    backward: np.ndarray,
    order: np.ndarray,
    ticked: TickedProblem,
    first: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ordered_ends` of the individuals from number ``first`` on, in one
    simulation."""
    if forward.dtype not in (np.int32, np.int64) or backward.dtype != forward.dtype:
        forward, backward = forward.astype(np.int64), backward.astype(np.int64)
    count, stages = forward.shape[:2]
    U = ticked.num_units
    (P, forwards), (Q, backwards) = prefix_sums(forward, U, first), prefix_sums(backward, U, first)
    valid = counts_hold(order, forwards, backwards)
    if not valid.any():  # nothing can finish (an order too narrow for any op, too)
        return np.full(count, INVALID, dtype=np.int64), np.zeros((count, stages), dtype=np.int64)
    # Past the most microbatches any row uses there are only zeros (and NO_OP): cut them.
    kf, kb = int(forwards.max(initial=1)), int(backwards.max(initial=1))
    forward, backward, order = forward[..., :kf], backward[..., :kb], order[..., : kf + kb]
    P, Q = P[..., : kf + 1], Q[..., : kb + 1]
    width_f, width, pairs = kf + 1, kf + kb + 2, stages * count
    length = np.where(valid[:, None], forwards + backwards, 0).ravel()  # (N,)
    sizes = np.zeros((count, stages, width + 1), dtype=np.int32)  # each slot's, 0 in slot W
    sizes[..., 1:width_f] = forward
    sizes[..., width_f + 1 : width] = backward
    slot, flat, is_forward = op_positions(
        order.reshape(pairs, order.shape[2]), length, width_f, width
    )
    size = sizes.ravel()[flat]
    held = np.cumsum(np.where(is_forward, size, -size), axis=1, dtype=np.int32)  # after each op
    wait = input_slots(forward, backward, P, Q, U).ravel()[flat]
    wait[held < 0] = width  # a backward breaking rule 1 never runs
    entries = 2 * stages * (U + 1)
    stage = np.tile(np.arange(stages, dtype=np.int32 if entries < 2**31 else np.int64), count)
    entry = np.where(is_forward, stage[:, None], stage[:, None] + stages) * (U + 1) + size
    active = np.flatnonzero(length)
    op_compute = None
    if ticked.run_priced:
        durations = np.zeros((count, stages, width + 1), dtype=np.int64)
        durations[..., 1:width_f], durations[..., width_f + 1 : width], stored = op_ticks(
            forward, backward, ticked
        )
        op_compute = order_dependent_ticks(
            durations.ravel()[flat], is_forward, size, held, stored.ravel(), ticked
        ).ravel()
    free, ran = simulate(
        op_records(wait, slot, entry, width),
        active * (width + 1) + wait[active, 0],
        active,
        cost_tables(ticked),
        (width_f, width),
        op_compute,
    )
    finished = valid & (ran == length).reshape(count, stages).all(axis=1)
    # A finished stage's last op is its last backward (it waits for every forward).
    last = free.reshape(count, stages)
    ticks = np.where(finished, (last + ticked.tails).max(axis=1, initial=0), INVALID)
    peaks = held.max(axis=1, initial=0).reshape(count, stages)
    return ticks.astype(np.int64), np.where(finished[:, None], peaks * np.int64(ticked.unit), 0)
