"""Genetic operators of the joint GA, pure functions over ``xp`` in a registry.

An individual is three ``(S, K)`` int32 genes, evolved together (with an order the two
partitions interact: model.md, Ordered plans): ``forward`` and ``backward`` sizes in units
(:mod:`tidgap.optimize.operators`' chromosomes) and ``lead``
(:mod:`tidgap.optimize.order_genes`). Crossover takes whole stages, each stage's three rows
from one parent; a mutation changes one stage of one gene, reading the individual's three
uniforms ``u[p] = (stage, position, value)`` as the partition mutations do. Every child
is made valid by the repair (:func:`tidgap.optimize.order_genes.canonical`) before it is
scored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tidgap.backends.xp import namespace
from tidgap.optimize.operators import MUTATION_UNIFORMS, MUTATIONS, tournament
from tidgap.optimize.order_genes import canonical
from tidgap.optimize.rng import CounterRng, uniform_int

#: ``repair(forward, backward, lead) -> (lead, codes)``: :func:`canonical` or its twin.
Repair = Callable[[Any, Any, Any], tuple[Any, Any]]


@dataclass(frozen=True)
class JointGenes:
    """``forward``, ``backward``, ``lead``: ``(P, S, K)`` int32 each; ``codes`` ``(P, S, 2K)``
    int8, the valid order the leads stand for (``None`` until :meth:`repaired`)."""

    forward: Any
    backward: Any
    lead: Any
    codes: Any = None

    @property
    def size(self) -> int:
        """``P``."""
        return int(self.forward.shape[0])

    def rows(self) -> tuple[Any, Any, Any]:
        """``forward``, ``backward`` and ``lead``: the genes a repair reads."""
        return self.forward, self.backward, self.lead

    def arrays(self) -> tuple[Any, ...]:
        """:meth:`rows` and, when present, ``codes``."""
        return self.rows() if self.codes is None else (*self.rows(), self.codes)

    def take(self, index: Any) -> JointGenes:
        """The individuals at ``index`` (an index array or a slice)."""
        codes = None if self.codes is None else self.codes[index]
        return JointGenes(self.forward[index], self.backward[index], self.lead[index], codes)

    def reordered(self, order: Any, count: int) -> JointGenes:
        """The individuals at ``order[:count]`` (``order``: a permutation of all ``P``
        rows, ``(P,)`` on the host), moved into these arrays' first rows, one row at a time
        along its cycles: no fresh memory, where :meth:`take` writes a copy whose first touch
        costs 0.4 s at 1024 stages and 128 individuals. These genes are overwritten: only
        for arrays nothing else reads."""
        order = [int(i) for i in order]
        for array in self.arrays():
            done = [False] * len(order)
            for start in range(len(order)):
                if done[start] or order[start] == start:
                    continue
                first, row = array[start].copy(), start
                while order[row] != start:
                    array[row] = array[order[row]]
                    done[row], row = True, order[row]
                array[row], done[row] = first, True
        return JointGenes(*(array[:count] for array in self.arrays()))

    def repaired(self, repair: Repair = canonical) -> JointGenes:
        """The same partitions with canonical leads and their op codes (every order valid);
        ``repair`` is :func:`~tidgap.optimize.order_genes.canonical` or a compiled twin."""
        lead, codes = repair(*self.rows())
        return JointGenes(self.forward, self.backward, lead, codes)

    @staticmethod
    def empty(count: int, stages: int, width: int, xp: ModuleType) -> JointGenes:
        """``count`` uninitialised individuals with codes, in ``xp``."""
        rows = [xp.empty((count, stages, width), dtype=xp.int32) for _ in range(3)]
        return JointGenes(*rows, xp.empty((count, stages, 2 * width), dtype=xp.int8))

    @staticmethod
    def concatenate(parts: list[JointGenes]) -> JointGenes:
        """``parts`` one after another (codes kept only when every part has them)."""
        xp = namespace(parts[0].forward)
        codes = None
        if all(part.codes is not None for part in parts):
            codes = xp.concatenate([part.codes for part in parts])
        return JointGenes(
            xp.concatenate([part.forward for part in parts]),
            xp.concatenate([part.backward for part in parts]),
            xp.concatenate([part.lead for part in parts]),
            codes,
        )


#: ``mutation(genes, forward_caps (S,), backward_caps (S,), u (P, 3)) -> genes`` (codes
#: dropped): one change per individual.
JointMutation = Callable[[JointGenes, Any, Any, Any], JointGenes]


def on_forward(mutation: Callable[[Any, Any, Any], Any]) -> JointMutation:
    """A partition mutation applied to the forward partitions."""

    def apply(genes: JointGenes, forward_caps: Any, backward_caps: Any, u: Any) -> JointGenes:
        return JointGenes(mutation(genes.forward, forward_caps, u), genes.backward, genes.lead)

    return apply


def on_backward(mutation: Callable[[Any, Any, Any], Any]) -> JointMutation:
    """A partition mutation applied to the backward partitions."""

    def apply(genes: JointGenes, forward_caps: Any, backward_caps: Any, u: Any) -> JointGenes:
        return JointGenes(genes.forward, mutation(genes.backward, backward_caps, u), genes.lead)

    return apply


def _stage(genes: JointGenes, u: Any) -> tuple[Any, Any]:
    """``(stage, individuals)``: the stage each individual changes (from ``u[:, 0]``)."""
    xp = namespace(genes.lead)
    population, stages, _ = genes.lead.shape
    return uniform_int(u[:, 0], 0, stages), xp.arange(population)


def _with_lead_rows(genes: JointGenes, rows: Any, stage: Any, individuals: Any) -> JointGenes:
    """``genes`` with each individual's chosen stage of ``lead`` set to ``rows`` ``(P, K)``."""
    lead = genes.lead.copy()
    lead[individuals, stage] = rows
    return JointGenes(genes.forward, genes.backward, lead)


def _step(u: Any) -> Any:
    """``-1`` or ``+1`` from uniforms."""
    xp = namespace(u)
    return xp.where(u < 0.5, -1, 1)


def nudge_lead(genes: JointGenes, forward_caps: Any, backward_caps: Any, u: Any) -> JointGenes:
    """One backward of a stage runs one forward earlier or later."""
    xp = namespace(genes.lead)
    stage, individuals = _stage(genes, u)
    rows = genes.lead[individuals, stage]
    k = uniform_int(u[:, 1], 0, xp.maximum((genes.backward[individuals, stage] > 0).sum(1), 1))
    column = xp.arange(rows.shape[1])[None, :]
    rows = rows + xp.where(column == k[:, None], _step(u[:, 2])[:, None], 0)
    return _with_lead_rows(genes, rows.astype(genes.lead.dtype), stage, individuals)


def shift_leads(genes: JointGenes, forward_caps: Any, backward_caps: Any, u: Any) -> JointGenes:
    """Every backward of a stage from a random one (of its ``N_s``) on runs one forward
    earlier or later."""
    xp = namespace(genes.lead)
    stage, individuals = _stage(genes, u)
    rows = genes.lead[individuals, stage]
    k = uniform_int(u[:, 1], 0, xp.maximum((genes.backward[individuals, stage] > 0).sum(1), 1))
    column = xp.arange(rows.shape[1])[None, :]
    rows = rows + xp.where(column >= k[:, None], _step(u[:, 2])[:, None], 0)
    return _with_lead_rows(genes, rows.astype(genes.lead.dtype), stage, individuals)


def set_lead(genes: JointGenes, forward_caps: Any, backward_caps: Any, u: Any) -> JointGenes:
    """A stage leads every backward by the same random ``0..S`` forwards (1F1B's shape:
    stage ``s`` of 1F1B leads by ``S-s-1`` while forwards remain)."""
    xp = namespace(genes.lead)
    stage, individuals = _stage(genes, u)
    stages, width = genes.lead.shape[1:]
    lead = uniform_int(u[:, 1], 0, stages + 1)
    rows = xp.broadcast_to(lead[:, None], (len(lead), width))
    return _with_lead_rows(genes, rows.astype(genes.lead.dtype), stage, individuals)


def flush_stage(genes: JointGenes, forward_caps: Any, backward_caps: Any, u: Any) -> JointGenes:
    """A stage runs all its forwards before its first backward (leads clipped when lowered)."""
    xp = namespace(genes.lead)
    stage, individuals = _stage(genes, u)
    width = genes.lead.shape[2]
    rows = xp.full((len(stage), width), width, dtype=genes.lead.dtype)
    return _with_lead_rows(genes, rows, stage, individuals)


def lead_from_neighbour(
    genes: JointGenes, forward_caps: Any, backward_caps: Any, u: Any
) -> JointGenes:
    """A stage takes the next stage's leads plus one (or the previous stage's minus one, for
    the last stage): the staircase of 1F1B."""
    xp = namespace(genes.lead)
    stage, individuals = _stage(genes, u)
    stages = genes.lead.shape[1]
    last = stage == stages - 1
    neighbour = xp.where(last, xp.maximum(stage - 1, 0), stage + 1)
    rows = genes.lead[individuals, neighbour] + xp.where(last, -1, 1)[:, None]
    return _with_lead_rows(genes, rows.astype(genes.lead.dtype), stage, individuals)


def align_directions(
    genes: JointGenes, forward_caps: Any, backward_caps: Any, u: Any
) -> JointGenes:
    """A stage's backward partition becomes its forward one, or the reverse (if the caps
    allow): aligned boundaries run backward on the stored graphs, with no recomputation."""
    xp = namespace(genes.lead)
    stage, individuals = _stage(genes, u)
    forward = genes.forward[individuals, stage]
    backward = genes.backward[individuals, stage]
    to_backward = (u[:, 1] < 0.5) & (forward.max(axis=1) <= backward_caps[stage])
    to_forward = ~to_backward & (backward.max(axis=1) <= forward_caps[stage])
    new_forward, new_backward = genes.forward.copy(), genes.backward.copy()
    new_backward[individuals, stage] = xp.where(to_backward[:, None], forward, backward)
    new_forward[individuals, stage] = xp.where(to_forward[:, None], backward, forward)
    return JointGenes(new_forward, new_backward, genes.lead)


#: The mutations of the joint GA, by name (their order is part of the seeded stream):
#: every partition mutation on either direction, then the order mutations.
JOINT_MUTATIONS: dict[str, JointMutation] = {
    **{f"forward_{name}": on_forward(op) for name, op in MUTATIONS.items()},
    **{f"backward_{name}": on_backward(op) for name, op in MUTATIONS.items()},
    "align_directions": align_directions,
    "nudge_lead": nudge_lead,
    "shift_leads": shift_leads,
    "set_lead": set_lead,
    "flush_stage": flush_stage,
    "lead_from_neighbour": lead_from_neighbour,
}


#: The positions in :data:`JOINT_MUTATIONS` of the mutations a mirrored search draws from:
#: under the ``mirrored`` rule the backward partition is the forward one, so the mutations
#: of the backward partition and ``align_directions`` would change nothing.
MIRRORED_MUTATIONS: tuple[int, ...] = tuple(
    i
    for i, name in enumerate(JOINT_MUTATIONS)
    if not name.startswith("backward_") and name != "align_directions"
)


def mutation_table(mirrored: bool) -> tuple[int, ...]:
    """The positions in :data:`JOINT_MUTATIONS` a mutation is drawn from: all of them, or
    :data:`MIRRORED_MUTATIONS` for a ``mirrored`` search."""
    return MIRRORED_MUTATIONS if mirrored else tuple(range(len(JOINT_MUTATIONS)))


def mirror(genes: JointGenes, caps: Any) -> JointGenes:
    """``genes`` with each individual's backward partition set to its forward one where
    every forward microbatch is within the ``(S,)`` backward ``caps`` (units); elsewhere
    unchanged (a rule that wants mirrored plans then refuses it). Codes dropped."""
    xp = namespace(genes.forward)
    fits = (genes.forward <= caps[None, :, None]).all(axis=(1, 2))[:, None, None]
    return JointGenes(genes.forward, xp.where(fits, genes.forward, genes.backward), genes.lead)


def joint_mutate(
    genes: JointGenes,
    forward_caps: Any,
    backward_caps: Any,
    rng: CounterRng,
    rate: float,
    mirrored: bool = False,
) -> JointGenes:
    """With probability ``rate`` per individual, one mutation drawn from
    :func:`mutation_table` (the three draws of :func:`tidgap.optimize.operators.mutate`),
    then, when ``mirrored``, :func:`mirror`; codes dropped."""
    xp = namespace(genes.forward)
    population = genes.size
    table = mutation_table(mirrored)
    chosen = rng.integers(0, len(table), (population,))
    chosen = xp.where(rng.random((population,)) < rate, chosen, -1)
    u = rng.random((population, MUTATION_UNIFORMS))
    forward, backward, lead = genes.forward.copy(), genes.backward.copy(), genes.lead.copy()
    operators = list(JOINT_MUTATIONS.values())
    for index, position in enumerate(table):
        members = xp.nonzero(chosen == index)[0]
        if members.size:
            changed = operators[position](
                genes.take(members), forward_caps, backward_caps, u[members]
            )
            forward[members], backward[members] = changed.forward, changed.backward
            lead[members] = changed.lead
    mutated = JointGenes(forward, backward, lead)
    return mirror(mutated, backward_caps) if mirrored else mutated


def mutate_repaired(
    genes: JointGenes,
    forward_caps: Any,
    backward_caps: Any,
    rng: CounterRng,
    rate: float,
    mirrored: bool = False,
    repair: Repair = canonical,
) -> JointGenes:
    """:func:`joint_mutate` (three draws), then ``repair``: new valid individuals."""
    return joint_mutate(genes, forward_caps, backward_caps, rng, rate, mirrored).repaired(repair)


#: ``mutate(genes, forward_caps, backward_caps, rng, rate, mirrored=False) -> genes``:
#: :func:`mutate_repaired` with the backend's repair, or a fused twin with the same draws
#: and results.
Mutator = Callable[..., JointGenes]


def joint_crossover(first: JointGenes, second: JointGenes, u: Any) -> JointGenes:
    """Uniform crossover of whole stages: child stage ``s`` (its three rows) is ``first``'s
    if ``u[p, s] < 0.5``, else ``second``'s."""
    xp = namespace(first.forward)
    pick = (u < 0.5)[:, :, None]
    return JointGenes(
        xp.where(pick, first.forward, second.forward),
        xp.where(pick, first.backward, second.backward),
        xp.where(pick, first.lead, second.lead),
    )


def joint_breed(
    genes: JointGenes,
    fitness: Any,
    forward_caps: Any,
    backward_caps: Any,
    rng: CounterRng,
    children: int,
    crossover_rate: float,
    mutation_rate: float,
    tournament_size: int,
    mirrored: bool = False,
    repair: Repair = canonical,
    out: JointGenes | None = None,
) -> JointGenes:
    """``children`` valid offspring: two tournaments, stage crossover (with probability
    ``crossover_rate``, else the first parent), :func:`joint_mutate` (``mirrored`` or not),
    then ``repair``. Seven draws, in order, as :func:`tidgap.optimize.operators.breed`.
    ``out`` (``children`` individuals with codes), where given, receives them."""
    xp = namespace(genes.forward)
    first = genes.take(tournament(fitness, rng, children, tournament_size))
    second = genes.take(tournament(fitness, rng, children, tournament_size))
    crossed = joint_crossover(first, second, rng.random((children, genes.forward.shape[1])))
    use_cross = (rng.random((children,)) < crossover_rate)[:, None]
    mixed = joint_crossover(crossed, first, xp.where(use_cross, 0.0, 1.0))
    mutated = joint_mutate(mixed, forward_caps, backward_caps, rng, mutation_rate, mirrored)
    children_genes = mutated.repaired(repair)
    if out is None:
        return children_genes
    for target, source in zip(out.arrays(), children_genes.arrays(), strict=True):
        target[...] = source
    return out
