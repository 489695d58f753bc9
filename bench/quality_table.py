"""The README's quality table: for each built-in example, the best GPipe, the best 1F1B, the
best flush plan and the windowed plan within the best 1F1B's memory and at any memory, with
peak memory and wall time.

Run: ``python bench/quality_table.py [--time-limit 20] [--seed 0] [--backend numba]
[--backward free|aligned|mirrored] [--pricing auto|model|run]``; it prints a Markdown table
(one search of each family per example, each with the whole time limit; the first run also
compiles Numba's loops, so run it twice for the wall times). ``--backward`` is the search's
backward rule (:mod:`tidgap.optimize.backward_rules`): ``aligned``, only plans ``tidgap run``
runs without recomputing forwards; ``mirrored``, only plans it runs at the model's op
costs. A searched plan's cell ends in ``run T`` when ``tidgap run`` runs it at other op
costs than the search priced (recomputation, backwards over several stored forward chunks):
T is its prediction. ``--pricing`` is the windowed search's (``run``: the search prices
those costs itself, so no ``run T`` follows its cells); the flush search is model-priced.
"""

from __future__ import annotations

import math

from script_args import above, script_parser

from tidgap import example_names, load_problem, search
from tidgap.backends import BACKENDS
from tidgap.backends.ticks import PRICINGS
from tidgap.model.examples import EXAMPLE_PREFIX
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize.backward_rules import BACKWARD_RULES, FREE
from tidgap.optimize.driver import AUTO_PRICING
from tidgap.optimize.results import SearchResult, TradeoffPoint
from tidgap.runtime.pricing import run_evaluation, run_op_times
from tidgap.schedules.evaluation import Evaluation
from tidgap.schedules.families import baseline_evaluation, baseline_label


def held(peaks: list[int]) -> str:
    """Peak samples held per stage, ``12/9/6/3``."""
    return "/".join(map(str, peaks))


def cell(time: float, peaks: list[int], reference: float) -> str:
    """``7458 (1.021x) 12/9/6/3``: time, gain over ``reference``, peak held per stage."""
    return f"{time:.5g} ({reference / time:.3f}x) {held(peaks)}"


def searched_cell(problem: Problem, plan: Plan, evaluation: Evaluation, reference: float) -> str:
    """:func:`cell` of a searched plan, with ``tidgap run``'s prediction when it runs the
    plan at other op costs than the model's (``run 10207``)."""
    text = cell(evaluation.iteration_time, evaluation.peak_held, reference)
    priced = run_op_times(problem, plan)
    predicted = run_evaluation(problem, plan, priced).iteration_time if priced else None
    if predicted is None or math.isclose(predicted, evaluation.iteration_time, rel_tol=1e-9):
        return text
    return f"{text} run {predicted:.5g}"


def point(result: SearchResult, label: str) -> TradeoffPoint:
    """The trade-off row of ``result`` whose limit is ``label``."""
    return next(p for p in result.tradeoff if p.level.label == label)


def row(name: str, time_limit: float, seed: int, backend: str, backward: str, pricing: str) -> str:
    """One example's row."""
    problem = load_problem(EXAMPLE_PREFIX + name)
    common = dict(
        seed=seed,
        time_limit=time_limit,
        stagnation=None,
        backend=backend,
        backward=backward,
    )
    flush = search(problem, schedule="flush", **common)
    windowed = search(problem, schedule="windowed", pricing=pricing, **common)
    baselines = windowed.baselines
    one_f_one_b = baselines["1f1b"].iteration_time
    cells = []
    for schedule in ("gpipe", "1f1b"):
        m = baselines[schedule].microbatches
        evaluation = baseline_evaluation(problem, schedule, m)
        assert evaluation is not None
        label = baseline_label(schedule, m)
        cells.append(
            f"{label} {cell(evaluation.iteration_time, evaluation.peak_held, one_f_one_b)}"
        )
    cells.append(searched_cell(problem, flush.plan, flush.evaluation, one_f_one_b))
    for label in ("1F1B", "unlimited"):
        found = point(windowed, label)
        cells.append(
            "none"
            if found.evaluation is None
            else searched_cell(problem, found.plan, found.evaluation, one_f_one_b)
        )
    walls = f"{flush.wall_time:.1f} / {windowed.wall_time:.1f}"
    return f"| {name} | " + " | ".join(cells) + f" | {walls} |"


def main() -> None:
    """Print the table."""
    parser = script_parser(__doc__)
    parser.add_argument("--time-limit", type=above(float), default=20.0)
    parser.add_argument("--seed", type=above(int, or_equal=True), default=0)
    parser.add_argument("--backend", choices=("auto", *BACKENDS), default="numba")
    parser.add_argument("--backward", choices=BACKWARD_RULES, default=FREE)
    parser.add_argument("--pricing", choices=(AUTO_PRICING, *PRICINGS), default=AUTO_PRICING)
    args = parser.parse_args()
    print(
        "| example | best GPipe | best 1F1B | flush plan | windowed, 1F1B memory | "
        "windowed, any memory | wall s (flush / windowed) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in example_names():
        cells = row(name, args.time_limit, args.seed, args.backend, args.backward, args.pricing)
        print(cells, flush=True)


if __name__ == "__main__":
    main()
