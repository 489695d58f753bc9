"""tidgap search --checkpoint / --resume, and a search stopped by a signal resumes."""

from __future__ import annotations

import json
from pathlib import Path

import tidgap
from tests.support.cli_helpers import run_cli
from tests.support.state_files import signal_once_saved
from tidgap.model.plan import check_plan, load_plan
from tidgap.optimize.checkpoint import ANNEAL_PHASE, load_state

COMMON = ["--schedule", "flush", "--population", "32", "--seed", "2", "-q"]


def run(*args: str):
    """``tidgap search ARGS``."""
    return run_cli("search", *args)


def plan_of(result) -> dict:
    document = json.loads(result.stdout)
    return {"forward": document["forward"], "backward": document["backward"]}


def test_checkpoint_then_resume_equals_one_search(tmp_path):
    state = str(tmp_path / "s.state")
    full = run("example:vgg16", *COMMON, "--generations", "120", "--json")
    first = run("example:vgg16", *COMMON, "--generations", "70", "--checkpoint", state)
    rest = run("example:vgg16", *COMMON, "--generations", "50", "--resume", state, "--json")
    assert (full.exit_code, first.exit_code, rest.exit_code) == (0, 0, 0)
    assert plan_of(rest) == plan_of(full)
    assert load_state(state).meta["counters"]["generation"] == 70
    assert rest.stderr == ""  # -q: no note of what was resumed


def test_resume_refuses_another_seed_and_a_broken_file(tmp_path):
    state = tmp_path / "s.state"
    assert (
        run("example:tiny-2", *COMMON, "--generations", "5", "--checkpoint", str(state)).exit_code
        == 0
    )
    other = run(
        "example:tiny-2", *COMMON[:4], "--seed", "9", "--generations", "5", "--resume", str(state)
    )
    assert other.exit_code == 2
    assert other.stderr.strip().splitlines() == [
        f"tidgap: error: {state}: seed: was saved with seed 2, not 9"
    ]
    wider = run("example:tiny-2", *COMMON, "--max-microbatches", "4", "--resume", str(state))
    assert wider.stderr.strip().splitlines() == [  # not Python's None
        f"tidgap: error: {state}: max_microbatches: was saved with max_microbatches unset, not 4"
    ]
    state.write_text("{}")
    broken = run("example:tiny-2", *COMMON, "--resume", str(state))
    assert broken.exit_code == 2
    assert len(broken.stderr.strip().splitlines()) == 1
    assert "is not a tidgap state file" in broken.stderr


def test_the_resumed_state_is_never_an_output_but_the_checkpoint(tmp_path):
    state = tmp_path / "s.state"
    first = run("example:tiny-2", *COMMON, "--generations", "5", "--checkpoint", str(state))
    assert first.exit_code == 0
    saved = state.read_bytes()
    for option in ("--out", "--trace", "--gantt"):
        name = str(state) if option != "--gantt" else str(state.with_suffix(".png"))
        if option == "--gantt":  # the same file under a picture's name
            Path(name).hardlink_to(state)
        clash = run(
            "example:tiny-2", *COMMON, "--generations", "5", "--resume", str(state), option, name
        )
        assert clash.exit_code == 2, clash.stderr
        assert clash.stderr.strip().splitlines() == [
            f"tidgap: error: {option}: is the same file as --resume {state}; refusing to "
            "overwrite an input"
        ]
        assert state.read_bytes() == saved
    again = run(
        "example:tiny-2",
        *COMMON,
        "--generations",
        "5",
        "--resume",
        str(state),
        "--checkpoint",
        str(state),
    )
    assert again.exit_code == 0, again.stderr
    assert load_state(state).meta["counters"]["generation"] == 10


def test_a_state_names_the_backend_that_ran_not_auto(tmp_path):
    """Saved under ``auto``, a state resumes under the backend ``auto`` chose named
    explicitly (it was refused: 'saved with backend auto, not numba'), and is refused
    under another; a state of an older tidgap that saved ``auto`` still resumes."""
    from dataclasses import replace

    from tidgap.backends import default_backend
    from tidgap.model.problem import load_problem
    from tidgap.optimize.optimizer import Optimizer

    state = tmp_path / "s.state"
    assert (
        run("example:tiny-2", *COMMON, "--generations", "3", "--checkpoint", str(state)).exit_code
        == 0
    )
    saved = load_state(state)
    assert saved.meta["backend"] == default_backend()
    named = run(
        "example:tiny-2",
        *COMMON,
        "--generations",
        "2",
        "--resume",
        str(state),
        "--backend",
        default_backend(),
    )
    assert named.exit_code == 0, named.stderr
    other = "numpy" if default_backend() != "numpy" else "numba"
    refused = run(
        "example:tiny-2", *COMMON, "--generations", "2", "--resume", str(state), "--backend", other
    )
    assert refused.exit_code == 2
    assert f"was saved with backend {default_backend()!r}, not {other!r}" in refused.stderr
    older = replace(saved, meta=saved.meta | {"backend": "auto"})
    problem = load_problem("example:tiny-2")
    Optimizer(problem, schedule="flush", population=32, seed=2, resume=older)  # no refusal


def test_checkpoint_every_must_be_positive(tmp_path):
    result = run("example:tiny-2", "--checkpoint", str(tmp_path / "s"), "--checkpoint-every", "0")
    assert result.exit_code == 2


def test_a_search_stopped_by_a_signal_saves_a_state_that_resumes(tmp_path):
    problem = tidgap.load_problem("example:vgg16")
    state = tmp_path / "s.state"
    calls = iter(range(10**6))
    options = dict(schedule="windowed", population=32, seed=4, backend="numpy")
    stopped = tidgap.search(
        problem,
        generations=500,
        checkpoint=state,
        interrupted=lambda: "SIGINT" if next(calls) >= 200 else None,
        **options,
    )
    assert stopped.stop_reason == "SIGINT"
    saved = load_state(state)
    assert 0 < saved.meta["counters"]["generation"] < 500
    resumed = tidgap.search(problem, generations=20, resume=state, **options)
    check_plan(resumed.plan, problem)
    assert resumed.evaluation.iteration_time <= stopped.evaluation.iteration_time
    out = tmp_path / "plan.json"
    again = run("example:vgg16", "--schedule", "windowed", "--population", "32", "--seed", "4",
                "--backend", "numpy", "--generations", "5", "--resume", str(state), "--out",
                str(out), "-q")  # fmt: skip
    assert again.exit_code == 0
    check_plan(load_plan(out, problem), problem)


def test_a_state_saved_in_the_annealing_resumes_from_the_command_line(tmp_path):
    """Stopped in its annealing, the search goes on annealing under ``--generations 0``
    and prints the plan of the unbroken search."""
    problem = tidgap.load_problem("example:hetero-8")
    state = tmp_path / "s.state"
    options = dict(population=16, seed=3, backend="numba", generations=30)
    full = tidgap.search(problem, **options)

    def reached(meta: dict) -> bool:
        return meta["phase"] == ANNEAL_PHASE and meta["anneal"]["step"] >= 10

    tidgap.search(
        problem,
        checkpoint=state,
        checkpoint_every=1e-9,
        interrupted=signal_once_saved(state, reached),
        **options,
    )
    assert load_state(state).meta["phase"] == ANNEAL_PHASE
    args = ["--population", "16", "--seed", "3", "--backend", "numba", "--generations", "0"]
    rest = run("example:hetero-8", *args, "--resume", str(state), "--json")
    assert rest.exit_code == 0, rest.stderr
    generation = load_state(state).meta["counters"]["generation"]
    where = f"step 10 of its annealing, after {generation} generations"
    assert rest.stderr == f"resumed {state} from {where}\n"
    document = json.loads(rest.stdout)
    assert (document["forward"], document["backward"], document["order"]) == (
        full.plan.forward,
        full.plan.backward,
        full.plan.order,
    )


def test_a_stop_in_the_flush_first_search_says_no_state_was_saved(tmp_path, monkeypatch):
    """A signal from the start (stubbed: the search sees SIGINT at its first poll) stops the
    windowed search in its flush first search, which no state holds: nothing is saved, and
    a warning says so (a state from before stays as it was)."""
    from contextlib import contextmanager

    from tidgap.optimize.interrupts import StopSignals

    @contextmanager
    def already_signalled(on_first=None):
        signals = StopSignals()
        signals.signum = 2  # SIGINT
        yield signals

    monkeypatch.setattr("tidgap.cli.search.stop_on_signals", already_signalled)
    state = tmp_path / "s.state"
    state.write_bytes(b"an older state")
    result = run("example:tiny-2", "--generations", "400", "--population", "16",
                 "--checkpoint", str(state))  # fmt: skip
    assert result.exit_code == 130
    assert (
        f"tidgap: warning: --checkpoint: stopped in the search's first (flush) search, which "
        f"no state holds: nothing saved to {state}" in result.stderr
    )
    assert state.read_bytes() == b"an older state"


def test_an_empty_resume_argument_is_named():
    """``--resume ''`` said ``"": no file name``, not naming the option."""
    result = run("example:tiny-2", "--resume", "")
    assert result.exit_code == 2
    assert result.stderr == "tidgap: error: --resume: no file name (an empty argument)\n"
