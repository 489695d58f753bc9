"""How well the cost model predicts real runs (issue 12): profile a small GPT on 2 stages,
calibrate it through the runtime (``tidgap calibrate``), search plans on the calibrated
problem, run GPipe(m), 1F1B(m) and the searched plans with ``tidgap run`` (each
``--repeats`` times), and print measured against both predictions, with the ranking of the
plans by prediction and by measurement.

Run on a quiet machine: ``python bench/fidelity.py [--out-dir DIR] [--repeats 3]`` (about 5
minutes on the 2-core development machine; 1 thread per stage process, as the profile).
It prints a Markdown table for the README.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

#: The model: small enough for a 2-core CPU, large enough that compute dominates.
MODEL = "gpt"
MODEL_OPTIONS = ["--layers", "4", "--hidden", "128", "--heads", "4", "--seq-len", "64"]
MODEL_OPTIONS += ["--vocab", "2000"]
SHAPE = ["--stages", "2", "--batch-size", "16", "--threads", "1"]
COUNTS = (2, 4, 8)


def tidgap(*args: str) -> str:
    """Run ``tidgap ARGS`` and return its standard output (raise on failure)."""
    done = subprocess.run(
        [sys.executable, "-m", "tidgap", *args], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"tidgap {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def baseline_plan(problem: Path, name: str, m: int, out: Path) -> Path:
    """Write the ``name`` (gpipe or 1f1b) plan with ``m`` microbatches."""
    from tidgap import load_problem
    from tidgap.schedules.families import SCHEDULES

    plan = SCHEDULES[name].baseline(load_problem(str(problem)), m)
    fields = plan.model_dump(exclude_none=True)
    out.write_text(json.dumps({"format": "tidgap.plan/1", "problem": problem.stem, **fields}))
    return out


def run_plan(problem: Path, plan: Path, iterations: int) -> dict:
    """``tidgap run --json``'s ``run`` object for ``plan`` on ``problem``."""
    report = tidgap(
        "run", str(problem), str(plan), "--model", MODEL, *MODEL_OPTIONS,
        "--iterations", str(iterations), "--warmup", "2", "--json",
    )  # fmt: skip
    return json.loads(report)["run"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("fidelity"))
    parser.add_argument("--iterations", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each plan")
    parser.add_argument("--search-seconds", type=float, default=10.0)
    options = parser.parse_args()
    folder = options.out_dir
    folder.mkdir(parents=True, exist_ok=True)
    profiled, fitted = folder / "gpt2.json", folder / "gpt2-calibrated.json"
    tidgap("profile", MODEL, *MODEL_OPTIONS, *SHAPE, "--out", str(profiled), "-q")
    tidgap("calibrate", str(profiled), "--model", MODEL, *MODEL_OPTIONS, "--out", str(fitted))
    plans = {}
    for name in ("gpipe", "1f1b"):
        for m in COUNTS:
            label = f"{'GPipe' if name == 'gpipe' else '1F1B'}({m})"
            plans[label] = baseline_plan(profiled, name, m, folder / f"{name}-{m}.json")
    limit = ["--time-limit", str(options.search_seconds), "--seed", "0", "-q"]
    for label, extra in {"searched, no recompute": ["--no-recompute"], "searched": []}.items():
        out = folder / f"{label.replace(', ', '-').replace(' ', '-')}.json"
        tidgap("search", str(fitted), *extra, *limit, "--out", str(out))
        plans[label] = out
    from tidgap import evaluate, load_problem
    from tidgap.model.plan import load_plan

    raw = load_problem(str(profiled))
    rows = []
    for label, plan in plans.items():
        runs = [run_plan(fitted, plan, options.iterations) for _ in range(options.repeats)]
        medians = sorted(run["measured"]["median"] for run in runs)
        profile_time = evaluate(raw, load_plan(plan, raw)).iteration_time
        rows.append((label, runs[0], profile_time, medians))
    print("| plan | recomputes | predicted: profile / calibrated (ms) | measured (ms) | error: "
          "profile / calibrated |")  # fmt: skip
    print("|---|---|---:|---:|---:|")
    for label, run, profile_time, medians in rows:
        middle = statistics.median(medians)
        stages = [s for s, flag in enumerate(run["recompute"]) if flag]
        print(
            f"| {label} | {stages or '-'} | {profile_time:.1f} / {run['predicted']:.1f} | "
            f"{middle:.1f} ({medians[0]:.1f}-{medians[-1]:.1f}) | "
            f"{100 * (middle / profile_time - 1):+.1f}% / "
            f"{100 * (middle / run['predicted'] - 1):+.1f}% |"
        )
    by_prediction = [r[0] for r in sorted(rows, key=lambda r: r[1]["predicted"])]
    by_measure = [r[0] for r in sorted(rows, key=lambda r: statistics.median(r[3]))]
    print(
        f"\nfastest predicted (calibrated): {by_prediction[0]}; fastest measured: {by_measure[0]}"
    )
    print(f"ranking predicted: {' < '.join(by_prediction)}")
    print(f"ranking measured:  {' < '.join(by_measure)}")


if __name__ == "__main__":
    main()
