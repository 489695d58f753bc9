"""The lane-per-stage kernel for ordered plans (``kernels/windowed_lanes.cu``), on the GPU
where one is usable and else through the CuPy stand-in (whose host build runs the rounds
serially: every lane's snapshot, then every lane's advance): it must give Numba's ticks and
peak held samples exactly, on golden plans
and on random populations with deadlocked and miscounted orders, for every lane-group size;
launches that need more than 48 KiB of shared memory raise the kernel's limit first, and
problems the lanes cannot hold run the thread kernel."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from tests.conftest import golden_cases
from tests.support.backends import run_here
from tests.support.golden_ordered import ordered_plan
from tests.support.populations import (
    random_individuals,
    random_orders,
    random_ticked,
    with_run_tables,
)
from tidgap import Problem
from tidgap.backends.evaluator import INVALID
from tidgap.backends.ticks import TickedProblem, tick_problem
from tidgap.backends.xp import to_host
from tidgap.fallback_cpu.windowed_numba import ordered_ends
from tidgap.kernels.source import ORDERED_KERNELS
from tidgap.optimize.genome import Population, encode_order, encode_plan


@pytest.fixture(autouse=True)
def gpu_or_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``cuda`` backend runnable here: a usable GPU, or the stand-in."""
    run_here("cuda", monkeypatch)


def lanes(
    ticked: TickedProblem, population: Population, on_lanes: bool = True, max_blocks: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(P,)`` ticks and ``(P, S)`` peak held samples from ``CudaOrderedEnds(kernel="lanes")``
    (its grid capped at ``max_blocks`` when given), asserting whether it runs the lane
    kernel."""
    from tidgap.kernels.launcher import CudaOrderedEnds

    ends = CudaOrderedEnds(ticked, max_blocks or None, kernel="lanes")
    assert (ends.kernel_for(*population.forward.shape) == "lanes") == on_lanes
    fitness, held = ends(population.forward, population.backward, population.order, ticked)
    return to_host(fitness), to_host(held)


def assert_as_numba(
    ticked: TickedProblem, population: Population, on_lanes: bool = True, max_blocks: int = 0
) -> None:
    fitness, held = lanes(ticked, population, on_lanes, max_blocks)
    expected = ordered_ends(population.forward, population.backward, population.order, ticked)
    np.testing.assert_array_equal(fitness, expected[0])
    np.testing.assert_array_equal(held, expected[1])


@pytest.mark.parametrize("case", golden_cases(), ids=lambda case: case["problem"]["name"])
def test_golden_ordered_plans(case: dict) -> None:
    problem = Problem.from_dict(case["problem"])
    plans = [ordered_plan(entry) for entry in case["ordered_plans"]]
    width = max(max(map(len, plan.forward + plan.backward)) for plan in plans)
    encoded = [encode_plan(plan, problem, width) for plan in plans]
    population = Population(
        np.array([f for f, _ in encoded], dtype=np.int32),
        np.array([b for _, b in encoded], dtype=np.int32),
        order=np.array([encode_order(plan, width) for plan in plans]),
    )
    ticked = tick_problem(problem)
    assert_as_numba(ticked, population)
    assert (lanes(ticked, population)[0] < INVALID).all()


@pytest.mark.parametrize("max_blocks", [0, 1])
@pytest.mark.parametrize("stages", [1, 2, 3, 5, 8, 12, 32])
def test_random_populations_for_every_group_size(stages: int, max_blocks: int) -> None:
    """Lane groups of 1 to 32 lanes; a population that is not a multiple of a warp's
    individuals, with the grid as large as it needs or of one block (whose warp then loops
    over the population, its last individuals' lanes idle); deadlocks and broken counts
    among them."""
    rng = np.random.default_rng(stages)
    ticked = random_ticked(rng, stages, int(rng.integers(4, 13)), 1000)
    population = random_orders(rng, random_individuals(rng, ticked, 13, 12, max_count=12))
    fitness, _ = lanes(ticked, population)
    assert (fitness == INVALID).any() and (fitness < INVALID).any()
    assert_as_numba(ticked, population, max_blocks=max_blocks)


@pytest.mark.parametrize("stages", [1, 3, 8])
def test_run_priced_populations(stages: int) -> None:
    """Each op's compute ticks in place of the tables' (run pricing: recomputing, merged
    and mirrored stages), as Numba's."""
    rng = np.random.default_rng(50 + stages)
    ticked = with_run_tables(random_ticked(rng, stages, 9, 1000))
    population = random_individuals(rng, ticked, 13, 12, max_count=12)
    mirrored = rng.random(13)[:, None, None] < 0.5
    population = replace(
        population, backward=np.where(mirrored, population.forward, population.backward)
    )
    population = random_orders(rng, population)
    fitness, _ = lanes(ticked, population)
    assert (fitness < INVALID).any()
    assert_as_numba(ticked, population)


def test_wide_chromosomes_raise_the_shared_memory_limit() -> None:
    """8 stages of width 64: a warp's four individuals need 51,200 bytes (over 48 KiB, which
    CUDA, and the stand-in, refuse unless the kernel's limit was raised)."""
    from tidgap.kernels.launcher import DEFAULT_SHARED_BYTES, lane_scratch_bytes

    assert lane_scratch_bytes(8, 64) > DEFAULT_SHARED_BYTES
    rng = np.random.default_rng(64)
    ticked = random_ticked(rng, 8, 64, 1000)
    assert_as_numba(ticked, random_orders(rng, random_individuals(rng, ticked, 6, 64, 64)))


@pytest.mark.parametrize(("stages", "width"), [(33, 4), (32, 512)])
def test_problems_the_lanes_cannot_hold_run_the_thread_kernel(stages: int, width: int) -> None:
    """More than 32 stages, or a warp's scratch over the device's opt-in limit."""
    from tidgap.kernels.launcher import lane_scratch_bytes

    assert stages > 32 or lane_scratch_bytes(stages, width) > 227 * 1024
    rng = np.random.default_rng(stages)
    units = min(8, width)
    ticked = random_ticked(rng, stages, units, 100)
    population = random_orders(rng, random_individuals(rng, ticked, 3, width, units))
    assert_as_numba(ticked, population, on_lanes=False)


def auto_population(stages: int = 8) -> tuple[TickedProblem, Population]:
    """20 random individuals of ``stages`` stages, deadlocks among them."""
    rng = np.random.default_rng(70 + stages)
    ticked = random_ticked(rng, stages, 9, 1000)
    return ticked, random_orders(rng, random_individuals(rng, ticked, 20, 12, max_count=12))


def timed_as(monkeypatch: pytest.MonkeyPatch, seconds: dict[str, float]) -> list[str]:
    """Trials that see ``seconds[kernel]`` for each kernel's launches (each launch still
    runs, so the results stay real); the kernels launched, in order."""
    from tidgap.kernels import launcher

    launched: list[str] = []
    launch = launcher.CudaOrderedEnds._launch

    def recording(self: Any, name: str, *arguments: Any) -> None:
        launched.append(name)
        launch(self, name, *arguments)

    def median_seconds(run: Callable[[], None]) -> float:
        run()
        return seconds[launched[-1]]

    monkeypatch.setattr(launcher.CudaOrderedEnds, "_launch", recording)
    monkeypatch.setattr(launcher, "_median_seconds", median_seconds)
    return launched


@pytest.mark.parametrize("kernel", ORDERED_KERNELS)
@pytest.mark.parametrize("max_blocks", [0, 1])
def test_every_kernel_gives_numbas_ticks(kernel: str, max_blocks: int) -> None:
    """Each kernel forced, on a random population with deadlocks, its grid as large as
    it needs or of one block."""
    from tidgap.kernels.launcher import CudaOrderedEnds

    ticked, population = auto_population()
    ends = CudaOrderedEnds(ticked, max_blocks or None, kernel=kernel)
    assert ends.kernel_for(*population.forward.shape) == kernel
    fitness, held = ends(population.forward, population.backward, population.order, ticked)
    expected = ordered_ends(population.forward, population.backward, population.order, ticked)
    np.testing.assert_array_equal(to_host(fitness), expected[0])
    np.testing.assert_array_equal(to_host(held), expected[1])


@pytest.mark.parametrize("faster", ORDERED_KERNELS)
def test_auto_runs_the_kernel_its_trial_timed_faster(
    monkeypatch: pytest.MonkeyPatch, faster: str
) -> None:
    """Below the trial's population the thread kernel, untimed; the first population at
    least that large of a shape and size class times every kernel, and every later call of
    that shape and class runs the fastest; another class has its own trial; the ticks are
    Numba's throughout."""
    from tidgap.kernels import launcher

    monkeypatch.setattr(launcher, "TRIAL_POPULATION", 16)
    launched = timed_as(
        monkeypatch, {name: 1.0 if name == faster else 2.0 for name in ORDERED_KERNELS}
    )
    ticked, population = auto_population()
    ends = launcher.CudaOrderedEnds(ticked)
    assert ends.kernel == "auto"

    def check(count: int) -> None:
        """Score ``count`` individuals (``population``'s repeated) and check the ticks."""
        forward, backward, order = (
            np.resize(genes, (count, *genes.shape[1:]))
            for genes in (population.forward, population.backward, population.order)
        )
        individuals = Population(forward, backward, order=order)
        fitness, held = ends(individuals.forward, individuals.backward, individuals.order, ticked)
        expected = ordered_ends(
            individuals.forward, individuals.backward, individuals.order, ticked
        )
        np.testing.assert_array_equal(to_host(fitness), expected[0])
        np.testing.assert_array_equal(to_host(held), expected[1])

    trial = [*ORDERED_KERNELS, faster]
    check(15)
    assert launched == ["thread"] and ends.chosen == {}
    check(20)  # 16..31: class 5
    assert launched[1:] == trial
    assert ends.chosen == {(8, 12, 5): faster}
    assert ends.kernel_for(31, 8, 12) == faster and ends.kernel_for(15, 8, 12) == "thread"
    check(31)
    assert launched[5:] == [faster]
    check(40)  # class 6: a trial of its own
    assert launched[6:] == trial and len(ends.chosen) == 2
    check(15)
    assert launched[10:] == ["thread"]


def test_auto_keeps_the_thread_kernel_where_the_lanes_disagree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The trial compares each kernel's results with the thread kernel's: a lane kernel
    that gets any tick wrong is not chosen, however fast, and a warning says so; the
    fastest of the others is."""
    from tidgap.kernels import launcher

    monkeypatch.setattr(launcher, "TRIAL_POPULATION", 16)
    timed_as(monkeypatch, {"thread": 2.0, "thread-warp": 3.0, "lanes": 1.0})
    launch = launcher.CudaOrderedEnds._launch

    def wrong_lanes(self: Any, name: str, arguments: tuple, *rest: Any) -> None:
        launch(self, name, arguments, *rest)
        if name == "lanes":
            arguments[3][-1] += 1  # one individual's ticks

    monkeypatch.setattr(launcher.CudaOrderedEnds, "_launch", wrong_lanes)
    ticked, population = auto_population()
    ends = launcher.CudaOrderedEnds(ticked)
    with pytest.warns(RuntimeWarning, match="the lanes kernel's ticks differ"):
        fitness, _ = ends(population.forward, population.backward, population.order, ticked)
    assert ends.chosen == {(8, 12, 5): "thread"}
    np.testing.assert_array_equal(
        to_host(fitness),
        ordered_ends(population.forward, population.backward, population.order, ticked)[0],
    )


def test_auto_times_the_kernels_for_real() -> None:
    """Without a stand-in for the clock: the trial picks one of the kernels and the
    ticks are Numba's."""
    from tidgap.kernels import launcher

    ticked, population = auto_population(3)
    big = Population(
        *(
            np.tile(genes, (-(-launcher.TRIAL_POPULATION // 20), 1, 1))
            for genes in (population.forward, population.backward)
        ),
        order=np.tile(population.order, (-(-launcher.TRIAL_POPULATION // 20), 1, 1)),
    )
    ends = launcher.windowed_cuda(ticked).ordered_ends
    fitness, _ = ends(big.forward, big.backward, big.order, ticked)
    key = (3, 12, big.forward.shape[0].bit_length())
    assert set(ends.chosen) == {key} and ends.chosen[key] in ORDERED_KERNELS
    np.testing.assert_array_equal(
        to_host(fitness), ordered_ends(big.forward, big.backward, big.order, ticked)[0]
    )


def test_auto_leaves_the_lanes_out_where_they_do_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tidgap.kernels import launcher

    monkeypatch.setattr(launcher, "TRIAL_POPULATION", 1)
    launched = timed_as(monkeypatch, {"thread": 2.0, "thread-warp": 1.5, "lanes": 1.0})
    rng = np.random.default_rng(33)
    ticked = random_ticked(rng, 33, 4, 100)
    population = random_orders(rng, random_individuals(rng, ticked, 3, 4, 4))
    ends = launcher.CudaOrderedEnds(ticked)
    ends(population.forward, population.backward, population.order, ticked)
    assert launched == ["thread", "thread-warp", "thread-warp"]
    assert ends.chosen == {(33, 4, 2): "thread-warp"}


def test_an_unknown_kernel_is_refused() -> None:
    from tidgap.kernels.launcher import CudaOrderedEnds

    with pytest.raises(ValueError, match="one of 'auto', 'thread', 'thread-warp', 'lanes'"):
        CudaOrderedEnds(tick_problem(Problem.from_dict(golden_cases()[0]["problem"])), kernel="x")
