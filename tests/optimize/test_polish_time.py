"""How a time-limited windowed search times its final polish: the time it keeps for the
polish (scans of the level in force's best, within bounds) and how that time is shared
among the levels (the level in force first)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.optimize.test_joint_polish import _space
from tidgap.optimize import joint_polish as polish_module
from tidgap.optimize import windowed_finish
from tidgap.optimize.joint_polish import scan_seconds, stacked_neighbours
from tidgap.optimize.limits import MemoryLevel
from tidgap.optimize.preparation import POLISH_SHARE
from tidgap.optimize.windowed_finish import (
    IN_FORCE_POLISH_SHARE,
    MOST_POLISH_SHARE,
    POLISH_SCANS,
    polish_reserve,
    polished,
)
from tidgap.optimize.windowed_seeds import encode_plans, one_f_one_b_level
from tidgap.schedules.baselines import best_baselines, one_f_one_b_plan

LEVELS = [MemoryLevel(label, (4, 4)) for label in ("1F1B", "1.5x", "2x", "unlimited")]


def test_a_scan_is_its_first_batch_times_the_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a clock that moves 1 s per reading, scoring the first batch takes 1 s: the
    estimate is the number of neighbours over the first batch's."""
    problem, space = _space("gpt1-14")
    best = best_baselines(problem)["1f1b"]
    level = one_f_one_b_level(problem, best)
    start = encode_plans([one_f_one_b_plan(problem, best.microbatches)], problem, 16).repaired()
    ticks = iter(range(10**6))
    monkeypatch.setattr(polish_module.time, "perf_counter", lambda: float(next(ticks)))
    estimate = scan_seconds(start, level, space)
    stacked = np.stack([start.forward[0], start.backward[0], start.lead[0]])
    caps = (space.forward_caps, space.backward_caps)
    everything = list(stacked_neighbours(stacked, caps, 10**6, space.partition_genes))
    batch = max(1, polish_module.JOINT_BATCH_BYTES // (stacked.size * 96))
    assert estimate == pytest.approx(len(everything[0]) / min(batch, len(everything[0])))


@pytest.mark.parametrize(
    ("scan", "best", "reserve"),
    [
        (0.001, True, POLISH_SHARE * 10),  # a shallow pipeline: the least share
        (0.2, True, POLISH_SCANS * 0.2),  # between the bounds: the scans
        (5.0, True, MOST_POLISH_SHARE * 10),  # a deep one: the most
        (5.0, False, POLISH_SHARE * 10),  # no plan within the level in force
    ],
)
def test_the_polish_keeps_time_for_its_scans_within_bounds(
    monkeypatch: pytest.MonkeyPatch, scan: float, best: bool, reserve: float
) -> None:
    monkeypatch.setattr(windowed_finish, "scan_seconds", lambda *_: scan)
    run = SimpleNamespace(levels=LEVELS, in_force=LEVELS[3], optimizer=SimpleNamespace(space=None))
    found: list[Any] = [None, None, None, ("genes", 1) if best else None]
    assert polish_reserve(run, found, 10.0) == pytest.approx(reserve)


@pytest.mark.parametrize(
    ("uses", "shares"),
    [
        (1.0, [4.0, 4 / 3, 4 / 3, 4 / 3]),  # each polish runs to its deadline
        (0.0, [4.0, 8 / 3, 4.0, 8.0]),  # each ends at once: what it leaves goes on
    ],
)
def test_the_level_in_force_is_polished_first_for_half_the_time(
    monkeypatch: pytest.MonkeyPatch, uses: float, shares: list[float]
) -> None:
    """Each level's polish is given its deadline (on a clock the polishes move): the level
    in force (here 2x) first, half of the time; then the others in order, each an equal
    share of what is left."""
    clock = [0.0]
    calls: list[tuple[str, float]] = []

    def polish(
        genes: Any,
        ticks: int,
        level: MemoryLevel,
        space: Any,
        deadline: float,
        interrupted: Any,
        groups: bool | None,
        kicks: bool,
    ) -> Any:
        calls.append((level.label, deadline - clock[0]))
        clock[0] += uses * (deadline - clock[0])
        return genes, ticks

    monkeypatch.setattr(windowed_finish.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(windowed_finish, "joint_polish", polish)
    monkeypatch.setattr(windowed_finish, "fastest_admitted", lambda found, *_: found)
    found = [(f"genes {i}", i) for i in range(4)]
    assert polished(found, LEVELS, LEVELS[2], None, 8.0) == found
    assert [label for label, _ in calls] == ["2x", "1F1B", "1.5x", "unlimited"]
    assert [seconds for _, seconds in calls] == pytest.approx(shares)
    assert shares[0] == 8 * IN_FORCE_POLISH_SHARE
