"""A windowed search checkpoints its annealing: stopped there, it resumes there and gives
the plan of one unbroken search; ended without a signal, its file holds the GA's state."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from tests.support.backends import install_fake_cupy
from tests.support.state_files import (
    rewrite_array,
    rewrite_arrays,
    rewrite_meta,
    same_search,
    signal_in_annealing,
    stopped_in_annealing,
)
from tidgap import Optimizer, load_problem, search
from tidgap.model.errors import InputError
from tidgap.optimize import windowed_finish
from tidgap.optimize.checkpoint import ANNEAL_PHASE, load_state

OPTIONS = dict(population=16, seed=2, backend="numba", memory_limit="1f1b")
GENERATIONS = 40


def _problem():
    return load_problem("example:gpt1-14")


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory):
    """One search of :data:`GENERATIONS` and its state file."""
    path = tmp_path_factory.mktemp("unbroken") / "s.state"
    return search(_problem(), generations=GENERATIONS, checkpoint=path, **OPTIONS), path


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """The same search stopped by a signal at the annealing's 25th step, and its state."""
    path = tmp_path_factory.mktemp("stopped") / "s.state"
    return stopped_in_annealing(_problem(), path, 25, generations=GENERATIONS, **OPTIONS), path


def test_a_search_stopped_in_its_annealing_resumes_there(unbroken, stopped) -> None:
    full, _ = unbroken
    result, path = stopped
    assert result.stop_reason == "SIGINT" and "polish" not in result.setup
    saved = load_state(path)
    assert saved.meta["phase"] == ANNEAL_PHASE
    assert saved.meta["anneal"]["step"] == 25 and 0 < saved.meta["anneal"]["done"] < 1
    assert saved.meta["anneal"]["reason"] == "generations"
    # Its GA is over: no more generations; the annealing goes on to 4 steps a generation.
    rest = search(_problem(), generations=0, resume=path, **OPTIONS)
    assert same_search(rest, full)
    assert rest.stop_reason == full.stop_reason == "generations"


def test_more_generations_from_an_annealing_state_go_on_from_its_ga(unbroken, stopped) -> None:
    """Asked for more generations, a state saved in the annealing is its GA's state: the
    GA goes on and anneals afresh, as from the file of the search that was not stopped."""
    rest = search(_problem(), generations=15, resume=stopped[1], **OPTIONS)
    from_ga = search(_problem(), generations=15, resume=unbroken[1], **OPTIONS)
    assert same_search(rest, from_ga)
    assert rest.generations == unbroken[0].generations + 15


def test_a_search_ended_without_a_signal_leaves_the_gas_state(unbroken, tmp_path) -> None:
    """Saved in its annealing too (every step), the file at the end is the GA's state of a
    search that saved only then, so more generations resumed from it go on as before."""
    full, quiet = unbroken
    path = tmp_path / "s.state"
    again = search(
        _problem(), generations=GENERATIONS, checkpoint=path, checkpoint_every=1e-9, **OPTIONS
    )
    assert same_search(again, full)
    saved, expected = load_state(path), load_state(quiet)
    assert saved.meta == expected.meta and saved.meta["phase"] is None
    assert saved.arrays.keys() == expected.arrays.keys()
    for name, array in saved.arrays.items():
        assert np.array_equal(array, expected.arrays[name]), name


def test_a_search_killed_after_its_annealing_resumes_at_the_polish(
    unbroken, tmp_path, monkeypatch
) -> None:
    """The annealing's end is saved: a search killed in the polish does not anneal again."""
    full, _ = unbroken
    path, copy = tmp_path / "s.state", tmp_path / "at_polish.state"
    polished = windowed_finish.polished

    def copying(*args, **kwargs):
        if not kwargs.get("groups") and not copy.exists():  # the final polish, not the seeds'
            shutil.copy(path, copy)
        return polished(*args, **kwargs)

    monkeypatch.setattr(windowed_finish, "polished", copying)
    search(_problem(), generations=GENERATIONS, checkpoint=path, **OPTIONS)
    monkeypatch.undo()
    saved = load_state(copy)
    generation = saved.meta["counters"]["generation"]
    assert saved.meta["phase"] == ANNEAL_PHASE and saved.meta["anneal"]["done"] == 1
    assert saved.meta["anneal"]["step"] == windowed_finish.ANNEAL_STEPS_PER_GENERATION * generation
    rest = search(_problem(), generations=0, resume=copy, **OPTIONS)
    assert same_search(rest, full)


def _record(**changes):
    return lambda path: rewrite_meta(path, lambda meta: meta["anneal"].update(changes))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_record(step=-1), "anneal.step: is -1, not a count"),
        (_record(step=True), "anneal.step: is True, not a count"),
        (_record(step=10**12), "anneal.step: is 1000000000000, not a count up to 4000000000"),
        (_record(done=1.5), "anneal.done: is 1.5, not a number 0..1"),
        (_record(draws=2**64), "anneal.draws: is 18446744073709551616, not a count"),
        (_record(reason="SIGINT"), "anneal.reason: is 'SIGINT', not one of generations"),
        (lambda p: rewrite_meta(p, lambda m: m.update(anneal=[])), "anneal: is not an annealing"),
        (
            lambda p: rewrite_array(p, "anneal_forward", lambda a: a * 2),
            "does not fit this search (the annealing's chains' forward population holds rows",
        ),
        (
            lambda p: rewrite_array(p, "anneal_best_lead", lambda a: a[:1]),
            "does not fit this search (the annealing's bests' lead: int32 (1,",
        ),
        (
            lambda p: rewrite_array(p, "anneal_lead", lambda a: a.astype(np.float64)),
            "the annealing's chains' lead: float64",
        ),
    ],
)
def test_a_damaged_annealing_is_one_error(stopped, tmp_path, damage, message) -> None:
    """Each names the file and the field, before any work."""
    path = tmp_path / "s.state"
    shutil.copy(stopped[1], path)
    damage(path)
    with pytest.raises(InputError, match=re.escape(message)) as caught:
        search(_problem(), generations=0, resume=path, **OPTIONS)
    assert str(caught.value).startswith(f"{path}: ")


def test_a_missing_annealing_array_is_named(stopped, tmp_path) -> None:
    path = tmp_path / "s.state"
    shutil.copy(stopped[1], path)
    rewrite_arrays(path, lambda arrays: arrays.pop("anneal_lead"))
    with pytest.raises(InputError, match="it has no 'anneal_lead'"):
        search(_problem(), generations=0, resume=path, **OPTIONS)


def test_a_flush_state_marked_as_annealing_is_refused(tmp_path) -> None:
    """A flush search anneals nothing (a windowed state fails the schedule check first)."""
    path = tmp_path / "s.state"
    options = {**OPTIONS, "memory_limit": None, "schedule": "flush"}
    search(_problem(), generations=3, checkpoint=path, **options)
    rewrite_meta(path, lambda meta: meta.update(phase=ANNEAL_PHASE))
    with pytest.raises(InputError, match="phase: was saved in a windowed search's annealing"):
        search(_problem(), generations=0, resume=path, **options)


def test_an_annealing_resumes_through_the_cupy_stand_in(tmp_path, monkeypatch) -> None:
    """Device arrays are saved from and restored to the device."""
    install_fake_cupy(monkeypatch)
    options = {**OPTIONS, "backend": "cuda", "generations": 12}
    problem = load_problem("example:tiny-2")
    full = search(problem, **options)
    path = tmp_path / "s.state"
    interrupted = signal_in_annealing(path, 5)
    search(problem, checkpoint=path, checkpoint_every=1e-9, interrupted=interrupted, **options)
    assert load_state(path).meta["anneal"]["step"] == 5
    rest = search(problem, resume=path, **{**options, "generations": 0})
    assert same_search(rest, full)


def test_generations_told_after_resuming_an_annealing_anneal_afresh(stopped, monkeypatch) -> None:
    """The saved chains came from the GA's islands as they were; after more generations,
    or once the resumed annealing went on, the annealing starts (at step 0) from the
    islands as they are."""
    first_steps: list[int] = []
    annealing = windowed_finish.anneal

    def recording(*args, state, **kwargs):
        first_steps.append(state.step)
        return annealing(*args, state=state, **kwargs)

    monkeypatch.setattr(windowed_finish, "anneal", recording)
    optimizer = Optimizer(_problem(), resume=stopped[1], **OPTIONS)
    resumed = optimizer.result()
    optimizer.result()  # the resumed annealing went on once; this one starts afresh
    again = Optimizer(_problem(), resume=stopped[1], **OPTIONS)
    population = again.ask()
    again.tell(population, again.evaluate(population))
    result = again.result()
    assert first_steps == [25, 0, 0]
    assert result.generations == resumed.generations + 1


def test_rounds_after_the_annealing_leave_the_gas_state_as_it_was(
    unbroken, tmp_path, monkeypatch
) -> None:
    """A time-limited search's later rounds put bests into the islands in place; the GA's
    state written back at the end is the one the annealing began from."""
    rounds = windowed_finish.used_to_the_end

    def adopting(run, found, stop_reason, saving):
        island = run.optimizer.islands[0]
        best = island.genes.take(slice(0, 1))
        for array in island.genes.arrays():  # a round's adopt, exaggerated: every individual
            array[...] = array[:1]
        island.adopt(best, *run.optimizer.space.evaluate(best))
        return rounds(run, found, stop_reason, saving)

    monkeypatch.setattr(windowed_finish, "used_to_the_end", adopting)
    path = tmp_path / "s.state"
    search(_problem(), generations=GENERATIONS, checkpoint=path, **OPTIONS)
    saved, expected = load_state(path), load_state(unbroken[1])
    for name, array in expected.arrays.items():
        assert np.array_equal(saved.arrays[name], array), name


def test_a_search_stopped_in_a_later_round_resumes_from_that_round(tmp_path, monkeypatch) -> None:
    """A time-limited search anneals again after its polish; a signal in that round leaves
    the round's annealing in the file (its chains began from the polished bests), and the
    resume is no slower than the plan the stopped search returned."""
    path, annealings = tmp_path / "s.state", []
    annealing = windowed_finish.annealed

    def counting(*args, **kwargs):
        annealings.append(None)
        return annealing(*args, **kwargs)

    def in_a_round() -> str | None:
        if len(annealings) < 2 or not path.exists():
            return None
        return "SIGINT" if load_state(path).meta["anneal"]["done"] < 1 else None

    monkeypatch.setattr(windowed_finish, "annealed", counting)
    options = {**OPTIONS, "memory_limit": None}
    stopped = search(
        _problem(),
        time_limit=6,
        checkpoint=path,
        checkpoint_every=1e-9,
        interrupted=in_a_round,
        **options,
    )
    monkeypatch.undo()
    assert stopped.stop_reason == "SIGINT" and len(annealings) == 2
    saved = load_state(path)
    assert saved.meta["phase"] == ANNEAL_PHASE and saved.meta["anneal"]["done"] < 1
    rest = search(_problem(), generations=0, resume=path, **options)
    assert rest.evaluation.iteration_time <= stopped.evaluation.iteration_time
