"""The annealing's part of a state file: a windowed search saved while it anneals after
its GA (phase :data:`~tidgap.optimize.checkpoint.ANNEAL_PHASE`, or
:data:`~tidgap.optimize.checkpoint.MIRRORED_PHASE` in a run-priced search's mirrored first
search) resumes that annealing.

Such a state is the GA's state as the GA ended (its islands, ``counters`` and ``draws``,
before the seed polish), with ``meta["anneal"]`` (``step`` s taken, ``done``: how far the
temperature schedule is, ``0..1``; the generator's ``draws`` then; ``reason``, why the GA
stopped) and the arrays ``anneal_forward``, ``_backward``, ``_lead`` ``(C, S, K)`` (the chains) and
``anneal_best_forward``, ``_backward``, ``_lead`` ``(I, S, K)`` (each island's fittest any
chain reached). Their scores are not saved: a resume scores them again. A search that ends
without a signal writes the GA's state back, so its file goes on as before: more
generations with ``--resume``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from tidgap.backends.xp import namespace, to_host
from tidgap.model.errors import InputError
from tidgap.model.numbers import is_integer, is_number
from tidgap.optimize.anneal import AnnealState
from tidgap.optimize.checkpoint import ANNEAL_PHASE, MAX_GENERATION, Checkpoint, SavedState
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.joint_optimizer import JointOptimizer
from tidgap.optimize.limits import penalised
from tidgap.optimize.rng import CounterRng

#: Why a GA stops other than a signal (:meth:`~tidgap.optimize.ga.StopRule.reason`).
GA_STOP_REASONS = ("generations", "time limit", "stagnation")
#: The gene rows saved of the chains and of the bests.
ROWS = ("forward", "backward", "lead")
PREFIX = "anneal_"
#: Most steps a state may count: 4 per generation of :data:`MAX_GENERATION` (more than a
#: day of the fastest annealing), so a larger count is a damaged file.
MAX_STEP = 4 * MAX_GENERATION


@dataclass(frozen=True)
class ResumedAnnealing:
    """An annealing read from a state: its ``state`` (chains scored again), the generator's
    ``draws`` to go on from, the GA's stop ``reason`` and the ``ga`` state it began from."""

    state: AnnealState
    draws: int
    reason: str
    ga: SavedState


@dataclass
class AnnealSaving:
    """Saving an annealing to ``checkpoint``: the ``ga`` state it began from, the GA's stop
    ``reason``, and the generator the annealing draws from (``rng``)."""

    checkpoint: Checkpoint
    ga: SavedState
    reason: str
    rng: CounterRng
    wrote: bool = False

    def due(self, state: AnnealState) -> None:
        """Save ``state`` if the checkpoint is due."""
        if self.checkpoint.is_due:
            self.save(state)

    def save(self, state: AnnealState) -> None:
        """Save ``state`` now (unless the checkpoint is closed)."""
        self.checkpoint.write(with_annealing(self.ga, state, self.rng.draws, self.reason))
        self.wrote = True

    def finished(self) -> None:
        """The search ended without a signal: the file holds the GA's state again."""
        if self.wrote:
            self.checkpoint.write(self.ga)


def with_annealing(ga: SavedState, state: AnnealState, draws: int, reason: str) -> SavedState:
    """``ga`` with ``state``'s annealing: phase :data:`ANNEAL_PHASE`, or the mirrored first
    search's (:data:`~tidgap.optimize.checkpoint.MIRRORED_PHASE`) for its annealing."""
    record = {"step": state.step, "done": state.done, "draws": draws, "reason": reason}
    best = JointGenes.concatenate(state.best)
    arrays = dict(ga.arrays)
    for name, chains, bests in zip(ROWS, state.chains.genes.rows(), best.rows(), strict=True):
        arrays[f"{PREFIX}{name}"] = to_host(chains)
        arrays[f"{PREFIX}best_{name}"] = to_host(bests)
    phase = ga.meta.get("phase") or ANNEAL_PHASE
    return replace(ga, meta={**ga.meta, "phase": phase, "anneal": record}, arrays=arrays)


def ga_part(saved: SavedState) -> SavedState:
    """``saved`` without its annealing: the GA's state it began from (in the mirrored first
    search's phase where it was that search's)."""
    meta = {name: value for name, value in saved.meta.items() if name != "anneal"}
    arrays = {name: a for name, a in saved.arrays.items() if not name.startswith(PREFIX)}
    phase = None if saved.phase == ANNEAL_PHASE else saved.phase
    return replace(saved, meta={**meta, "phase": phase}, arrays=arrays)


def resumed_annealing(
    saved: SavedState, optimizer: JointOptimizer, per_island: int | None
) -> ResumedAnnealing:
    """The annealing ``saved`` holds, for ``optimizer`` (the saved GA's state restored,
    annealing ``per_island`` chains per island): :class:`InputError` naming the file and
    field unless it fits."""
    record = saved.meta.get("anneal")
    if not isinstance(record, dict):
        raise InputError("is not an annealing record (an object)", ("anneal",), source=saved.source)
    step, done, draws, reason = (record.get(name) for name in ("step", "done", "draws", "reason"))
    checks = (
        ("step", is_integer(step) and 0 <= step <= MAX_STEP, f"a count up to {MAX_STEP}"),
        ("done", is_number(done) and math.isfinite(done) and 0 <= done <= 1, "a number 0..1"),
        ("draws", is_integer(draws) and 0 <= draws < 2**64, "a count below 2**64"),
        ("reason", reason in GA_STOP_REASONS, f"one of {', '.join(GA_STOP_REASONS)}"),
    )
    for name, fits, what in checks:
        if not fits:
            raise InputError(
                f"is {record.get(name)!r}, not {what}", ("anneal", name), source=saved.source
            )
    state = AnnealState.start(optimizer.islands, per_island)
    with saved.fitting():
        chains = _genes(saved, optimizer, "", state.chains.genes, "the annealing's chains'")
        best = _genes(
            saved, optimizer, "best_", JointGenes.concatenate(state.best), "the annealing's bests'"
        )
    space, xp = optimizer.space, namespace(state.chains.fitness)
    state.chains.genes = chains
    state.chains.fitness = penalised(*space.evaluate(chains), state.chains.held)
    held = xp.stack([island.held for island in optimizer.islands])
    fitness = penalised(*space.evaluate(best), held)
    state.best = [best.take(slice(i, i + 1)) for i in range(best.size)]
    state.best_fitness = [int(value) for value in fitness]
    state.step, state.done = int(step), float(done)
    return ResumedAnnealing(state, int(draws), reason, ga_part(saved))


def _genes(
    saved: SavedState, optimizer: JointOptimizer, kind: str, like: JointGenes, owner: str
) -> JointGenes:
    """The saved ``anneal_{kind}*`` rows, checked against ``like`` and repaired."""
    rows = [np.asarray(saved.arrays[f"{PREFIX}{kind}{name}"]) for name in ROWS]
    return optimizer.restored_genes(rows, like, owner).repaired(optimizer.space.repair)
