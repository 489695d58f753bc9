"""tidgap: plan pipeline-parallel training with unequal, per-stage microbatch partitions.

``import tidgap`` loads neither CuPy nor Numba; backends are imported when used.
"""

from importlib.metadata import PackageNotFoundError, version

from tidgap.model.errors import InputError
from tidgap.model.examples import example_names
from tidgap.model.plan import Plan, check_plan, load_plan
from tidgap.model.problem import Link, Problem, Stage, load_problem
from tidgap.model.timefn import TimeFunction, affine, table
from tidgap.optimize.driver import SearchResult, search
from tidgap.optimize.heuristics import global_dp, local_greedy
from tidgap.optimize.many import search_many
from tidgap.optimize.optimizer import Optimizer, Stopping
from tidgap.optimize.scores import Scores, per_plan
from tidgap.runtime.pricing import run_evaluation
from tidgap.schedules.baselines import (
    BaselineResult,
    best_baselines,
    equal_partition,
    feasible_microbatch_counts,
    gpipe,
    gpipe_plan,
    one_f_one_b,
    one_f_one_b_plan,
    pipedream,
)
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import SCHEDULES, Family, baseline, evaluate
from tidgap.schedules.ir import Action, Order

try:
    __version__ = version("tidgap")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "Action",
    "Family",
    "Optimizer",
    "Order",
    "SCHEDULES",
    "BaselineResult",
    "Evaluation",
    "InputError",
    "Link",
    "Plan",
    "Problem",
    "Scores",
    "SearchResult",
    "Stage",
    "Stopping",
    "TimeFunction",
    "affine",
    "baseline",
    "best_baselines",
    "check_plan",
    "equal_partition",
    "evaluate",
    "example_names",
    "feasible_microbatch_counts",
    "global_dp",
    "gpipe",
    "gpipe_plan",
    "load_plan",
    "load_problem",
    "local_greedy",
    "one_f_one_b",
    "one_f_one_b_plan",
    "per_plan",
    "pipedream",
    "run_evaluation",
    "search",
    "search_many",
    "table",
]
