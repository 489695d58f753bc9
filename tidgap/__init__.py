"""tidgap: plan pipeline-parallel training with unequal, per-stage microbatch partitions.

``import tidgap`` loads neither CuPy nor Numba; backends are imported when used, and
each name below is imported when first used (so the ``tidgap`` command starts, and
Ctrl-C while it loads, at once).
"""

from __future__ import annotations

from importlib import import_module
from pkgutil import iter_modules
from typing import Any

from tidgap import started  # noqa: F401  (the parent at start, before anything slower)

#: Each public name and the module that defines it.
_EXPORTS = {
    "Action": "tidgap.schedules.ir",
    "BaselineResult": "tidgap.schedules.baselines",
    "Evaluation": "tidgap.schedules.evaluation",
    "Family": "tidgap.schedules.families",
    "InputError": "tidgap.model.errors",
    "Link": "tidgap.model.problem",
    "Optimizer": "tidgap.optimize.optimizer",
    "Order": "tidgap.schedules.ir",
    "Plan": "tidgap.model.plan",
    "Problem": "tidgap.model.problem",
    "SCHEDULES": "tidgap.schedules.families",
    "Scores": "tidgap.optimize.scores",
    "SearchResult": "tidgap.optimize.driver",
    "Stage": "tidgap.model.problem",
    "Stopping": "tidgap.optimize.optimizer",
    "TimeFunction": "tidgap.model.timefn",
    "affine": "tidgap.model.timefn",
    "baseline": "tidgap.schedules.families",
    "best_baselines": "tidgap.schedules.baselines",
    "check_plan": "tidgap.model.plan",
    "equal_partition": "tidgap.schedules.baselines",
    "evaluate": "tidgap.schedules.families",
    "example_names": "tidgap.model.examples",
    "feasible_microbatch_counts": "tidgap.schedules.baselines",
    "global_dp": "tidgap.optimize.heuristics",
    "gpipe": "tidgap.schedules.baselines",
    "gpipe_plan": "tidgap.schedules.baselines",
    "load_plan": "tidgap.model.plan",
    "load_problem": "tidgap.model.problem",
    "local_greedy": "tidgap.optimize.heuristics",
    "one_f_one_b": "tidgap.schedules.baselines",
    "one_f_one_b_plan": "tidgap.schedules.baselines",
    "per_plan": "tidgap.optimize.scores",
    "pipedream": "tidgap.schedules.baselines",
    "run_evaluation": "tidgap.runtime.pricing",
    "search": "tidgap.optimize.driver",
    "search_many": "tidgap.optimize.many",
    "table": "tidgap.model.timefn",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """The public ``name`` (or ``__version__``), imported from its module on first use."""
    if name == "__version__":
        globals()[name] = _installed_version()
        return globals()[name]
    if name in {module.name for module in iter_modules(__path__)}:
        # a submodule (``tidgap.optimize.many``), with the modules the public names come
        # from loaded, as when the package imported them all
        for module in sorted(set(_EXPORTS.values())):
            import_module(module)
        return import_module(f"{__name__}.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the public ones not yet imported too."""
    return sorted({*globals(), *_EXPORTS})


def _installed_version() -> str:
    """The installed distribution's version; ``0+unknown`` in a source tree not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tidgap")
    except PackageNotFoundError:
        return "0+unknown"
