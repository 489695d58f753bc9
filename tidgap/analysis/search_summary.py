"""The lines that sum up a search: the plan's time beside the best baseline overall, said
plainly when a baseline is faster."""

from __future__ import annotations

from tidgap.optimize.driver import SearchResult
from tidgap.schedules.baselines import BaselineResult
from tidgap.schedules.families import TIMED_BASELINES, baseline_label


def best_rival(baselines: dict[str, BaselineResult]) -> BaselineResult:
    """The fastest of the best GPipe and the best 1F1B (GPipe on a tie)."""
    return min((baselines[name] for name in TIMED_BASELINES), key=lambda b: b.iteration_time)


def verdict(plan_time: float, rival: BaselineResult, unit: str) -> str:
    """``best baseline: 1F1B(9) 7617 ms, 0.60% faster than this plan`` or ``... slower``."""
    name = baseline_label(rival.schedule, rival.microbatches)
    ratio = rival.iteration_time / plan_time
    if ratio < 1:
        how = (
            f"{1 / ratio - 1:.2%} FASTER than this plan (1F1B interleaves forwards and "
            "backwards; flush plans do not)"
        )
    elif ratio == 1:
        how = "as fast as this plan"
    else:
        how = f"this plan is {ratio:.3f}x faster ({ratio - 1:.2%})"
    return f"best baseline: {name} {rival.iteration_time:.6g} {unit}, {how}"


def summary_lines(result: SearchResult) -> list[str]:
    """The search's headline and its comparison with the best baseline overall."""
    unit = result.problem.time_unit
    setup = sum(result.setup.values())
    plan_time = result.evaluation.iteration_time
    return [
        f"best plan: iteration {plan_time:.6g} {unit}, {result.speedup_over_gpipe:.3f}x best "
        f"GPipe ({result.generations} generations, {result.evaluations} evaluations, "
        f"{result.wall_time:.1f} s of which setup {setup:.1f} s (compile "
        f"{result.setup.get('compile', 0.0):.1f} s), {result.backend}, "
        f"stopped on {result.stop_reason})",
        f"  {verdict(plan_time, best_rival(result.baselines), unit)}",
    ]
