"""What a run pays that the cost model does not know: the forwards a recomputing stage runs
again. model.md has no recomputation; a stage that recomputes (:func:`tidgap.runtime.
lowering.recomputes`) re-runs each backward chunk's forward with autograd before its
backward, so its backward costs about its forward plus its backward of the same samples."""

from __future__ import annotations

from collections.abc import Sequence

from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.model.timefn import plus
from tidgap.runtime.lowering import recomputes


def profiled_with_recompute(problem: Problem) -> bool:
    """Whether ``tidgap profile --recompute`` timed the backwards (``source.timing.
    recompute``): then every backward time already includes its forward."""
    source = problem.source if isinstance(problem.source, dict) else {}
    timing = source.get("timing")
    return isinstance(timing, dict) and timing.get("recompute") is True


def recompute_priced(problem: Problem, recompute: Sequence[bool]) -> Problem:
    """``problem`` with the backward of each stage ``s`` with ``recompute[s]`` priced as
    its forward plus its backward (time functions summed, :func:`tidgap.model.timefn.plus`);
    ``problem`` itself when no stage recomputes or the profile timed backwards that way.
    The forward is the profiled one, with autograd, as the recomputation runs it (the
    stage's first forwards run without a graph, a little faster than the model has them)."""
    if not any(recompute) or profiled_with_recompute(problem):
        return problem
    stages = [
        stage.model_copy(update={"backward": plus(stage.forward, stage.backward)})
        if again
        else stage
        for stage, again in zip(problem.stages, recompute, strict=True)
    ]
    return problem.model_copy(update={"stages": stages})


def priced_for_run(problem: Problem, plan: Plan) -> Problem:
    """:func:`recompute_priced` for the stages that recompute when ``plan`` runs."""
    return recompute_priced(problem, recomputes(plan))
