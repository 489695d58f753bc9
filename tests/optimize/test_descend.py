"""The polish's descent: each step adds the other improving neighbours' rows that help."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tidgap.optimize import polish as polish_module
from tidgap.optimize.polish import (
    COMBINED_MOVES,
    FOCUS_RADIUS,
    Focus,
    descend,
    group_row_moves,
    near_changes,
    neighbour_batches,
    polish,
    rows_near,
)

UNITS, WIDTH = 8, 4


def _valid(row: np.ndarray) -> bool:
    sizes = row[row > 0]
    return int(row.sum()) == UNITS and bool((row[len(sizes) :] == 0).all())


def _separable(targets: np.ndarray, scans: list[int]):
    """A score summing each row's squared distance of its first microbatch from its
    target; refuses rows that are not partitions of :data:`UNITS`."""

    def score(candidates: np.ndarray) -> np.ndarray:
        assert all(_valid(row) for candidate in candidates for row in candidate)
        if len(candidates) > 1:
            scans.append(len(candidates))
        return ((candidates[:, :, 0] - targets) ** 2).sum(axis=1)

    return score


def _start(stages: int) -> np.ndarray:
    genes = np.zeros((stages, WIDTH), dtype=np.int32)
    genes[:, :2] = [UNITS - 1, 1]
    return genes


def test_one_step_moves_every_stage_that_gains() -> None:
    stages = 6
    targets = np.array([3, 6, 3, 7, 8, 6])  # one move from 7 each (halve, shift, merge)
    scans: list[int] = []
    genes = _start(stages)
    start = int(_separable(targets, [])(genes[None])[0])
    caps = np.full(stages, UNITS)
    polished, fitness = polish(genes, start, caps, _separable(targets, scans))
    assert fitness == 0 and (polished[:, 0] == targets).all()
    # one scan moving every stage but the one at its target, and one finding no move;
    # steepest descent alone takes a scan per move
    assert len(scans) == 2
    assert all(_valid(row) for row in polished)


def test_a_move_that_no_longer_helps_is_left_out() -> None:
    """Two stages each gain alone; together they lose (a shared resource): the step keeps
    only the better one."""
    genes = _start(2)

    def score(candidates: np.ndarray) -> np.ndarray:
        moved = candidates[:, :, 0] != UNITS - 1
        return np.where(moved.all(axis=1), 100, 10 - 2 * moved[:, 0] - moved[:, 1])

    polished, fitness = polish(genes, 10, np.full(2, UNITS), score)
    assert fitness == 8
    assert polished[0, 0] != UNITS - 1 and polished[1, 0] == UNITS - 1


def test_a_step_combines_at_most_its_share_of_moves(monkeypatch) -> None:
    stages = COMBINED_MOVES + 8
    targets = np.full(stages, 3)
    moved: list[int] = []

    def recording(before: np.ndarray, after: np.ndarray):
        moved.append(int((before != after).any(axis=-1).sum()))
        return near_changes(before, after)

    monkeypatch.setattr(polish_module, "near_changes", recording)
    genes = _start(stages)
    polished, fitness = _single_stages(
        genes, int(((genes[:, 0] - 3) ** 2).sum()), _separable(targets, [])
    )
    # the first step moves COMBINED_MOVES stages, later ones the rest, each stage once
    assert fitness == 0 and moved[0] == COMBINED_MOVES and sum(moved) == stages


def _single_stages(genes: np.ndarray, fitness: int, score) -> tuple[np.ndarray, int]:
    """:func:`descend` over single stages' moves in one batch a scan (what :func:`polish`
    does after its group moves on a deep chromosome)."""
    caps = np.full(genes.shape[0], UNITS)

    def batches(g: np.ndarray, focus: Focus) -> Iterator[np.ndarray]:
        return neighbour_batches(g, caps, 1 << 20, focus)

    return descend(genes, fitness, batches, score)


def test_after_a_step_only_stages_near_its_changes_are_scanned() -> None:
    """Stage 10 is one move from its target, stage 40 two: the first scan covers every
    stage and moves both; the second covers the stages within FOCUS_RADIUS of them and
    moves stage 40 again; the third, around stage 40, finds none, and a scan of every
    stage confirms the optimum."""
    stages = 48
    targets = np.full(stages, UNITS - 1)
    targets[10], targets[40] = UNITS - 2, UNITS - 3
    scans: list[int] = []
    genes = _start(stages)
    start = int(_separable(targets, [])(genes[None])[0])
    polished, fitness = _single_stages(genes, start, _separable(targets, scans))
    assert fitness == 0 and (polished[:, 0] == targets).all()
    per_stage = scans[0] // stages  # every untouched row has as many neighbours
    near = 2 * FOCUS_RADIUS + 1
    assert len(scans) == 4 and scans[3] >= scans[0]  # the last one: every stage
    assert scans[1] == pytest.approx(2 * near * per_stage, abs=2 * near)
    assert scans[2] == pytest.approx(near * per_stage, abs=near)


def test_an_early_scan_steps_at_its_first_improving_batch() -> None:
    """Stages 10 and 40 are one move from their targets; batches hold a few stages. With
    ``early``, the first scan of every stage ends at the batch holding stage 10 and moves
    it alone; after the scan near it finds nothing, the next scan of every stage ends at
    stage 40's batch; the last one covers every stage and confirms the optimum."""
    stages = 48
    targets = np.full(stages, UNITS - 1)
    targets[10], targets[40] = UNITS - 2, UNITS - 2
    scans: list[int] = []
    genes = _start(stages)
    score = _separable(targets, [])
    per_stage = len(rows_near(genes[0], UNITS))
    caps = np.full(stages, UNITS)

    def batches(g: np.ndarray, focus: np.ndarray | None) -> Iterator[np.ndarray]:
        for batch in neighbour_batches(g, caps, 4 * per_stage, focus):
            scans.append(len(batch) if focus is None else 0)
            yield batch

    start = int(score(genes[None])[0])
    polished, fitness = descend(genes, start, batches, score, early=True)
    assert fitness == 0 and (polished[:, 0] == targets).all()
    first, second, last = _runs(scans)
    assert (len(first), len(second)) == (3, 11)  # batches of 4 stages: to 10, then to 40
    assert sum(last) == sum(len(rows_near(row, UNITS)) for row in polished)  # every stage


def _runs(scans: list[int]) -> list[list[int]]:
    """The runs of full-scan batches in ``scans`` (focused ones recorded as 0)."""
    runs: list[list[int]] = [[]]
    for size in scans:
        if size == 0:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(size)
    return [run for run in runs if run]


def _rows_near_by_definition(row: np.ndarray, cap: int) -> list[list[int]]:
    """The neighbour rows as the polish defines them, one at a time (the oracle)."""
    sizes, width = [int(u) for u in row if u > 0], len(row)
    found = []
    for k in range(len(sizes) - 1):
        for step in (-1, 1):
            left, right = sizes[k] + step, sizes[k + 1] - step
            if 1 <= left <= cap and 1 <= right <= cap:
                found.append([*sizes[:k], left, right, *sizes[k + 2 :]])
        if sizes[k] + sizes[k + 1] <= cap:
            found.append([*sizes[:k], sizes[k] + sizes[k + 1], *sizes[k + 2 :]])
    if len(sizes) < width:
        for k, size in enumerate(sizes):
            if size >= 2:
                found.append([*sizes[:k], size // 2, size - size // 2, *sizes[k + 1 :]])
    return [[*f, *[0] * (width - len(f))] for f in found]


def test_the_neighbour_rows_are_those_of_the_definition_in_its_order() -> None:
    """The vectorised rows: every shift, merge and halving that fits, in the order of the
    definition (ties go to the first), on random partitions."""
    rng = np.random.default_rng(1)
    for _ in range(500):
        width, count = (int(v) for v in sorted(rng.integers(1, 9, size=2))[::-1])
        row = np.zeros(width, dtype=np.int32)
        row[:count] = rng.integers(1, 7, size=count)
        cap = int(rng.integers(row.max(), 14))
        near = rows_near(row, cap)
        assert near.dtype == np.int32 and near.shape[1] == width
        assert near.tolist() == _rows_near_by_definition(row, cap)


def test_group_row_moves_step_the_stages_sharing_a_row_within_their_least_cap() -> None:
    rows = np.array([[4, 4, 0, 0], [5, 3, 0, 0], [4, 4, 0, 0], [5, 3, 0, 0], [8, 0, 0, 0]])
    caps = np.array([8, 8, 5, 6, 8])
    moved = list(group_row_moves(rows, caps))
    first = rows_near(rows[0], 5)  # stages 0 and 2
    second = rows_near(rows[1], 6)  # stages 1 and 3; stage 4's row is its own
    assert len(moved) == len(first) + len(second)
    for n, (candidate, row) in enumerate(zip(moved, [*first, *second], strict=True)):
        together = [0, 2] if n < len(first) else [1, 3]
        assert (candidate[together] == row).all()
        others = [s for s in range(5) if s not in together]
        assert (candidate[others] == rows[others]).all()


def test_a_deep_flush_polish_moves_groups_of_stages_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stage wants its first microbatch at 3 units, and any stage apart from the
    others costs: single stages' steps cannot leave the equal partition, the group's can."""
    stages = 4
    start = np.tile(np.array([2, 2, 2, 2], dtype=np.int64), (stages, 1))

    def score(candidates: np.ndarray) -> np.ndarray:
        apart = (candidates != candidates[:, :1]).any(axis=2).sum(axis=1)
        return ((candidates[:, :, 0] - 3) ** 2).sum(axis=1) + 10 * apart

    caps = np.full(stages, UNITS)
    fitness = int(score(start[None])[0])
    assert polish(start, fitness, caps, score)[1] == fitness  # single stages: stuck
    monkeypatch.setattr(polish_module, "GROUP_MOVES_FROM_STAGES", stages)
    genes, ticks = polish(start, fitness, caps, score)
    assert ticks < fitness and (genes == genes[0]).all() and genes[0, 0] == 3
