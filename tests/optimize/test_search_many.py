"""``tidgap.search_many`` (issue 13, item 5): on a process pool, a thread pool and a Dask
LocalCluster, the same plans as one-by-one searches with the same seeds, in input order; a
failed search leaves the others' results."""

from __future__ import annotations

import pickle
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import tidgap
from tests.support.cli_helpers import case_named
from tidgap import InputError, Problem
from tidgap.optimize import many
from tidgap.optimize.interrupts import StopSignals
from tidgap.optimize.many import SearchFailed, search_many

#: A short, generation-bounded search (reproducible whatever the load).
SHORT = {"generations": 10, "population": 32}


def _problem(name: str) -> Problem:
    return Problem.from_dict(case_named(name)["problem"])


#: med7_0's plan depends on the seed with SHORT (so a lost seed would show).
PROBLEMS = [_problem("med7_0"), tidgap.load_problem("example:tiny-2"), _problem("med7_0")]
SEEDS = [0, 0, 1]


def _one_by_one(problems: list[Problem], seeds: list[int], **options) -> list[tidgap.Plan]:
    return [tidgap.search(p, seed=s, **options).plan for p, s in zip(problems, seeds, strict=True)]


@pytest.fixture(scope="module")
def expected() -> list[tidgap.Plan]:
    """PROBLEMS' plans searched one by one, here, with SEEDS."""
    return _one_by_one(PROBLEMS, SEEDS, **SHORT)


def test_the_seed_matters_on_these_problems(expected: list[tidgap.Plan]) -> None:
    assert expected[0] != expected[2]


def test_a_process_pool_gives_the_one_by_one_plans_in_order(expected: list[tidgap.Plan]) -> None:
    results = tidgap.search_many(PROBLEMS, seeds=SEEDS, **SHORT)
    assert [r.plan for r in results] == expected
    assert [r.seed for r in results] == SEEDS
    assert [r.problem.name for r in results] == [p.name for p in PROBLEMS]


def test_one_seed_serves_every_problem_and_options_reach_the_search() -> None:
    with ThreadPoolExecutor(max_workers=1) as executor:
        results = search_many(PROBLEMS[:2], executor=executor, seeds=3, schedule="flush", **SHORT)
    assert [r.seed for r in results] == [3, 3]
    assert {r.schedule for r in results} == {"flush"}
    assert [r.plan for r in results] == _one_by_one(PROBLEMS[:2], [3, 3], schedule="flush", **SHORT)


def test_each_result_is_told_as_its_search_ends(expected: list[tidgap.Plan]) -> None:
    """``on_result(i, result)``, once per search, with the problem's index (a search
    ending while others go on: ``tidgap sweep``'s test that a killed sweep keeps it)."""
    told: dict[int, tidgap.Plan] = {}

    def on_result(i: int, result: tidgap.SearchResult) -> None:
        assert i not in told
        told[i] = result.plan

    results = search_many(PROBLEMS, seeds=SEEDS, on_result=on_result, **SHORT)
    assert [told[i] for i in range(len(PROBLEMS))] == expected
    assert [r.plan for r in results] == expected


def test_what_on_result_raises_stops_the_searches_and_is_raised() -> None:
    told: list[int] = []

    def failing(i: int, result: tidgap.SearchResult) -> None:
        told.append(i)
        raise OSError("disk full")

    with ThreadPoolExecutor(max_workers=1) as executor, pytest.raises(OSError, match="disk full"):
        search_many(PROBLEMS, executor=executor, seeds=SEEDS, on_result=failing, **SHORT)
    assert told == [0]


def test_a_dask_local_cluster_gives_the_one_by_one_plans(expected: list[tidgap.Plan]) -> None:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        results = search_many(PROBLEMS, executor=client.get_executor(), seeds=SEEDS, **SHORT)
    assert [r.plan for r in results] == expected


def test_a_failed_search_leaves_the_others_and_names_the_problem() -> None:
    # tiny7_1_mem's stage 0 cannot hold the batch: a flush search refuses it.
    problems = [PROBLEMS[1], _problem("tiny7_1_mem"), PROBLEMS[0]]
    with ThreadPoolExecutor(max_workers=1) as executor, pytest.raises(SearchFailed) as caught:
        search_many(problems, executor=executor, seeds=[0, 0, 1], schedule="flush", **SHORT)
    error = caught.value
    assert "problem 1 (tiny7_1_mem)" in str(error)
    assert "(1 of 3 searches failed, the others finished)" in str(error)
    assert list(error.errors) == [1] and isinstance(error.errors[1], InputError)
    assert error.__cause__ is error.errors[1]
    assert error.results[1] is None
    expected = _one_by_one([problems[0], problems[2]], [0, 1], schedule="flush", **SHORT)
    assert [error.results[0].plan, error.results[2].plan] == expected
    with ThreadPoolExecutor(max_workers=1) as executor, pytest.raises(SearchFailed) as every:
        search_many(problems[1:2], executor=executor, schedule="flush", **SHORT)
    assert str(every.value).endswith("(1 of 1 searches failed)")
    # a host's process pool sends it back pickled (it broke the host's pool: its args are
    # the message alone, and rebuilding from them raised)
    copied = pickle.loads(pickle.dumps(error))
    assert str(copied) == str(error) and list(copied.errors) == [1]
    assert [copied.results[0].plan, copied.results[2].plan] == expected


#: The environment variable naming a file that :func:`_killing_search` creates once.
KILL_ONCE = "TIDGAP_TEST_KILL_ONCE"
#: The environment variable giving the seconds every other search waits before it starts.
SLOW = "TIDGAP_TEST_SLOW"


def _killing_search(problem: Problem, seed: int, options: dict) -> tidgap.SearchResult:
    """``many._search``, but after a second (so that the launcher sees it running) the
    worker kills itself: always for a problem named ``killer``, and for the first search
    that creates the file ``$TIDGAP_TEST_KILL_ONCE``; the others start after
    ``$TIDGAP_TEST_SLOW`` seconds."""
    import os
    import time

    if many._begun is not None:  # begun, as the search it stands for counts itself
        many._begun.value += 1
    marker = os.environ.get(KILL_ONCE)
    try:
        if marker is not None:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            marker = "killed"
    except FileExistsError:
        marker = None
    if problem.name == "killer" or marker == "killed":
        time.sleep(1)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(float(os.environ.get(SLOW, "0")))  # so that others run when one is killed
    return many._search(problem, seed, options)


def test_searches_lost_to_a_killed_worker_run_again(
    expected: list[tidgap.Plan], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker killed from outside (OOM killer, kill -9) broke the pool: every search not
    finished failed with BrokenProcessPool. Now they run again and give their plans."""
    monkeypatch.setattr(many, "_search", _killing_search)
    monkeypatch.setenv(KILL_ONCE, str(tmp_path / "killed"))
    with many.local_pool(2) as pool:
        results = search_many(PROBLEMS, executor=pool, seeds=SEEDS, **SHORT)
    assert (tmp_path / "killed").exists()
    assert [r.plan for r in results] == expected


def test_a_search_killed_again_alone_fails_and_the_others_finish(
    expected: list[tidgap.Plan], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search whose worker is killed each time (out of memory, say) fails, named; the
    searches beside it in the broken pool run again and give their plans."""
    monkeypatch.setattr(many, "_search", _killing_search)
    live, most = [0], [0]  # the fresh pools' workers alive at once, and the most
    fresh, shutdown = many.LocalPool.fresh, many.LocalPool.shutdown

    def counted_fresh(self: many.LocalPool, workers: int, threads: int | None = None):
        live[0] += workers
        most[0] = max(most[0], live[0])
        made = fresh(self, workers, threads)
        made.counted = workers  # type: ignore[attr-defined]
        return made

    def counted_shutdown(self: many.LocalPool, *args, **kwargs):
        live[0] -= getattr(self, "counted", 0)
        self.counted = 0  # type: ignore[attr-defined]
        return shutdown(self, *args, **kwargs)

    monkeypatch.setenv(SLOW, "2")
    monkeypatch.setattr(many.LocalPool, "fresh", counted_fresh)
    monkeypatch.setattr(many.LocalPool, "shutdown", counted_shutdown)
    killer = PROBLEMS[0].model_copy(update={"name": "killer"})
    problems = [PROBLEMS[0], killer, PROBLEMS[1], PROBLEMS[2]]
    with pytest.raises(
        SearchFailed, match=r"problem 1 \(killer\): its worker process ended abruptly twice"
    ) as caught:
        search_many(problems, executor=many.local_pool(2), seeds=[0, 0, 0, 1], **SHORT)
    assert most[0] == 2  # the retries ran as many processes at once as the pool (5 before)
    assert list(caught.value.errors) == [1]
    assert isinstance(caught.value.errors[1], many.WorkerKilled)
    assert isinstance(caught.value.errors[1].__cause__, many.BrokenProcessPool)
    results = caught.value.results
    assert [results[0].plan, results[2].plan, results[3].plan] == expected


def _dying_start(*args: object) -> None:
    """A worker that fails as it starts (as one of a script without its main guard)."""
    import os

    os._exit(3)


def test_workers_that_fail_to_start_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every search then ended as WorkerKilled ('killed from outside'), after six pools."""
    monkeypatch.setattr(many, "_start_worker", _dying_start)
    made: list[int] = []
    fresh = many.LocalPool.fresh
    monkeypatch.setattr(
        many.LocalPool, "fresh", lambda self, *args: made.append(1) or fresh(self, *args)
    )
    with many.local_pool(2) as pool, pytest.raises(SearchFailed) as caught:
        search_many(PROBLEMS, executor=pool, seeds=SEEDS, **SHORT)
    assert made == []
    errors = caught.value.errors.values()
    assert len(errors) == 3 and all(isinstance(e, many.BrokenProcessPool) for e in errors)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="2 seeds for 3 problems"):
        search_many(PROBLEMS, seeds=[0, 1], **SHORT)
    with pytest.raises(TypeError, match="seeds="):
        search_many(PROBLEMS, seed=1, **SHORT)
    assert search_many([], **SHORT) == []


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"seeds": "x"}, InputError, r"seeds: must be an int or one int per problem \(got 'x'\)"),
        ({"seeds": None}, InputError, r"seeds: must be an int or one int per problem \(got None"),
        ({"seeds": [0, 1.5, 2]}, InputError, r"seeds\[1\]: must be an integer"),
        ({"generations": 1.5}, InputError, r"generations: must be an integer"),
        ({"problems": [None]}, TypeError, r"problems\[0\] must be a tidgap.Problem"),
        ({"on_result": 3}, TypeError, r"on_result must be a function or None"),
        # each a SearchFailed after every task had run and failed
        ({"population": 3}, InputError, r"population: must be at least 8"),
        ({"generation": 3}, TypeError, r"unexpected keyword argument 'generation'"),
        ({"schedule": "bogus"}, ValueError, r"unknown schedule 'bogus'"),
        ({"backend": "x"}, ValueError, r"unknown backend 'x'"),
        ({"memory_limit": "lots"}, InputError, r"memory_limit: not a size"),
        ({"pricing": "z"}, ValueError, r"pricing must be one of"),
        ({"initial_plans": [1]}, TypeError, r"initial_plans\[0\] must be a tidgap.Plan"),
        # each started the pool, then failed in every task
        ({"on_progress": 3}, TypeError, r"on_progress must be a function or None"),
        ({"on_phase": 3}, TypeError, r"on_phase must be a function or None"),
        ({"interrupted": 3}, TypeError, r"interrupted must be a function or None"),
        ({"checkpoint_every": "x"}, InputError, r"checkpoint_every: must be a positive number"),
    ],
)
def test_arguments_of_the_wrong_kind_are_refused_before_any_task(
    arguments: dict, error: type, message: str
) -> None:
    """Refused at once (no pool started, no ``SearchFailed`` after every search ran)."""
    options = {"generations": 1, "population": 8, **arguments}
    problems = options.pop("problems", PROBLEMS)
    with pytest.raises(error, match=message):
        search_many(problems, executor=_Refusing(), **options)


class _Refusing(ThreadPoolExecutor):
    def submit(self, *args, **kwargs):  # type: ignore[override]
        raise AssertionError("a task was submitted")


@pytest.mark.parametrize("option", ["checkpoint", "resume"])
def test_one_state_file_for_every_search_is_refused(tmp_path: Path, option: str) -> None:
    state = tmp_path / "state.npz"
    with ThreadPoolExecutor(max_workers=2) as executor:
        with pytest.raises(TypeError, match=f"does not take {option}="):
            search_many(PROBLEMS[:2], executor=executor, **{option: state}, **SHORT)
        none_given = search_many(PROBLEMS[1:2], executor=executor, **{option: None}, **SHORT)
    assert not state.exists()
    assert [r.plan for r in none_given] == _one_by_one(PROBLEMS[1:2], [0], **SHORT)


def test_a_worker_stop_signal_stops_its_search_and_skips_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    signals = StopSignals()  # what a local_pool worker's handlers record
    monkeypatch.setattr(many, "_worker_signals", signals)

    def signal_arrives(progress: object) -> None:
        signals.signum = signal.SIGINT

    options = {"generations": 1000, "population": 32, "on_progress": signal_arrives}
    result = many._search(PROBLEMS[0], 0, options)
    assert result.stop_reason == "SIGINT" and result.generations < 10
    with pytest.raises(KeyboardInterrupt, match="SIGINT before the search started"):
        many._search(PROBLEMS[0], 0, options)


def _never() -> None:
    """A caller's own ``interrupted`` that never stops a search."""
    return None


def test_the_callers_own_interrupted_does_not_deafen_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker's stop signal stops a search given its own ``interrupted`` too (it replaced
    the worker's: the search ran all its generations), and that one still stops it."""
    signals = StopSignals()
    monkeypatch.setattr(many, "_worker_signals", signals)

    def signal_arrives(progress: object) -> None:
        signals.signum = signal.SIGINT

    options = {"generations": 300, "population": 32, "on_progress": signal_arrives}
    result = many._search(PROBLEMS[0], 0, options | {"interrupted": _never})
    assert result.stop_reason == "SIGINT" and result.generations < 10
    signals.signum = None
    result = many._search(PROBLEMS[0], 0, options | {"on_progress": None, "interrupted": _mine})
    assert result.stop_reason == "mine" and result.generations < 10


def _mine() -> str:
    return "mine"


def test_first_stop_takes_the_first_answer_and_false_for_none() -> None:
    from tidgap.optimize.interrupts import FirstStop

    assert FirstStop((lambda: False, lambda: "SIGINT"))() == "SIGINT"
    assert FirstStop((lambda: None, lambda: True))() is True
    assert FirstStop((lambda: "SIGTERM", lambda: "SIGINT"))() == "SIGTERM"
    assert FirstStop((lambda: None, lambda: False))() is None
    assert pickle.loads(pickle.dumps(FirstStop((_never, _mine))))() == "mine"


def assert_interrupted(script: str) -> None:
    """``script`` (Python; ``tidgap``, ``os``, ``signal``, ``threading`` imported), run in
    a new session (a signal it sends itself reaches it alone), prints ``interrupted``
    within 120 s; a hang dumps its threads' stacks into the failure after 90 s."""
    import subprocess
    import sys

    preamble = (
        "import faulthandler, os, signal, threading\n"
        "faulthandler.dump_traceback_later(90, exit=True)\n"
        # as from a terminal: tests run in the background of a non-interactive shell
        # inherit SIGINT ignored, and so would the script (no KeyboardInterrupt at all)
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import tidgap\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", preamble + script],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
    assert done.stdout.strip() == "interrupted", done.stderr


def test_ctrl_c_in_the_launcher_alone_stops_the_running_searches() -> None:
    """A KeyboardInterrupt in the launcher (SIGINT to its pid alone) stops the default
    pool's running searches too: search_many raises within seconds (it waited for their
    whole time limit; and where another thread took the signal, its wait never saw it)."""
    assert_interrupted(
        "problem = tidgap.load_problem('example:hetero-8')\n"
        "threading.Timer(8, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        "try:\n"
        "    tidgap.search_many([problem] * 2, seeds=[0, 1], time_limit=300)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )


def test_ctrl_c_while_the_tasks_are_submitted_stops_the_searches() -> None:
    """A Ctrl-C while the tasks are submitted (in a submit, or held back to the end of the
    submits) stops the searches already running too (it was raised outside the block that
    stops them, and the pool waited for their whole time limit)."""
    assert_interrupted(
        "from tidgap.optimize.many import LocalPool\n"
        "class Signalling(LocalPool):\n"
        "    submitted = 0\n"
        "    def submit(self, *args, **kwargs):\n"
        "        if self.submitted:  # the first task is running\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        self.submitted += 1\n"
        "        return super().submit(*args, **kwargs)\n"
        "pool = Signalling(2)\n"
        "problem = tidgap.load_problem('example:hetero-8')\n"
        "try:\n"
        "    tidgap.search_many([problem] * 2, executor=pool, seeds=[0, 1], time_limit=300)\n"
        "except KeyboardInterrupt:\n"
        "    pool.shutdown(wait=True)\n"
        "    print('interrupted', flush=True)\n"
    )
