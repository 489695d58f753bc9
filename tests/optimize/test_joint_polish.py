"""The joint polish: steepest descent among plans within a memory level."""

from __future__ import annotations

import numpy as np
import pytest

from tidgap import evaluate, load_problem
from tidgap.backends.evaluator import create_evaluator
from tidgap.backends.ticks import tick_problem
from tidgap.model.plan import Plan
from tidgap.model.problem import Problem
from tidgap.optimize import polish as polish_module
from tidgap.optimize.genome import decode_plan
from tidgap.optimize.joint import JointSpace
from tidgap.optimize.joint_polish import (
    _Polish,
    first_unit_kicks,
    group_moves,
    joint_polish,
    lead_group_moves,
    lead_rows_near,
    stacked_neighbours,
    unstacked,
)
from tidgap.optimize.limits import MemoryLevel, penalised, stage_level
from tidgap.optimize.polish import GROUP_MOVES_FROM_STAGES, moved_batches, rows_near
from tidgap.optimize.rng import CounterRng
from tidgap.optimize.windowed_seeds import encode_plans, one_f_one_b_level
from tidgap.profiling.synth import synth_problem
from tidgap.schedules.baselines import best_baselines, one_f_one_b_plan


def _space(name: str, width: int = 16) -> tuple[object, JointSpace]:
    problem = load_problem(f"example:{name}")
    ticked = tick_problem(problem)
    evaluator = create_evaluator(ticked, "windowed", "numba")
    return problem, JointSpace(evaluator, ticked.forward_caps, ticked.backward_caps, width)


def test_lead_neighbours_move_one_entry_or_a_tail_by_one() -> None:
    lead = np.array([2, 1, 0, 0], dtype=np.int32)
    rows = list(lead_rows_near(lead, backwards=3))
    assert len(rows) == 2 * 3 + 2 * 2
    for row in rows:
        moved = row - lead
        assert set(np.unique(moved)) <= {-1, 0, 1} and moved[3] == 0
        changed = np.nonzero(moved)[0]
        assert len(changed) == 1 or list(changed) == list(range(changed[0], 3))


def test_the_polish_never_leaves_its_level_and_ends_at_a_local_optimum() -> None:
    problem, space = _space("gpt1-14")
    best = best_baselines(problem)["1f1b"]
    level = one_f_one_b_level(problem, best)
    start = encode_plans([one_f_one_b_plan(problem, best.microbatches)], problem, 16).repaired()
    times, _ = space.evaluate(start)
    individual, ticks = joint_polish(start, int(times[0]), level, space)
    assert ticks <= int(times[0])
    plan = decode_plan(individual.forward[0], individual.backward[0], problem, individual.codes[0])
    reference = evaluate(problem, plan)
    assert level.admits(reference.peak_held)
    assert reference.iteration_time == pytest.approx(space.evaluator.ticked.to_time(ticks))
    stacked = np.stack([individual.forward[0], individual.backward[0], individual.lead[0]])
    caps = (space.forward_caps, space.backward_caps)
    around = unstacked(np.concatenate(list(stacked_neighbours(stacked, caps, 100, (0, 1)))), space)
    times, peaks = space.evaluate(around)
    assert penalised(times, peaks, np.asarray(level.held)).min() >= ticks


def test_an_unlimited_level_admits_what_a_tight_one_refuses() -> None:
    problem, space = _space("tiny-2", width=8)
    tight = MemoryLevel("tight", (1, 1))
    start = space.random(8, CounterRng(0))
    times, peaks = space.evaluate(start)
    assert (penalised(times, peaks, np.asarray(tight.held)) > times).all()


def test_the_polish_improves_a_random_plan() -> None:
    problem, space = _space("gpt1-14")
    start = space.random(1, CounterRng(5))
    times, _ = space.evaluate(start)
    _, ticks = joint_polish(start, int(times[0]), stage_level(problem), space)
    assert ticks < int(times[0])


def test_batches_are_the_start_with_each_move_applied_in_order() -> None:
    """Filled in place, not copied per neighbour: the same candidates in the same order as
    a copy of the start per row moved (blocks of rows split across batches), each gene
    contiguous over a batch."""
    rng = np.random.default_rng(0)
    start = rng.integers(0, 9, size=(3, 5, 4)).astype(np.int32)
    places = [(int(g), int(s)) for g, s in rng.integers(0, [3, 5], size=(6, 2))]
    moves = [(place, rng.integers(0, 9, size=(n, 4)).astype(np.int32)) for n, place in
             zip([3, 0, 5, 1, 2, 4], places, strict=True)]  # fmt: skip
    expected = []
    for (gene, stage), rows in moves:
        for row in rows:
            changed = start.copy()
            changed[gene, stage] = row
            expected.append(changed)
    batches = list(moved_batches(start, moves, 4, split=1))
    assert [len(b) for b in batches] == [4, 4, 4, 3]
    assert np.array_equal(np.concatenate(batches), np.stack(expected))
    assert all(b[:, g].flags.c_contiguous for b in batches for g in range(3))


def test_lead_group_moves_take_each_lead_step_on_every_stage_at_once() -> None:
    lead = np.array([[2, 1, 0, 0], [3, 1, 1, 0], [1, 0, 0, 0]], dtype=np.int32)
    backwards = np.array([3, 3, 2])
    moved = lead_group_moves(lead, backwards)
    for s in range(2):  # stages with three backwards: the steps of lead_rows_near, in order
        assert (moved[:, s] == lead_rows_near(lead[s], 3)).all()
    singles = lead_rows_near(lead[2], 2)
    assert (moved[: len(singles), 2] == singles).all()  # k = 0 and 1 as on its own
    assert (moved[len(singles) :, 2] == lead[2]).all()  # k = 2: it has no third backward


def test_group_moves_step_every_stage_sharing_a_row() -> None:
    forward = np.array([[2, 2, 0], [3, 1, 0], [2, 2, 0]], dtype=np.int32)
    backward = np.array([[4, 0, 0], [4, 0, 0], [4, 0, 0]], dtype=np.int32)
    lead = np.zeros((3, 3), dtype=np.int32)
    stacked = np.stack([forward, backward, lead])
    caps = (np.array([4, 4, 3]), np.array([4, 4, 4]))
    moves = list(group_moves(stacked, caps, (0, 1)))
    changed = [[g for g in range(3) if (c[g] != stacked[g]).any()] for c in moves]
    assert all(len(genes) == 1 for genes in changed)  # each moves one gene
    forwards = [c[0] for c, genes in zip(moves, changed, strict=True) if genes == [0]]
    expected = rows_near(forward[0], 3)  # stages 0 and 2; the least cap of the two
    assert len(forwards) == len(expected)
    for rows, row in zip(forwards, expected, strict=True):
        assert (rows[0] == row).all() and (rows[2] == row).all() and (rows[1] == forward[1]).all()
    backwards = [c[1] for c, genes in zip(moves, changed, strict=True) if genes == [1]]
    assert len(backwards) == len(rows_near(backward[0], 4))
    assert all((rows == rows[0]).all() for rows in backwards)  # all three stages at once
    leads = len(lead_group_moves(lead, np.ones(3, int)))
    assert [genes for genes in changed].count([2]) == leads
    assert changed == [[0]] * len(forwards) + [[1]] * len(backwards) + [[2]] * leads


def test_group_moves_improve_the_best_1f1b_of_a_deep_pipeline() -> None:
    """On 16 stages the best 1F1B is a local optimum of single stages' moves (within its own
    memory), not of the moves of all stages at once (asked for with ``groups``; both
    without the kicks)."""
    problem = Problem.from_dict(synth_problem(3, stages=16, batch_size=256))
    ticked = tick_problem(problem)
    evaluator = create_evaluator(ticked, "windowed", "numba")
    space = JointSpace(evaluator, ticked.forward_caps, ticked.backward_caps, 64)
    best = best_baselines(problem)["1f1b"]
    level = one_f_one_b_level(problem, best)
    start = encode_plans([one_f_one_b_plan(problem, best.microbatches)], problem, 64)
    start = start.repaired(space.repair)
    ticks = int(space.evaluate(start)[0][0])
    _, grouped = joint_polish(start, ticks, level, space, groups=True, kicks=False)
    _, single = joint_polish(start, ticks, level, space, kicks=False)
    assert problem.num_stages < GROUP_MOVES_FROM_STAGES and grouped < single <= ticks


def test_shallower_pipelines_move_single_stages_only(monkeypatch: pytest.MonkeyPatch) -> None:
    problem, space = _space("gpt1-14")
    best = best_baselines(problem)["1f1b"]
    start = encode_plans([one_f_one_b_plan(problem, best.microbatches)], problem, 16).repaired()
    asked: list[int] = []
    grouped = _Polish.group_batches
    monkeypatch.setattr(
        _Polish, "group_batches", lambda self, *args: asked.append(1) or grouped(self, *args)
    )
    level = one_f_one_b_level(problem, best)
    ticks = int(space.evaluate(start)[0][0])

    def asks_groups(**options: bool) -> bool:
        """Whether a polish with ``options`` asks for the moves of groups of stages."""
        before = len(asked)
        joint_polish(start, ticks, level, space, **options)
        return len(asked) > before

    assert problem.num_stages < GROUP_MOVES_FROM_STAGES and not asks_groups()
    assert asks_groups(groups=True)
    monkeypatch.setattr(polish_module, "GROUP_MOVES_FROM_STAGES", problem.num_stages)
    assert asks_groups() and not asks_groups(groups=False)


def test_first_unit_kicks_split_every_first_microbatch_at_once() -> None:
    """Each partition gene's kick splits the first microbatch of every stage that can
    (two units or more, a free microbatch) into one unit and the rest, units kept; a
    backward split shifts the stage's leads; the last kick is both together."""
    forward = np.array([[3, 2, 0], [1, 4, 0], [2, 1, 1]], dtype=np.int32)
    backward = np.array([[5, 0, 0], [2, 3, 0], [4, 1, 0]], dtype=np.int32)
    lead = np.array([[2, 0, 0], [3, 1, 0], [1, 0, 0]], dtype=np.int32)
    stacked = np.stack([forward, backward, lead])
    kicks = first_unit_kicks(stacked, (0, 1))
    assert len(kicks) == 3 and all(k.shape == stacked.shape for k in kicks)
    split_forward, split_backward, both = kicks
    assert split_forward[0].tolist() == [[1, 2, 2], [1, 4, 0], [2, 1, 1]]  # 1 unit / full: kept
    assert (split_forward[1:] == stacked[1:]).all()
    assert split_backward[1].tolist() == [[1, 4, 0], [1, 1, 3], [1, 3, 1]]
    assert split_backward[2].tolist() == [[2, 2, 0], [3, 3, 1], [1, 1, 0]]
    assert (split_backward[0] == forward).all()
    assert (both[0] == split_forward[0]).all() and (both[1:] == split_backward[1:]).all()
    assert (np.stack(kicks)[:, :2].sum(axis=-1) == stacked[:2].sum(axis=-1)).all()
    alone = first_unit_kicks(stacked, (0,))  # mirrored: the forward row only
    assert len(alone) == 1 and (alone[0] == split_forward).all()
    assert first_unit_kicks(both, (0, 1)) == []  # nothing left to split
    one_wide = np.stack([forward[:, :1], backward[:, :1], lead[:, :1]])
    assert first_unit_kicks(one_wide, (0, 1)) == []  # --max-microbatches 1: no free one


#: The landed search's plan for synth problem 11 (8 stages) within 1F1B's memory (seed 0,
#: 1000 generations): 357.67 ms, a local optimum of single stages' moves.
S11_FORWARD = [
    [16, 16, 16, 24, 24, 24, 24, 8, 16, 24, 48, 16],
    [16, 32, 24, 24, 24, 24, 8, 16, 24, 40, 8, 16],
    [16, 32, 24, 24, 24, 24, 8, 16, 24, 16, 24, 24],
    [16, 32, 24, 24, 24, 24, 8, 16, 32, 8, 32, 16],
    [16, 32, 24, 24, 24, 24, 8, 16, 24, 16, 48],
    [16, 32, 24, 24, 24, 16, 8, 8, 24, 16, 16, 32, 16],
    [16, 32, 24, 24, 32, 16, 8, 16, 24, 48, 16],
    [16, 32, 24, 24, 24, 24, 40, 8, 24, 24, 8, 8],
]
S11_BACKWARD = [
    [8, 24, 64, 8, 24, 32, 32, 32, 32],
    [8, 24, 64, 32, 32, 32, 32, 32],
    [72, 24, 32, 32, 32, 32, 32],
    [16, 32, 88, 88, 32],
    [16, 32, 48, 24, 16, 8, 24, 32, 8, 8, 24, 16],
    [16, 32, 24, 24, 24, 16, 56, 16, 32, 16],
    [16, 32, 24, 24, 24, 24, 40, 8, 24, 24, 8, 8],
    [16, 32, 24, 24, 24, 24, 40, 8, 24, 24, 8, 8],
]
S11_ORDER = [
    "FFFFFFFFFFFFBBBBBBBBB",
    "FFFFFFFFFFFFBBBBBBBB",
    "FFFFFFFFFFFFBBBBBBB",
    "FFFFFFFFFFFFBBBBB",
    "FFFFFFFFFBFBFBBBBBBBBBB",
    "FFFFFFFBFFBBBBBFFFFBBBB",
    "FFBFBFBFBFBFBFFFBBFBBBB",
    "FBFBFBFBFBFBFBFBFBFBFBFB",
]


def test_the_kicks_leave_a_local_optimum_of_single_stages_moves() -> None:
    """From the landed plan of s11 within 1F1B's memory (no single stage's move is faster),
    the forward kick (358.07 ms) descends to 356.43 ms: the polish without kicks keeps
    357.67 ms."""
    problem = Problem.from_dict(
        synth_problem(11, stages=8, batch_size=256, unit=8, heterogeneity=0.6)
    )
    ticked = tick_problem(problem)
    evaluator = create_evaluator(ticked, "windowed", "numba")
    space = JointSpace(evaluator, ticked.forward_caps, ticked.backward_caps, 32)
    level = one_f_one_b_level(problem, best_baselines(problem)["1f1b"])
    plan = Plan(forward=S11_FORWARD, backward=S11_BACKWARD, order=S11_ORDER)
    start = encode_plans([plan], problem, 32).repaired(space.repair)
    ticks = int(space.evaluate(start)[0][0])
    assert ticked.to_time(ticks) == pytest.approx(357.6671284)
    _, kept = joint_polish(start, ticks, level, space, kicks=False)
    individual, kicked_ticks = joint_polish(start, ticks, level, space)
    assert kept == ticks and ticked.to_time(kicked_ticks) == pytest.approx(356.4324548)
    decoded = decode_plan(
        individual.forward[0], individual.backward[0], problem, individual.codes[0]
    )
    reference = evaluate(problem, decoded)
    assert level.admits(reference.peak_held)
    assert reference.iteration_time == pytest.approx(ticked.to_time(kicked_ticks))
