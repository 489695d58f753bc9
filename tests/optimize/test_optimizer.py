"""tidgap.Optimizer: ask/tell is the loop search() runs; custom fitness; constraints;
state files."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tidgap
from tests.support.backends import install_fake_cupy
from tidgap.optimize.scores import to_ticks


def run(optimizer: tidgap.Optimizer, generations: int) -> tidgap.Optimizer:
    """Ask, evaluate and tell until ``generations`` generations are told."""
    while optimizer.generation < generations:
        population = optimizer.ask()
        optimizer.tell(population, optimizer.evaluate(population))
    return optimizer


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_ask_tell_is_the_search_loop_flush(backend):
    problem = tidgap.load_problem("example:gpt1-14")
    options = dict(schedule="flush", seed=7, population=32, backend=backend)
    searched = tidgap.search(problem, generations=200, **options)
    driven = run(tidgap.Optimizer(problem, **options), 200)
    result = driven.result()
    assert result.plan == searched.plan
    assert (driven.generation, driven.evaluations) == (searched.generations, searched.evaluations)


def test_ask_tell_is_the_search_loop_windowed():
    # 1200 generations or more: the first, flush search takes 300 in both.
    problem = tidgap.load_problem("example:tiny-2")
    options = dict(seed=2, population=16, backend="numba", memory_limit="1f1b")
    searched = tidgap.search(problem, generations=1300, **options)
    driven = run(tidgap.Optimizer(problem, **options), 1000)
    assert driven.result().plan == searched.plan


@pytest.mark.parametrize("schedule", ["windowed", "flush"])
def test_driven_to_the_searchs_stopping_rule_it_is_the_search(schedule):
    """``search(generations=G)`` is the optimizer built with ``Stopping(generations=G)``,
    driven and finished, whatever G (the windowed first search sized by the rule too); a
    loop of one's own without the rule ran a first search of its own length (README)."""
    problem = tidgap.load_problem("example:vgg16")
    options = dict(schedule=schedule, seed=0, population=32, backend="numba")
    searched = tidgap.search(problem, generations=8, **options)
    optimizer = tidgap.Optimizer(problem, stopping=tidgap.Stopping(generations=8), **options)
    assert optimizer.drive() == "generations"
    result = optimizer.result()
    assert result.plan == searched.plan
    assert (result.generations, result.evaluations) == (searched.generations, searched.evaluations)


def test_best_is_a_plan_with_its_time():
    problem = tidgap.load_problem("example:vgg16")
    optimizer = run(tidgap.Optimizer(problem, seed=0, population=32, backend="numba"), 20)
    plan, time = optimizer.best()
    assert time == pytest.approx(tidgap.evaluate(problem, plan).iteration_time)
    population = optimizer.ask()
    plans = optimizer.plans(population)
    assert len(plans) == population.size
    scores = optimizer.evaluate(population)
    for p in (0, population.size - 1):
        tidgap.check_plan(plans[p], problem)
        reference = tidgap.evaluate(problem, plans[p]).iteration_time
        assert float(scores.time[p]) == pytest.approx(reference)


def test_a_memory_penalty_lowers_peak_memory():
    problem = tidgap.load_problem("example:vgg16")

    def penalised(population, scores):
        return scores.time + 20.0 * scores.peaks.sum(axis=1)

    plain = run(tidgap.Optimizer(problem, seed=0, population=64, backend="numba"), 100)
    frugal = tidgap.Optimizer(problem, seed=0, population=64, backend="numba", fitness=penalised)
    run(frugal, 100)
    held = [tidgap.evaluate(problem, o.best()[0]).peak_held for o in (plain, frugal)]
    assert sum(held[1]) < sum(held[0])
    assert frugal.result().evaluation.peak_held == held[1]


def test_a_constraint_mask_is_respected():
    problem = tidgap.load_problem("example:vgg16")
    limit = 32

    def within(population, scores):
        return scores.time, scores.peaks.max(axis=1) <= limit

    optimizer = run(
        tidgap.Optimizer(problem, seed=1, population=64, backend="numpy", fitness=within), 30
    )
    plan, _ = optimizer.best()
    assert max(tidgap.evaluate(problem, plan).peak_held) <= limit


def test_tell_takes_outside_values_and_a_mask():
    problem = tidgap.load_problem("example:vgg16")
    optimizer = tidgap.Optimizer(problem, seed=3, population=32, backend="numpy")
    population = optimizer.ask()
    scores = optimizer.evaluate(population)
    optimizer.tell(population, scores.time, peaks=scores.peaks)  # values, not Scores
    before = optimizer.best()
    for _ in range(3):  # every child rejected: the elites stay the best
        population = optimizer.ask()
        times = optimizer.evaluate(population).time
        optimizer.tell(population, times / 2, valid=np.zeros(population.size, dtype=bool))
    assert optimizer.best() == before
    assert optimizer.generation == 4


def test_flush_fitness_is_separable():
    problem = tidgap.load_problem("example:tiny-2")

    def halves(population, scores):
        forward, backward = (h * scores.tick for h in scores.halves)
        return forward, 2 * backward  # backward weighted twice

    optimizer = tidgap.Optimizer(
        problem, schedule="flush", seed=0, population=16, backend="numpy", fitness=halves
    )
    run(optimizer, 5)
    with pytest.raises(ValueError, match="separable"):
        tidgap.Optimizer(
            problem,
            schedule="flush",
            population=16,
            backend="numpy",
            fitness=lambda population, scores: scores.time,
        )


def test_tell_needs_the_population_asked():
    problem = tidgap.load_problem("example:tiny-2")
    optimizer = tidgap.Optimizer(problem, schedule="flush", population=16, backend="numpy")
    first = optimizer.ask()
    second = optimizer.ask()
    with pytest.raises(ValueError, match="last ask"):
        optimizer.tell(first, optimizer.evaluate(second))
    # evaluate() too (a flush optimizer scored any population, another problem's included)
    for schedule in ("flush", "windowed"):
        optimizer = tidgap.Optimizer(problem, schedule=schedule, population=16, backend="numpy")
        first = optimizer.ask()
        optimizer.ask()
        with pytest.raises(ValueError, match=r"^evaluate\(\) takes the population the last ask"):
            optimizer.evaluate(first)


def test_per_plan_fitness_matches_the_built_in_one():
    problem = tidgap.load_problem("example:tiny-2")
    objective = tidgap.per_plan(lambda plan, p: tidgap.evaluate(p, plan).iteration_time, problem)
    optimizer = tidgap.Optimizer(problem, seed=4, population=16, backend="numpy")
    population = optimizer.ask()
    scores = optimizer.evaluate(population)
    # The reference simulator adds in floating point: equal to the ticks within rounding.
    assert np.allclose(objective(population, scores), scores.time, rtol=1e-12, atol=0)
    mine = tidgap.Optimizer(problem, seed=4, population=16, backend="numpy", fitness=objective)
    run(mine, 3)
    plan, time = mine.best()
    assert time == pytest.approx(tidgap.evaluate(problem, plan).iteration_time)


def test_saved_optimizer_continues_the_same(tmp_path):
    problem = tidgap.load_problem("example:vgg16")
    options = dict(schedule="flush", seed=5, population=32, backend="numba")
    straight = run(tidgap.Optimizer(problem, **options), 60)
    path = tmp_path / "o.state"
    run(tidgap.Optimizer(problem, **options), 25).save(path)
    resumed = run(tidgap.Optimizer(problem, resume=path, **options), 60)
    assert resumed.best() == straight.best()


def test_to_ticks_rejects_what_is_no_number():
    ticks = to_ticks(np.array([1.0, np.inf, np.nan, 2.5]), 0.5, np.array([1, 1, 1, 0], bool))
    assert ticks[0] == 2
    assert (ticks[1:] >= tidgap.optimize.scores.INVALID).all()


def test_a_resumed_custom_fitness_continues_the_same(tmp_path):
    problem = tidgap.load_problem("example:tiny-2")

    def penalised(population, scores):
        return scores.time + 0.5 * scores.peaks.sum(axis=1)

    options = dict(seed=6, population=16, backend="numpy", fitness=penalised)
    straight = run(tidgap.Optimizer(problem, **options), 30)
    path = tmp_path / "custom.state"
    run(tidgap.Optimizer(problem, **options), 12).save(path)
    resumed = run(tidgap.Optimizer(problem, resume=path, **options), 30)
    assert resumed.best() == straight.best()


def test_tell_checks_its_arguments():
    problem = tidgap.load_problem("example:tiny-2")
    windowed = tidgap.Optimizer(problem, population=16, backend="numpy")
    population = windowed.ask()
    with pytest.raises(ValueError, match="shape"):
        windowed.tell(population, np.zeros(population.size + 1))
    with pytest.raises(ValueError, match=r"valid has shape \(3,\), the fitness"):
        windowed.tell(population, np.zeros(population.size), valid=np.ones(3, bool))
    with pytest.raises(ValueError, match="must be numbers in the time unit"):
        windowed.tell(population, ["fast"] * population.size)
    scores = windowed.evaluate(population)
    with pytest.raises(ValueError, match=r"valid has shape \(3,\), the population"):
        windowed.tell(population, scores, valid=np.ones(3, bool))  # was a broadcast error
    times, peaks = scores.time, np.asarray(scores.peaks, dtype=float)
    for bad in (np.nan, -1.0, 2.5):  # each let a plan past a memory level
        with pytest.raises(ValueError, match="peaks must be whole numbers of samples"):
            windowed.tell(population, times, peaks=np.full(peaks.shape, bad))
    with pytest.raises(ValueError, match="peaks must be whole numbers"):
        windowed.tell(population, scores, peaks=np.full(peaks.shape, np.nan))  # not ignored
    flush = tidgap.Optimizer(problem, schedule="flush", population=16, backend="numpy")
    population = flush.ask()
    with pytest.raises(ValueError, match="separable"):
        flush.tell(population, np.zeros(population.size))
    with pytest.raises(ValueError, match="flush takes none"):
        flush.tell(population, flush.evaluate(population), peaks=peaks)


def test_peaks_past_an_int64_are_refused_not_wrapped():
    """Peaks of 1e19 samples wrapped to negative ones: best() gave a plan over the limit."""
    problem = tidgap.load_problem("example:tiny-2")
    optimizer = tidgap.Optimizer(problem, population=16, backend="numpy", memory_limit="1f1b")
    population = optimizer.ask()
    shape = (population.size, problem.num_stages)
    for huge in (np.full(shape, 1e19), [[10**400] * 2] * population.size):
        with pytest.raises(ValueError, match="peaks must be .*2\\*\\*53"):
            optimizer.tell(population, np.full(population.size, 0.5), peaks=huge)
    for huge in ([10**400] * population.size, np.full(population.size, 10**400, dtype=object)):
        with pytest.raises(ValueError, match=r"must lie within \+-524288"):
            optimizer.tell(population, huge)  # OverflowError
    with pytest.raises(ValueError, match=r"must be real numbers in the time unit"):
        optimizer.tell(population, np.ones(population.size) * 1j)


def test_scores_built_by_hand_are_checked_as_values_are():
    """tell(Scores(...)) skipped every check: NaN ticks gave best() -2097152, negative peaks
    a plan over the limit, and a Scores of another tick was taken as this one's."""
    problem = tidgap.load_problem("example:tiny-2")
    optimizer = tidgap.Optimizer(problem, population=16, backend="numpy", memory_limit="1f1b")
    population = optimizer.ask()
    size, tick = population.size, optimizer.evaluate(population).tick
    ones, held = np.ones(size, dtype=np.int64), np.ones((size, 2), dtype=np.int64)
    cases = [
        (tidgap.Scores(np.full(size, np.nan), tick), r"Scores' ticks must be integers"),
        (tidgap.Scores(ones * 2**62, tick), r"some out of range"),
        # each wrapped to a negative time that passed, had the range been checked after a cast
        (tidgap.Scores(np.full(size, 2**64 - 5, dtype=np.uint64), tick), r"out of range"),
        (tidgap.Scores(np.full(size, np.iinfo(np.int64).min), tick), r"out of range"),
        (tidgap.Scores(ones, tick, peaks=-held), r"peaks must be whole numbers"),
        (tidgap.Scores(ones, tick, peaks=held, units=held * 2.5), r"units must be whole"),
        (tidgap.Scores(ones, tick * 2, peaks=held), r"scores of another problem"),
    ]
    for scores, message in cases:
        with pytest.raises(ValueError, match=message):
            optimizer.tell(population, scores)
    optimizer.tell(population, tidgap.Scores(ones * 100, tick, peaks=held))
    assert optimizer.generation == 1


@pytest.mark.parametrize("schedule", ["windowed", "flush"])
def test_arrays_changed_after_ask_change_nothing(schedule: str) -> None:
    """ask() handed out the optimizer's own arrays: a caller's change broke its state (an
    IndexError inside NumPy at the next evaluate). They are copies now."""
    problem = tidgap.load_problem("example:tiny-2")

    def optimizer() -> tidgap.Optimizer:
        return tidgap.Optimizer(problem, schedule=schedule, population=16, backend="numpy")

    changed, kept = optimizer(), optimizer()
    for _ in range(3):
        population, same = changed.ask(), kept.ask()
        scores = changed.evaluate(population)
        population.forward[...], population.backward[...] = 100, -3
        changed.tell(population, scores)
        kept.tell(same, kept.evaluate(same))
    assert changed.best() == kept.best()


def test_per_plan_objective_that_returns_no_number_is_named():
    """An objective returning None rejected every individual, silently (NaN)."""
    problem = tidgap.load_problem("example:tiny-2")
    fitness = tidgap.per_plan(lambda plan, problem: None, problem)
    with pytest.raises(ValueError, match=r"objective must return a number in the time unit"):
        tidgap.Optimizer(problem, population=16, backend="numpy", fitness=fitness)


def test_a_fitness_past_the_ticks_range_is_refused_not_wrapped():
    """Values past the problem's tick range wrapped (-3e6 ms became -2097152) or rejected
    every individual (+6e5 on tiny-2); within it they work."""
    problem = tidgap.load_problem("example:tiny-2")
    for shift in (-3e6, 6e5):  # refused as the seeds are scored
        with pytest.raises(ValueError, match=r"must lie within \+-524288 in the time unit"):
            tidgap.Optimizer(
                problem, population=16, backend="numpy", fitness=lambda p, s, d=shift: s.time + d
            )
    shifted = tidgap.Optimizer(
        problem, population=16, backend="numpy", fitness=lambda p, s: s.time + 4e5
    )
    run(shifted, 2)
    assert shifted.best()[1] > 4e5


@pytest.mark.parametrize(
    ("fitness", "message"),
    [
        (lambda population, scores: "fast", r"must be numbers in the time unit \(got str\)"),
        (lambda population, scores: np.ones(3), r"fitness returned shape \(3,\)"),
        (lambda population, scores: (scores.time, np.ones(3, bool)), r"\(mask \(3,\)\)"),
        (lambda p, s: (s.time, s.time, s.time), r"returned a tuple of 3: return values, \(values"),
        (
            lambda p, s: (s.time, np.ones(s.time.shape, int)),
            r"a constraint mask is a bool array, not int",
        ),
    ],
    ids=["a-word", "too-few", "mask-too-short", "three", "int-mask"],
)
def test_a_fitness_of_the_wrong_shape_or_kind_is_named(fitness, message):
    with pytest.raises(ValueError, match=message):
        tidgap.Optimizer(tidgap.load_problem("example:tiny-2"), population=16, fitness=fitness)


@pytest.mark.parametrize(
    ("fitness", "message"),
    [
        (lambda p, s: s.halves + (s.time,), r"returned a tuple of 3"),
        (lambda p, s: (s.time[:3], s.time), r"halves of shapes \[\(3,\), \(16,\)\]"),
    ],
    ids=["three", "short-half"],
)
def test_a_flush_fitness_of_the_wrong_shape_is_named(fitness, message):
    """They said 'zip() argument 2 is shorter' and 'valid has shape (16,)' (no valid given)."""
    with pytest.raises(ValueError, match=message):
        tidgap.Optimizer(
            tidgap.load_problem("example:tiny-2"), schedule="flush", population=16,
            fitness=fitness,
        )  # fmt: skip


def test_a_fitness_may_return_a_list():
    problem = tidgap.load_problem("example:tiny-2")
    as_list = run(
        tidgap.Optimizer(problem, seed=2, population=16, fitness=lambda p, s: list(s.time)), 5
    )
    built_in = run(tidgap.Optimizer(problem, seed=2, population=16), 5)
    assert as_list.best() == built_in.best()


def test_drive_needs_a_stopping_rule():
    optimizer = tidgap.Optimizer(tidgap.load_problem("example:tiny-2"), population=16)
    with pytest.raises(ValueError, match="Stopping"):
        optimizer.drive()
    stopping = tidgap.Stopping(generations=3)
    bounded = tidgap.Optimizer(
        tidgap.load_problem("example:tiny-2"), population=16, stopping=stopping
    )
    assert bounded.drive() == "generations"
    assert bounded.result().generations == 3  # the first, flush search's included


def test_the_state_in_memory_resumes_too():
    problem = tidgap.load_problem("example:tiny-2")
    options = dict(seed=8, population=16, backend="numpy")
    straight = run(tidgap.Optimizer(problem, **options), 20)
    state = run(tidgap.Optimizer(problem, **options), 9).state
    assert state.meta["counters"]["generation"] == 9
    assert run(tidgap.Optimizer(problem, resume=state, **options), 20).best() == straight.best()


def test_ask_tell_through_the_cupy_stand_in_equals_numba(monkeypatch):
    problem = tidgap.load_problem("example:tiny-2")
    cpu = run(tidgap.Optimizer(problem, seed=9, population=16, backend="numba"), 6)
    install_fake_cupy(monkeypatch)
    gpu = tidgap.Optimizer(problem, seed=9, population=16, backend="cuda")
    population = gpu.ask()
    assert gpu.run.backend == "cuda"  # the kernels, built for the host, behind the stand-in
    gpu.tell(population, gpu.evaluate(population))
    run(gpu, 6)
    assert gpu.best() == cpu.best()


def test_plans_refuses_what_is_not_a_population_or_not_op_codes() -> None:
    optimizer = tidgap.Optimizer(tidgap.load_problem("example:tiny-2"), population=16)
    population = optimizer.ask()
    with pytest.raises(TypeError, match="must be a Population, as ask"):
        optimizer.plans(None)
    population.order[:] = -128
    with pytest.raises(ValueError, match=r"op code -128 is not one of \[0, 1\]"):
        optimizer.plans(population)
    no_order = tidgap.optimize.genome.Population(population.forward, population.backward, None)
    with pytest.raises(ValueError, match="has op codes: order is None"):  # was an IndexError
        optimizer.plans(no_order)


@pytest.mark.parametrize("schedule", ["windowed", "flush"])
def test_a_state_taken_stays_as_it_was_while_the_optimizer_goes_on(schedule: str) -> None:
    """Its arrays are copies: islands changed in place later (a migration, an adoption)
    do not reach it."""
    optimizer = tidgap.Optimizer(
        tidgap.load_problem("example:tiny-2"), schedule=schedule, population=16
    )
    state = optimizer.state
    before = {name: array.copy() for name, array in state.arrays.items()}
    run = optimizer.run.optimizer
    for array in (
        [a for island in run.islands for a in island.genes.arrays()]
        if schedule == "windowed"
        else [side.genes for side in run.sides]
    ):
        array[...] = 0
    for name, array in state.arrays.items():
        assert np.array_equal(array, before[name]), name


def test_the_best_within_a_level_is_the_pooled_islands_pick_and_its_own(monkeypatch) -> None:
    """Picked over every island's times and peaks (island after island), taken from its
    island as a copy: for a pick in each island, the individual the pooled genes hold there."""
    from tidgap.optimize import joint_optimizer
    from tidgap.optimize.joint import pooled

    optimizer = tidgap.Optimizer(tidgap.load_problem("example:hetero-8"), population=24, seed=1)
    population = optimizer.ask()
    optimizer.tell(population, optimizer.evaluate(population))
    run = optimizer.run.optimizer
    genes, times, _ = pooled(run.islands)
    size = run.islands[0].genes.size
    for index in (0, size - 1, size, len(times) - 1):
        monkeypatch.setattr(joint_optimizer, "fastest_within", lambda *_, pick=index: pick)
        found, ticks = run.best_within(run.islands[0].level)
        assert ticks == int(times[index])
        for mine, pooled_rows in zip(found.arrays(), genes.arrays(), strict=True):
            np.testing.assert_array_equal(mine[0], pooled_rows[index])
        assert not any(np.shares_memory(found.forward, i.genes.forward) for i in run.islands)


def test_a_problem_built_in_python_that_takes_no_time_is_refused_by_a_search() -> None:
    """Every op of 0 ms: load_problem refuses such a file, but one built in Python was
    searched and its result's speedups raised ZeroDivisionError."""
    zero = {"affine": {"base": 0, "per_sample": 0}}
    problem = tidgap.Problem.from_dict(
        {
            "format": "tidgap.problem/1",
            "batch_size": 8,
            "stages": [{"forward": zero, "backward": zero}] * 2,
            "links": [{"forward": zero, "backward": zero}],
        }
    )
    for schedule in ("windowed", "flush"):
        with pytest.raises(tidgap.InputError, match="stages: every plan could take less than"):
            tidgap.search(problem, schedule=schedule, generations=2, population=16)


def test_a_flush_tell_of_halves_of_two_lengths_is_named() -> None:
    """It raised NumPy's 'operands could not be broadcast together'."""
    optimizer = tidgap.Optimizer(tidgap.load_problem("example:tiny-2"), schedule="flush")
    population = optimizer.ask()
    P = len(population.forward)
    with pytest.raises(ValueError, match=rf"halves of shapes \[\({P},\), \({P - 1},\)\]"):
        optimizer.tell(population, (np.ones(P), np.ones(P - 1)))


@pytest.mark.parametrize("schedule", ["windowed", "flush"])
def test_a_fitness_rejecting_every_individual_has_no_best_plan(schedule: str) -> None:
    """Windowed, ``result()`` blamed a memory limit never given; flush, ``best()`` gave the
    sum of two rejection sentinels as a time and ``result()`` a plan."""

    def rejecting(population, scores):
        everyone = np.full(len(population.forward), np.inf)
        return (everyone, everyone) if schedule == "flush" else everyone

    optimizer = tidgap.Optimizer(
        tidgap.load_problem("example:tiny-2"),
        schedule=schedule,
        population=8,
        fitness=rejecting,
        stopping=tidgap.Stopping(generations=2),
    )
    optimizer.drive()
    assert optimizer.best() is None
    with pytest.raises(ValueError, match="^no individual has a finite fitness: the fitness"):
        optimizer.result()


@pytest.mark.parametrize("values", [[None] * 8, np.array([None] * 8), [1.0] * 7 + [None]])
def test_none_is_no_fitness_value(values: object) -> None:
    """NumPy reads ``None`` as nan, which rejected every individual silently."""
    optimizer = tidgap.Optimizer(tidgap.load_problem("example:tiny-2"), population=8)
    population = optimizer.ask()
    with pytest.raises(ValueError, match=r"must be numbers in the time unit \(got None"):
        optimizer.tell(population, values)


def test_a_plan_document_shares_no_list_with_the_result() -> None:
    """Changing the document changed the frozen result's plan, which then failed to
    evaluate (its rows no longer summed to the batch)."""
    problem = tidgap.load_problem("example:tiny-2")
    result = tidgap.search(problem, generations=2, population=8)
    before = copy.deepcopy((result.plan.forward, result.plan.order, result.evaluation.peak_held))
    document = result.plan_document()
    document["forward"][0][0] += 1
    document["order"][0] = "B"
    document["predicted"]["peak_held"][0] = 99
    assert result.plan.forward == before[0] and result.plan.order == before[1]
    assert result.evaluation.peak_held == before[2]
    assert tidgap.evaluate(problem, result.plan).iteration_time == result.evaluation.iteration_time


def test_an_earlier_generations_scores_are_refused() -> None:
    """They were taken for the new population's whenever the sizes matched."""
    optimizer = tidgap.Optimizer(tidgap.load_problem("example:tiny-2"), population=8)
    first = optimizer.ask()
    old = optimizer.evaluate(first)
    optimizer.tell(first, old)
    second = optimizer.ask()
    with pytest.raises(ValueError, match="^these Scores are of an earlier ask"):
        optimizer.tell(second, old)
    optimizer.tell(second, optimizer.evaluate(second))


def test_a_torch_tensor_of_values_is_told() -> None:
    """The check for ``None`` read ``values.dtype.kind``, which torch's dtypes lack."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    optimizer = tidgap.Optimizer(tidgap.load_problem("example:tiny-2"), population=8)
    population = optimizer.ask()
    optimizer.tell(population, torch.from_numpy(optimizer.evaluate(population).time))
    assert optimizer.generation == 1
