"""A windowed search whose seed polish puts plans into its islands (8 stages) resumes as
one unbroken search: more generations from the GA's state it saved, its annealing from a
state saved there, and a signal in the seed polish leaves the GA's state."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.state_files import same_search, stopped_in_annealing
from tidgap import load_problem, search
from tidgap.optimize import windowed_driver, windowed_finish
from tidgap.optimize.checkpoint import load_state

OPTIONS = dict(population=64, seed=0, backend="numba")
GENERATIONS = 60


@pytest.fixture(autouse=True)
def short_first_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first, flush search takes ``min(G / 4, FLUSH_GENERATIONS)`` generations: 5 in
    every search here, so that a search of ``G`` and one of ``G1`` resumed for ``G - G1``
    run the same first search."""
    monkeypatch.setattr(windowed_driver, "FLUSH_GENERATIONS", 5)


def _problem():
    return load_problem("example:hetero-8")


def test_the_seed_polish_puts_plans_into_the_islands_here(monkeypatch) -> None:
    """What the tests below need to mean anything: the GA's islands change after it."""
    adopted: list[int] = []
    adopt = windowed_finish.adopt

    def counted(run, found) -> None:
        adopted.append(sum(best is not None for best in found))
        adopt(run, found)

    monkeypatch.setattr(windowed_finish, "adopt", counted)
    search(_problem(), generations=GENERATIONS, **OPTIONS)
    assert adopted and adopted[0] > 0  # the seed polish's call comes first


def test_more_generations_resume_as_one_search(tmp_path: Path) -> None:
    full = search(_problem(), generations=GENERATIONS + 40, **OPTIONS)
    path = tmp_path / "s.state"
    search(_problem(), generations=GENERATIONS, checkpoint=path, **OPTIONS)
    assert load_state(path).meta["phase"] is None
    rest = search(_problem(), generations=40, resume=path, **OPTIONS)
    assert same_search(rest, full)  # was 240.59 against 241.48 ms: the GA went on with the seeds


def test_an_annealing_resumes_as_one_search(tmp_path: Path) -> None:
    full = search(_problem(), generations=GENERATIONS, **OPTIONS)
    path = tmp_path / "s.state"
    stopped = stopped_in_annealing(_problem(), path, 25, generations=GENERATIONS, **OPTIONS)
    assert stopped.stop_reason == "SIGINT" and "polish" not in stopped.setup
    rest = search(_problem(), generations=0, resume=path, **OPTIONS)
    assert same_search(rest, full)


def test_a_signal_in_the_seed_polish_leaves_the_gas_state(tmp_path: Path) -> None:
    full = search(_problem(), generations=GENERATIONS, **OPTIONS)
    path = tmp_path / "s.state"
    begun: list[str] = []
    stopped = search(
        _problem(),
        generations=GENERATIONS,
        checkpoint=path,
        on_phase=begun.append,
        interrupted=lambda: "SIGINT" if "seed polish" in begun else None,
        **OPTIONS,
    )
    assert stopped.stop_reason == "SIGINT" and "anneal" not in stopped.setup
    assert load_state(path).meta["phase"] is None  # the GA's: no annealing began
    rest = search(_problem(), generations=0, resume=path, **OPTIONS)
    assert same_search(rest, full)
