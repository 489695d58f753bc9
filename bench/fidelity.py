"""How well the cost model predicts real runs (issue 12): profile a small GPT on 2 stages,
calibrate it through the runtime (``tidgap calibrate``), search plans on the calibrated
problem (a flush and a windowed plan whose backward partitions are their forward ones, a
windowed plan that recomputes nothing, and windowed plans free to recompute: one priced as
``tidgap run`` runs it, the search's default on a calibrated problem, and one priced by the
model alone, ``--pricing model``; and one within half the best 1F1B's memory, which may
recompute to fit), run GPipe(m), 1F1B(m), GPipe(4)'s twin whose every stage
recomputes and the searched plans with ``tidgap run`` (``--repeats`` rounds, each one
``tidgap run`` of all of them in turn, iteration by iteration, in the same processes
(``--compare``), so that every plan meets the machine's same moments), and print measured
against both predictions (each op timed as the runtime runs it, as ``tidgap run`` does),
with the ranking of the plans by prediction and by measurement (and which labels name the
same plan: a measured difference between them is the machine's noise). A last column
divides each round by its median measured/predicted ratio over all plans (the machine's
speed in that round) before taking each plan's median: what is left is the model's error
in comparing plans, not in absolute time (a uniform error, the machine's or the model's,
drops out).
Two columns come from ``tidgap run --replay`` (medians over rounds): the error against the
model fed the run's median op and transfer times and against the median of models fed
times drawn independently from the run's iterations (the first plus what the ops'
variation costs), and last the per-iteration replay (the model fed each timed
iteration's own op and transfer times), its median error over iterations: what the
model's dependencies leave once the op times are exactly right. A line gives each plan's
largest per-stage error of the memory held for backwards against its prediction (and, for
recomputing plans, against the model's figure), and one the memory held by the plan
searched within half 1F1B's memory against that limit.
Each round first calibrates afresh (``tidgap calibrate --rounds 1``, about 28 s: GPipe(m),
1F1B(m) and the recomputing twins) and runs against that: a column gives the error
against the round's own calibration, made seconds before its runs, which leaves out most
of the machine's drift between the search's calibration and the runs. The per-round
medians and predictions go to ``DIR/fidelity.json``. A last line compares 1F1B(m) with
GPipe(m) (the same ops in another order; predicted apart where the calibration timed ops
by the op before them).

Run on a quiet machine: ``python bench/fidelity.py [--out-dir DIR] [--repeats 3]`` (about 4
minutes on the 2-core development machine; 1 thread per stage process, as the profile).
It prints a Markdown table for the README.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from script_args import above, script_parser

#: The model: small enough for a 2-core CPU, large enough that compute dominates.
MODEL = "gpt"
MODEL_OPTIONS = ["--layers", "4", "--hidden", "128", "--heads", "4", "--seq-len", "64"]
MODEL_OPTIONS += ["--vocab", "2000"]
#: With ``--device cuda``: a model whose ops take milliseconds on an H200 (the CPU's model
#: runs in tens of microseconds per op there, launch overheads rather than compute).
GPU_MODEL_OPTIONS = ["--layers", "8", "--hidden", "1024", "--heads", "16", "--seq-len", "256"]
GPU_MODEL_OPTIONS += ["--vocab", "8000"]
SHAPE = ["--stages", "2", "--batch-size", "16", "--threads", "1"]
COUNTS = (2, 4, 8)
#: A plan whose every stage recomputes: GPipe(4) with each backward row moved one sample
#: earlier (its time and memory predicted as ``tidgap run`` runs it).
RECOMPUTING = "GPipe(4), recomputing"
#: A plan searched within half the best 1F1B's memory (:func:`half_one_f_one_b`); the search
#: counts recomputing stages as the run holds them, so it may recompute to fit.
LIMITED = "searched, half 1F1B's memory"
#: The searched plans and their ``tidgap search`` options (on the calibrated problem).
SEARCHES = {
    "searched flush, mirrored": ["--schedule", "flush", "--mirrored"],
    "searched, mirrored": ["--mirrored"],
    "searched, no recompute": ["--no-recompute"],
    "searched": [],
    "searched, model-priced": ["--pricing", "model"],
}


def tidgap(*args: str) -> str:
    """Run ``tidgap ARGS`` and return its standard output (raise on failure); say on stderr
    which command ran and how long it took (a cut-off run shows where its time went)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tidgap", *args], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"tidgap {' '.join(args)} failed: {done.stderr.strip()}")
    print(f"({time.perf_counter() - started:.1f} s) tidgap {' '.join(args[:2])}", file=sys.stderr)
    return done.stdout


def baseline_plan(problem: Path, name: str, m: int, out: Path, recomputing: bool = False) -> Path:
    """Write the ``name`` (gpipe or 1f1b) plan with ``m`` microbatches; ``recomputing``: its
    twin whose every stage recomputes (each backward row moved one unit earlier,
    :func:`~tidgap.runtime.calibrate.recomputing_twin`)."""
    from tidgap import load_problem
    from tidgap.runtime.calibrate import recomputing_twin
    from tidgap.schedules.families import SCHEDULES

    loaded = load_problem(str(problem))
    plan = SCHEDULES[name].baseline(loaded, m)
    if recomputing:
        plan = recomputing_twin(plan, loaded.unit) or plan
    out.write_text(json.dumps({**plan.document(), "problem": problem.stem}))
    return out


def half_one_f_one_b(problem: Path) -> int:
    """Half of what the best 1F1B holds on its fullest stage (bytes, the model's figure):
    a limit that only plans holding less than 1F1B meet, recomputing or not."""
    from tidgap import load_problem
    from tidgap.schedules.baselines import best_baselines
    from tidgap.schedules.families import baseline_evaluation

    loaded = load_problem(str(problem))
    best = best_baselines(loaded)["1f1b"]
    evaluation = baseline_evaluation(loaded, best.schedule, best.microbatches)
    assert evaluation is not None and evaluation.peak_memory is not None
    return int(max(evaluation.peak_memory) / 2)


def run_round(
    problem: Path, plans: dict[str, Path], iterations: int, model: list[str]
) -> dict[str, dict]:
    """Per label, ``tidgap run --json``'s object for each of ``plans`` on ``problem``, all
    run in turn in one ``tidgap run`` (the first plan, the others ``--compare``d); ``model``:
    the model and device options."""
    first, *others = plans.values()
    compared = [word for plan in others for word in ("--compare", str(plan))]
    report = json.loads(tidgap(
        "run", str(problem), str(first), *compared, "--model", MODEL, *model,
        "--iterations", str(iterations), "--warmup", "2", "--replay", "--json",
    ))  # fmt: skip
    ran = [report["run"], *report["baselines"]]
    return dict(zip(plans, ran, strict=True))


def round_speeds(predicted: dict[str, float], rounds: dict[str, list[float]]) -> list[float]:
    """Each round's speed factor: the median over plans of measured / predicted."""
    count = len(next(iter(rounds.values())))
    return [statistics.median(rounds[p][r] / predicted[p] for p in predicted) for r in range(count)]


def drift_corrected(rounds: dict[str, list[float]], speeds: list[float]) -> dict[str, float]:
    """Each plan's median over rounds of its measured time over its round's speed factor
    (:func:`round_speeds`), in the predictions' scale."""
    return {
        p: statistics.median(m / f for m, f in zip(times, speeds, strict=True))
        for p, times in rounds.items()
    }


def pairs_in_order(predicted: dict[str, float], measured: dict[str, float], apart: float) -> str:
    """How many pairs of plans predicted more than ``apart`` (a fraction) apart ran in the
    predicted order, as ``"k of n"``."""
    labels = sorted(predicted)
    pairs = [
        (a, b)
        for i, a in enumerate(labels)
        for b in labels[i + 1 :]
        if abs(predicted[a] / predicted[b] - 1) > apart
    ]
    same = sum((predicted[a] < predicted[b]) == (measured[a] < measured[b]) for a, b in pairs)
    return f"{same} of {len(pairs)}"


def same_plans(plans: dict[str, Path], problem: Path) -> dict[str, str]:
    """Per label, the first label of ``plans`` whose plan runs the same schedule on
    ``problem`` (the same partitions and stage order): searches with different options
    often return one plan, whose measured times then differ by the machine's noise
    alone."""
    from tidgap import load_problem
    from tidgap.model.plan import load_plan

    loaded = load_problem(str(problem))
    first: dict[tuple, str] = {}
    return {
        label: first.setdefault(load_plan(path, loaded).schedule(), label)
        for label, path in plans.items()
    }


def calibrate(profiled: Path, out: Path, rounds: int, model: list[str]) -> Path:
    """``tidgap calibrate`` ``profiled`` at every size, ``rounds`` rounds, into ``out``;
    ``model``: the model and device options."""
    tidgap(
        "calibrate", str(profiled), "--model", MODEL, *model,
        "--rounds", str(rounds), "--every-size", "--out", str(out),
    )  # fmt: skip
    return out


def percent(measured: float, predicted: float) -> float:
    """``measured`` against ``predicted``: ``measured / predicted - 1`` in per cent."""
    return 100 * (measured / predicted - 1)


def errors(measured: list[float], predicted: list[float]) -> float:
    """The median over rounds of :func:`percent` of each round's measured and predicted."""
    return statistics.median(percent(m, p) for m, p in zip(measured, predicted, strict=True))


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--out-dir", type=Path, default=Path("fidelity"))
    parser.add_argument("--iterations", type=above(int), default=7)
    parser.add_argument("--repeats", type=above(int), default=3, help="runs of each plan")
    parser.add_argument("--rounds", type=above(int), default=3, help="tidgap calibrate --rounds")
    parser.add_argument("--search-seconds", type=above(float), default=10.0)
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu",
        help="where the stages compute; cuda: both stage processes share GPU 0, and the "
        "model is GPU_MODEL_OPTIONS",
    )  # fmt: skip
    options = parser.parse_args()
    folder = options.out_dir
    folder.mkdir(parents=True, exist_ok=True)
    sized = GPU_MODEL_OPTIONS if options.device == "cuda" else MODEL_OPTIONS
    model = [*sized, "--device", options.device]
    profiled = folder / "gpt2.json"
    tidgap("profile", MODEL, *model, *SHAPE, "--out", str(profiled), "-q")
    fitted = calibrate(profiled, folder / "gpt2-calibrated.json", options.rounds, model)
    plans = {}
    for name in ("gpipe", "1f1b"):
        for m in COUNTS:
            label = f"{'GPipe' if name == 'gpipe' else '1F1B'}({m})"
            plans[label] = baseline_plan(profiled, name, m, folder / f"{name}-{m}.json")
    plans[RECOMPUTING] = baseline_plan(
        profiled, "gpipe", 4, folder / "gpipe-4-recomputing.json", recomputing=True
    )
    limit = ["--time-limit", str(options.search_seconds), "--seed", "0", "-q"]
    for label, extra in SEARCHES.items():
        out = folder / f"{label.replace(', ', '-').replace(' ', '-')}.json"
        tidgap("search", str(fitted), *extra, *limit, "--out", str(out))
        plans[label] = out
    tight = half_one_f_one_b(fitted)
    plans[LIMITED] = folder / "searched-half-1f1b-memory.json"
    limited = ["--memory-limit", str(tight), "--out", str(plans[LIMITED])]
    tidgap("search", str(fitted), *limited, *limit)
    from tidgap import load_problem
    from tidgap.model.plan import load_plan
    from tidgap.runtime.pricing import run_evaluation

    def predictions(problem: Path) -> dict[str, float]:
        loaded = load_problem(str(problem))
        return {
            label: run_evaluation(loaded, load_plan(plan, loaded)).iteration_time
            for label, plan in plans.items()
        }

    runs: dict[str, list[dict]] = {label: [] for label in plans}
    for r in range(options.repeats):  # in rounds: each plan sees the machine's drift
        now = calibrate(profiled, folder / f"round{r + 1}-calibrated.json", 1, model)
        for label, ran in run_round(now, plans, options.iterations, model).items():
            runs[label].append(ran)
    rounds = {label: [r["measured"]["median"] for r in runs[label]] for label in plans}
    fresh = {label: [r["predicted"] for r in runs[label]] for label in plans}
    predicted, from_profile = predictions(fitted), predictions(profiled)
    measured = {label: statistics.median(rounds[label]) for label in plans}
    speeds = round_speeds(predicted, rounds)
    steady = drift_corrected(rounds, speeds)
    own = {label: errors(rounds[label], fresh[label]) for label in plans}
    same = same_plans(plans, fitted)
    replayed = {
        label: statistics.median(r["replay"]["per_iteration"]["median_error_percent"] for r in ran)
        for label, ran in runs.items()
    }
    fed_medians, fed_draws = (
        {label: statistics.median(pick(r["replay"]) for r in ran) for label, ran in runs.items()}
        for pick in (
            lambda replay: replay["error_percent"],
            lambda replay: replay["drawn"]["error_percent"],
        )
    )
    record = {
        label: dict(
            profile=from_profile[label],
            predicted=predicted[label],
            rounds=rounds[label],
            predicted_each_round=fresh[label],
            replay_error_percent=replayed[label],
            medians_replay_error_percent=fed_medians[label],
            drawn_replay_error_percent=fed_draws[label],
            memory=runs[label][0]["memory"],
            same_plan_as=same[label],
        )
        for label in plans
    }
    (folder / "fidelity.json").write_text(json.dumps(record, indent=1))
    print("| plan | recomputes | predicted: profile / calibrated (ms) | measured (ms) | error: "
          "profile / calibrated | error against the round's calibration | error after each "
          "round's drift | error against the run's median op times / drawn op times | "
          "error against its own iterations' replay |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for label in plans:
        stages = [s for s, flag in enumerate(runs[label][0]["recompute"]) if flag]
        low, high = min(rounds[label]), max(rounds[label])
        print(
            f"| {label} | {stages or '-'} | {from_profile[label]:.1f} / {predicted[label]:.1f} | "
            f"{measured[label]:.1f} ({low:.1f}-{high:.1f}) | "
            f"{percent(measured[label], from_profile[label]):+.1f}% / "
            f"{percent(measured[label], predicted[label]):+.1f}% | "
            f"{own[label]:+.1f}% | "
            f"{percent(steady[label], predicted[label]):+.1f}% | "
            f"{fed_medians[label]:+.1f}% / {fed_draws[label]:+.1f}% | "
            f"{replayed[label]:+.1f}% |"
        )
    by_prediction = sorted(plans, key=predicted.__getitem__)
    by_measure = sorted(plans, key=measured.__getitem__)
    fastest = by_prediction[0], by_measure[0]
    one = " (the same plan)" if same[fastest[0]] == same[fastest[1]] else ""
    print(f"\nfastest predicted (calibrated): {fastest[0]}; fastest measured: {fastest[1]}{one}")
    for label in dict.fromkeys(same.values()):
        group = [other for other in plans if same[other] == label]
        if len(group) > 1:
            print(f"the same plan: {' = '.join(group)}")
    print(f"ranking predicted: {' < '.join(by_prediction)}")
    print(f"ranking measured:  {' < '.join(by_measure)}")
    print(
        f"pairs of plans in the predicted order: {pairs_in_order(predicted, measured, 0.0)}; "
        f"of those predicted more than 5% apart: {pairs_in_order(predicted, measured, 0.05)}"
    )
    shown = ", ".join(f"{f:.3f}" for f in speeds)
    steadiest = min(plans, key=steady.__getitem__)
    one = " (the same plan as the predicted fastest)" if same[steadiest] == same[fastest[0]] else ""
    print(
        f"after each round's drift (round speeds {shown}): fastest {steadiest}{one}; pairs "
        f"more than 5% apart in the predicted order: {pairs_in_order(predicted, steady, 0.05)}"
    )
    within = sum(abs(own[label]) <= 10 for label in plans)
    print(f"within 10% of the round's own calibration: {within} of {len(plans)}")
    print(f"order effect: {order_effect(predicted, rounds)}")
    print(f"held for backward, measured against predicted: {memory_errors(runs)}")
    held = runs[LIMITED][0]["memory"]["measured"]
    print(
        f"{LIMITED} (limit {tight / 1e6:.2f} MB a stage, as the run holds it): measured "
        f"{', '.join(f'{b / 1e6:.2f}' for b in held)} MB, "
        f"{'within' if max(held) <= tight else 'OVER'} the limit"
    )


def memory_errors(runs: dict[str, list[dict]]) -> str:
    """Per plan, the largest error (by size) of any stage's measured held bytes against its
    prediction, in the first round (the bytes do not vary between rounds); where the
    prediction is not the model's (recomputing stages), the model's figure's beside it."""

    def worst(measured: list[float], predicted: list[float]) -> str:
        errors = [percent(m, p) for m, p in zip(measured, predicted, strict=True)]
        return f"{max(errors, key=abs):+.1f}%"

    parts = []
    for label, ran in runs.items():
        memory = ran[0]["memory"]
        if memory["predicted"] is None:
            continue
        text = f"{label} {worst(memory['measured'], memory['predicted'])}"
        if memory["model"] != memory["predicted"]:
            text += f" (the model's {worst(memory['measured'], memory['model'])})"
        parts.append(text)
    return ", ".join(parts) or "no activation_bytes"


def order_effect(predicted: dict[str, float], rounds: dict[str, list[float]]) -> str:
    """1F1B(m) against GPipe(m) for each ``m`` of :data:`COUNTS`: the same partitions and ops
    in another order, so the model predicts them alike on 2 stages; the median over rounds
    of the measured ratio beside the predicted one, as ``"m: measured (predicted)"``."""
    shown = []
    for m in COUNTS:
        one, gpipe = f"1F1B({m})", f"GPipe({m})"
        ratios = [a / b for a, b in zip(rounds[one], rounds[gpipe], strict=True)]
        measured, model = statistics.median(ratios), predicted[one] / predicted[gpipe]
        shown.append(f"{m}: {measured:.3f} ({model:.3f})")
    return "1F1B(m) / GPipe(m), measured (predicted), median over rounds: " + ", ".join(shown)


if __name__ == "__main__":
    main()
