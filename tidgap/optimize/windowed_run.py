"""A prepared windowed search (:class:`WindowedRun`) and its plans decoded: each level's
best checked and evaluated with the reference simulator, priced as the search priced it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tidgap.backends.ticks import MODEL_PRICING, RUN_PRICING
from tidgap.backends.xp import namespace, to_host
from tidgap.model.plan import Plan, check_plan
from tidgap.model.problem import Problem
from tidgap.optimize.ga import StopRule
from tidgap.optimize.genome import decode_plan
from tidgap.optimize.joint_operators import JointGenes
from tidgap.optimize.joint_optimizer import JointOptimizer
from tidgap.optimize.limits import MemoryLevel
from tidgap.optimize.memory import format_bytes
from tidgap.optimize.preparation import Phases, progress_reporter
from tidgap.optimize.results import SearchProgress, TradeoffPoint
from tidgap.optimize.run_memory import RunMemory, run_evaluated
from tidgap.runtime.pricing import run_evaluation
from tidgap.schedules.baselines import BaselineResult
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import SCHEDULES

#: The family searched.
SEARCHED = SCHEDULES["windowed"]


@dataclass
class WindowedRun:
    """A prepared windowed search: the optimizer and what its result needs (the levels,
    the baselines and heuristics, the first, flush search's effort ``first`` and plan
    ``flush_plan``, the clocks, each level's best seed ``seed_bests``; ``first_cut``: a
    signal stopped that first search, which no state holds, so none is saved;
    ``heuristic_times``: the heuristics' iteration times, by name, as far as evaluated;
    ``reserve``: the seconds its end keeps for decoding the plans, :meth:`end`)."""

    problem: Problem
    optimizer: JointOptimizer
    stop: StopRule
    levels: list[MemoryLevel]
    in_force: MemoryLevel
    baselines: dict[str, BaselineResult]
    heuristics: dict[str, Plan]
    backend: str
    seed: int
    first: tuple[int, int]
    flush_plan: Plan | None
    started: float
    clock: float
    time_limit: float | None
    phases: Phases
    backward: str
    pricing: str
    on_progress: Callable[[SearchProgress], None] | None
    seed_bests: list[tuple[JointGenes, int] | None]
    first_cut: bool = False
    heuristic_times: dict[str, float] = field(default_factory=dict)
    reserve: float = 0.0

    def end(self) -> float:
        """When a time-limited search's improvements stop (``time.perf_counter()``): its
        time limit from :attr:`clock`, less the ``reserve`` seconds kept for checking and
        timing its plans (:func:`~tidgap.optimize.windowed_finish.decoding_seconds`)."""
        assert self.time_limit is not None
        return self.clock + self.time_limit - self.reserve

    @property
    def memory_pricing(self) -> str:
        """How the limits count memory: ``run`` where the search counts every stage as
        ``tidgap run`` holds it (:mod:`tidgap.optimize.run_memory`), else ``model``."""
        return MODEL_PRICING if self.optimizer.space.memory is None else RUN_PRICING

    def report(self) -> Callable | None:
        """The progress reporter of the GA (counts after the flush search's)."""
        gpipe_time = self.baselines["gpipe"].iteration_time
        return progress_reporter(self.optimizer.ticked, gpipe_time, self.on_progress, self.first)


def decoded(
    found: list[JointGenes | None],
    problem: Problem,
    levels: list[MemoryLevel],
    pricing: str = MODEL_PRICING,
    memory: RunMemory | None = None,
) -> list[TradeoffPoint]:
    """Each level's plan from its best individual (``None``: no plan), checked and
    evaluated with the reference simulator (:func:`priced_plan`), once per distinct
    individual (levels often share one: a simulation takes a second at 256 stages)."""
    priced: dict[bytes, tuple[Plan, Evaluation, list[int]]] = {}
    points = []
    for genes, level in zip(found, levels, strict=True):
        if genes is None:
            points.append(TradeoffPoint(level, None, None))
            continue
        key = b"".join(to_host(array).tobytes() for array in genes.arrays())
        if key not in priced:
            priced[key] = priced_plan(genes, problem, pricing, memory)
        plan, evaluation, held = priced[key]
        allowed = allowed_held(level, memory)
        if any(h > a for h, a in zip(held, allowed, strict=True)):
            raise AssertionError(f"the plan for {level.label} holds {held}, over {allowed}")
        points.append(TradeoffPoint(level, plan, evaluation))
    return points


def priced_plan(
    genes: JointGenes,
    problem: Problem,
    pricing: str = MODEL_PRICING,
    memory: RunMemory | None = None,
) -> tuple[Plan, Evaluation, list[int]]:
    """The plan of one individual (``(1, S, K)`` genes), checked and evaluated with the
    reference simulator (its times priced by ``pricing``; with ``memory``, its
    ``peak_memory`` as ``tidgap run`` holds it:
    :func:`~tidgap.optimize.run_memory.run_evaluated`), and what each stage holds as the
    search counts it (samples; with ``memory``, its units)."""
    plan = decode_plan(genes.forward[0], genes.backward[0], problem, genes.codes[0])
    check_plan(plan, problem)
    if pricing == RUN_PRICING:
        evaluation = run_evaluation(problem, plan)
    else:
        evaluation = SEARCHED.evaluate(problem, plan)
    if memory is None:
        return plan, evaluation, list(evaluation.peak_held)
    xp = namespace(genes.forward)
    peaks = xp.asarray([evaluation.peak_held], dtype=xp.int64)
    held = to_host(memory.held(peaks, genes.forward, genes.backward, genes.lead))[0].tolist()
    return plan, run_evaluated(problem, plan, evaluation), held


def allowed_held(level: MemoryLevel, memory: RunMemory | None) -> list[int]:
    """What ``level`` lets each stage hold as the search counts it (:func:`priced_plan`)."""
    return list(level.held) if memory is None else to_host(memory.limit(level)).tolist()


def leanest_held(run: WindowedRun) -> str:
    """For a search that found no plan within its limit in force: what the plan least over
    it holds where it is most over, as ``"; the leanest plan found holds 121 kB (120712 B) on
    stage 1"`` (samples without bytes per sample); empty where no order was valid."""
    genes = run.optimizer.leanest(run.in_force)
    if genes is None:
        return ""
    memory = run.optimizer.space.memory
    _, evaluation, held = priced_plan(genes, run.problem, run.pricing, memory)
    allowed = allowed_held(run.in_force, memory)
    stage = max(range(len(held)), key=lambda s: held[s] - allowed[s])
    amount = f"{evaluation.peak_held[stage]} samples"
    if evaluation.peak_memory is not None:
        peak = evaluation.peak_memory[stage]
        amount = f"{format_bytes(peak)} ({int(peak)} B)"
    return f"; the leanest plan found holds {amount} on stage {stage}"
