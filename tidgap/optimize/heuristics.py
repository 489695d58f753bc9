"""The paper's two non-genetic planners: a local greedy and a global greedy-based DP.

- :func:`local_greedy`: every stage, on its own, picks the equal partition that a GPipe
  pipeline made of copies of itself would run fastest; stages may disagree.
- :func:`global_dp`: per direction, one partition shared by every stage, built
  microbatch by microbatch, keeping a single best pipeline state per number of units sent.

Both return feasible plans (``docs/model.md``, A plan); evaluate them with
:func:`tidgap.evaluate` (flush plans: the recurrences).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem, require_problem
from tidgap.model.timefn import TimeFunction
from tidgap.schedules.baselines import equal_partition, largest_microbatch


def local_microbatches(problem: Problem, s: int) -> int:
    """``m_s``: the count in ``1..U`` with the least estimate ``(m + S - 1) * (Tf_s(b) +
    Tb_s(b))``, ``b = ceil(U / m) * unit`` the largest of ``m`` equal microbatches (ties:
    the smaller ``m``): GPipe's iteration time if every stage were stage ``s`` and links
    were free.

    Only counts whose equal partition respects stage ``s``'s own forward and backward caps
    compete; ``m = U`` (one unit each) always does. Vectorised over ``m``: ``O(U)``.
    """
    U, S, stage = problem.num_units, problem.num_stages, problem.stages[s]
    cap = min(problem.forward_cap(s), problem.backward_cap(s))
    counts = np.arange(1, U + 1, dtype=np.int64)
    largest = largest_microbatch(problem, counts)
    keep = largest <= cap
    counts, largest = counts[keep], largest[keep]
    estimates = (counts + S - 1) * (stage.forward.at(largest) + stage.backward.at(largest))
    return int(counts[np.argmin(estimates)])


def local_greedy(problem: Problem) -> Plan:
    """Each stage runs, both ways, the equal partition into :func:`local_microbatches` parts.

    A myopic plan: each stage optimises its own compute (per-sample efficiency against
    pipeline fill) and ignores its links and every other stage.
    """
    require_problem(problem)
    partitions = [
        equal_partition(problem, local_microbatches(problem, s)) for s in range(problem.num_stages)
    ]
    return Plan.of(partitions, partitions)


@dataclass(frozen=True)
class Chain:
    """One direction of the pipeline as positions ``0..P-1``, in the order data flows.

    ``compute[p]`` is position ``p``'s compute time, ``links[p]`` the transfer from ``p`` to
    ``p + 1`` (``P - 1`` of them), ``tails[p]`` the time after ``p``'s last microbatch;
    ``cap`` is the largest shared microbatch, in samples.
    """

    compute: tuple[TimeFunction, ...]
    links: tuple[TimeFunction, ...]
    tails: tuple[float, ...]
    cap: int


def forward_chain(problem: Problem) -> Chain:
    """Stages ``0..S-1`` with ``Tf_s``, ``Cf_s``, no tails, cap ``min_s fcap_s``."""
    S = problem.num_stages
    return Chain(
        compute=tuple(stage.forward for stage in problem.stages),
        links=tuple(link.forward for link in problem.links),
        tails=(0.0,) * S,
        cap=min(problem.forward_cap(s) for s in range(S)),
    )


def backward_chain(problem: Problem) -> Chain:
    """Stages ``S-1..0`` with ``Tb_s``, ``Cb_s`` (``s+1 -> s``), tails, cap ``min_s bcap_s``."""
    S = problem.num_stages
    return Chain(
        compute=tuple(stage.backward for stage in reversed(problem.stages)),
        links=tuple(link.backward for link in reversed(problem.links)),
        tails=tuple(stage.tail for stage in reversed(problem.stages)),
        cap=min(problem.backward_cap(s) for s in range(S)),
    )


@dataclass(frozen=True)
class State:
    """The chain after some units went through it, every position on the same partition.

    ``ends[p]``: when position ``p`` is free (``P`` values); ``arrivals[p]``: when the link
    ``p -> p+1`` delivered its last transfer (``P - 1`` values, ``-inf`` before any);
    ``last``: the size of the last microbatch, in units (0 for the empty state).
    """

    ends: tuple[float, ...]
    arrivals: tuple[float, ...]
    last: int


def push(state: State, compute: list[float], links: list[float], size: int) -> State:
    """``state`` after one more microbatch of ``size`` units (model.md recurrences, common
    partition: ``E[p] = max(E[p], A[p-1]) + T_p``, ``A[p] = max(E[p], A[p]) + C_p``).

    ``compute[p]`` / ``links[p]`` are the times of that microbatch at position / link ``p``.
    """
    ends: list[float] = []
    arrivals: list[float] = []
    ready = 0.0
    for p, time in enumerate(compute):
        ends.append(max(state.ends[p], ready) + time)
        if p < len(links):
            ready = max(ends[p], state.arrivals[p]) + links[p]
            arrivals.append(ready)
    return State(tuple(ends), tuple(arrivals), size)


def rank(state: State, tails: tuple[float, ...]) -> tuple[float, float, int]:
    """Smaller is better: ``max_p(E[p] + tail_p)``, then ``sum_p E[p]``, then larger ``last``."""
    end = max(e + t for e, t in zip(state.ends, tails, strict=True))
    return (end, sum(state.ends), -state.last)


def chain_dp(chain: Chain, unit: int, num_units: int) -> list[int]:
    """A partition of ``num_units * unit`` samples (sizes in samples, multiples of ``unit``).

    ``best[u]`` is the single best :func:`rank` state among ``push(best[u - j], j)`` for
    every ``j`` in ``1..min(u, cap / unit)``, starting at time 0; the result is read back
    from ``best[num_units]``. Greedy: one state per ``u``, so not always the optimum over
    common partitions. Time ``O(U * cap / unit * P)``.

    The plain-Python reference; :func:`global_dp` runs :func:`compiled_chain_dps`, which
    returns the same partition.
    """
    most = min(chain.cap // unit, num_units)
    sizes = range(1, most + 1)
    compute = [[f(j * unit) for f in chain.compute] for j in sizes]
    links = [[f(j * unit) for f in chain.links] for j in sizes]
    P = len(chain.compute)
    best = [State((0.0,) * P, (-math.inf,) * (P - 1), 0)]
    for u in range(1, num_units + 1):
        candidates = (push(best[u - j], compute[j - 1], links[j - 1], j) for j in sizes if j <= u)
        best.append(min(candidates, key=lambda state: rank(state, chain.tails)))
    partition: list[int] = []
    u = num_units
    while u:
        partition.append(best[u].last * unit)
        u -= best[u].last
    return partition[::-1]


def compiled_chain_dps(chains: list[Chain], unit: int, num_units: int) -> list[list[int]]:
    """:func:`chain_dp` of each chain, compiled and in parallel
    (:func:`tidgap.fallback_cpu.setup_loops.chain_dps`): the same float operations in the
    same order, so the same partitions (sizes in samples)."""
    from tidgap.fallback_cpu.setup_loops import chain_dps

    def tables(functions: tuple[TimeFunction, ...], sizes: np.ndarray) -> np.ndarray:
        return np.array([f.at(sizes) for f in functions]).reshape(len(functions), len(sizes))

    sizes = [unit * np.arange(1, min(c.cap // unit, num_units) + 1) for c in chains]
    compute = [tables(c.compute, b) for c, b in zip(chains, sizes, strict=True)]
    links = [tables(c.links, b) for c, b in zip(chains, sizes, strict=True)]
    tails = [np.asarray(c.tails, dtype=np.float64) for c in chains]
    parts = chain_dps(compute, links, tails, num_units)
    return [[part * unit for part in partition] for partition in parts]


def global_dp(problem: Problem) -> Plan:
    """Every stage runs the :func:`chain_dp` partition of each direction.

    Forward: minimises ``forward_end``; backward (from time 0, the span after the flush):
    minimises ``max_s(G[s] + tail_s)``. The two directions are planned independently, as
    the flush allows (model.md), so the forward and backward partitions may differ.
    """
    require_problem(problem)
    S, unit, U = problem.num_stages, problem.unit, problem.num_units
    forward, backward = compiled_chain_dps(chains_of(problem), unit, U)
    return Plan.of([forward] * S, [backward] * S)


#: Candidate steps per second of one compiled chain DP (the two directions run side by
#: side): about 1.1e9 on the quiet 2-core development machine (2026-12-03: 8 stages,
#: 60,000 units, 13 s), 2.6e8 with other processes on its cores (2026-12-06: 55 s; a
#: 20 s search started it on the estimate 1e9 gave, and overran by 35 s); taken at the
#: loaded rate, so that the estimate errs long: once started, the DP cannot be stopped.
DP_STEPS_PER_SECOND = 2.5e8


def global_dp_seconds(problem: Problem) -> float:
    """About how long :func:`global_dp` takes: each direction's DP weighs, for every count
    ``u`` of units, ``min(u, cap)`` last microbatches at each of ``S`` positions."""
    U, S = problem.num_units, problem.num_stages
    most = max(min(chain.cap // problem.unit, U) for chain in chains_of(problem))
    steps = S * (most * (most + 1) // 2 + (U - most) * most)
    return steps / DP_STEPS_PER_SECOND


def chains_of(problem: Problem) -> list[Chain]:
    """The forward and the backward chain of ``problem``."""
    return [forward_chain(problem), backward_chain(problem)]


#: The paper's non-genetic planners by display name: ``problem -> Plan``.
HEURISTICS: dict[str, Callable[[Problem], Plan]] = {
    "local greedy": local_greedy,
    "global DP": global_dp,
}
#: About how long each heuristic of :data:`HEURISTICS` takes, in seconds (``problem ->
#: float``); a time-limited search skips one that would overrun its limit.
HEURISTIC_SECONDS: dict[str, Callable[[Problem], float]] = {
    "local greedy": lambda problem: 0.0,
    "global DP": global_dp_seconds,
}
