"""The schedule IR: per stage, the order in which it runs its forwards and backwards.

An :class:`Order` holds one string of letters ``F`` / ``B`` per stage (model.md, "Ordered
plans"): the stage runs forward 1, 2, .. at its ``F``s and backward 1, 2, .. at its ``B``s.
The same order prints and parses as actions in the PyTorch style, ``0F3`` being stage 0's
forward of microbatch 3 (0-based). Validation (rules ``count``, 1 and 2, in model.md's
precedence), the window rule and the reference repair work on the letters and the plan's
sizes alone; no time function is involved.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

#: The two operations of an order: a forward and a backward.
OPERATIONS = ("F", "B")
_ACTION = re.compile(r"(\d+)([FB])(\d+)")


@dataclass(frozen=True)
class Action:
    """One operation: ``stage`` (0-based) runs ``op`` (``"F"`` or ``"B"``) on its
    ``microbatch`` (0-based, within that stage and direction)."""

    stage: int
    op: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.op}{self.microbatch}"

    @classmethod
    def parse(cls, text: str) -> Action:
        """``"0F3"`` -> ``Action(0, "F", 3)``; raises ``ValueError`` on anything else."""
        match = _ACTION.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not an action such as 0F3 (stage, F or B, microbatch)")
        return cls(int(match[1]), match[2], int(match[3]))


@dataclass(frozen=True)
class Order:
    """``stages[s]``: stage ``s``'s letters, ``F`` and ``B``, in the order it runs them."""

    stages: tuple[str, ...]

    @classmethod
    def of(cls, letters: Sequence[str]) -> Order:
        """An order from per-stage letter strings (shape only; see :func:`first_violation`)."""
        return cls(tuple(letters))

    def actions(self, s: int) -> list[Action]:
        """Stage ``s``'s operations, microbatches numbered from 0 in each direction."""
        counts = {"F": 0, "B": 0}
        actions = []
        for op in self.stages[s]:
            actions.append(Action(s, op, counts[op]))
            counts[op] += 1
        return actions

    def format_actions(self) -> list[str]:
        """One line per stage: its actions, ``0F0 0F1 0B0 ...``."""
        return [" ".join(map(str, self.actions(s))) for s in range(len(self.stages))]

    @classmethod
    def parse_actions(cls, lines: Sequence[str]) -> Order:
        """The inverse of :meth:`format_actions`: line ``s`` holds stage ``s``'s actions, each
        direction's microbatches in order 0, 1, ..; raises ``ValueError`` naming the action
        that breaks this."""
        letters = []
        for s, line in enumerate(lines):
            counts = {"F": 0, "B": 0}
            for word in line.split():
                action = Action.parse(word)
                if action.stage != s or action.microbatch != counts[action.op]:
                    expected = Action(s, action.op, counts[action.op])
                    raise ValueError(f"line {s}: {word} where {expected} comes next")
                counts[action.op] += 1
            letters.append("".join(word[len(str(s))] for word in line.split()))
        return cls(tuple(letters))


@dataclass(frozen=True)
class Violation:
    """Why an order is invalid: the ``stage``, the ``position`` of the offending ``B`` in its
    letters (``None`` for ``count``), the ``rule`` (``"count"``, ``1`` or ``2``), and a
    sentence that says what is wrong."""

    stage: int
    position: int | None
    rule: int | str
    reason: str

    def message(self) -> str:
        """The error line's text after the field: ``position 3: rule 2 (no deadlock): ...``."""
        rule = {"count": "rule count", 1: "rule 1 (own samples)", 2: "rule 2 (no deadlock)"}
        where = "" if self.position is None else f"position {self.position}: "
        return f"{where}breaks {rule[self.rule]}: {self.reason}"


def prefix_sums(sizes: Sequence[int]) -> list[int]:
    """``P[0] = 0, P[k] = sizes[0] + ... + sizes[k-1]``."""
    return [0, *accumulate(sizes)]


def forwards_before(letters: str) -> list[int]:
    """``a[k]`` for ``k = 0..N``: the ``F``s before the ``k``-th ``B`` (``a[0] = 0``)."""
    before, count = [0], 0
    for op in letters:
        if op == "F":
            count += 1
        else:
            before.append(count)
    return before


def holder(prefix: Sequence[int], sample: int) -> int:
    """``min{i : prefix[i] >= sample}``: the (1-based) microbatch that holds ``sample``."""
    return bisect_left(prefix, sample)


def holders(prefix: Sequence[int], samples: Sequence[int]) -> list[int]:
    """:func:`holder` of each of ``samples`` (``(n,)``): ``(n,)``."""
    return [bisect_left(prefix, sample) for sample in samples]


def count_violation(letters: str, forwards: int, backwards: int, s: int) -> Violation | None:
    """Rule ``count``: exactly ``forwards`` ``F``s, ``backwards`` ``B``s and nothing else."""
    others = sorted(set(letters) - set(OPERATIONS))
    if others:
        shown = ", ".join(repr(c) for c in others)
        return Violation(s, None, "count", f"letters other than F and B: {shown}")
    f, b = letters.count("F"), letters.count("B")
    if (f, b) != (forwards, backwards):
        return Violation(
            s,
            None,
            "count",
            f"{f} F and {b} B; forward[{s}] has {forwards} microbatches, "
            f"backward[{s}] has {backwards}",
        )
    return None


def first_violation(
    order: Order, forward: Sequence[Sequence[int]], backward: Sequence[Sequence[int]]
) -> Violation | None:
    """The violation model.md reports for ``order`` over the sizes (samples) ``forward[s]``,
    ``backward[s]``, or ``None`` if the order is valid: ``count`` on any stage (lowest
    first); then stage by stage from 0, each ``B`` from left to right, rule 1 before rule 2.
    """
    S = len(order.stages)
    for s, letters in enumerate(order.stages):
        violation = count_violation(letters, len(forward[s]), len(backward[s]), s)
        if violation is not None:
            return violation
    P = [prefix_sums(sizes) for sizes in forward]
    Q = [prefix_sums(sizes) for sizes in backward]
    a = [forwards_before(letters) for letters in order.stages]
    for s, letters in enumerate(order.stages):
        positions = [p for p, op in enumerate(letters) if op == "B"]
        for k, position in enumerate(positions, start=1):
            covered = P[s][a[s][k]]
            if covered < Q[s][k]:
                reason = (
                    f"backward {k} needs samples up to {Q[s][k]}, the forwards before it "
                    f"cover {covered}"
                )
                return Violation(s, position, 1, reason)
            if s < S - 1:
                i = holder(Q[s + 1], Q[s][k])
                needed = P[s + 1][a[s + 1][i]]
                if covered < needed:
                    reason = (
                        f"backward {k} waits for stage {s + 1}'s backward {i}, which runs "
                        f"after forwards up to sample {needed}; the forwards before it "
                        f"cover {covered}"
                    )
                    return Violation(s, position, 2, reason)
    return None


def letters_from(before: Sequence[int], forwards: int) -> str:
    """The letters whose ``k``-th ``B`` follows ``before[k]`` ``F``s (``before[0]`` unused,
    non-decreasing), then the remaining ``F``s."""
    out, done = [], 0
    for count in before[1:]:
        out.append("F" * (count - done) + "B")
        done = count
    return "".join(out) + "F" * (forwards - done)


def repair(
    order: Order, forward: Sequence[Sequence[int]], backward: Sequence[Sequence[int]]
) -> Order:
    """model.md's reference repair of an order that passes ``count``: for ``s = S-1`` down
    to 0, raise each ``a[s][k]`` (``k`` ascending) to the least value that satisfies rules 1
    and 2 and is at least ``a[s][k-1]``. A valid order comes back unchanged."""
    S = len(order.stages)
    P = [prefix_sums(sizes) for sizes in forward]
    Q = [prefix_sums(sizes) for sizes in backward]
    a: list[list[int]] = [[] for _ in range(S)]
    for s in reversed(range(S)):
        before = forwards_before(order.stages[s])
        for k in range(1, len(before)):
            target = Q[s][k]
            if s < S - 1:
                target = max(target, P[s + 1][a[s + 1][holder(Q[s + 1], Q[s][k])]])
            before[k] = max(before[k], before[k - 1], holder(P[s], target))
        a[s] = before
    return Order(tuple(letters_from(a[s], len(forward[s])) for s in range(S)))


def flush_order(forward: Sequence[Sequence[int]], backward: Sequence[Sequence[int]]) -> Order:
    """Every stage's forwards, then its backwards: ``F^M B^N`` (a flush plan's order)."""
    return Order(tuple("F" * len(f) + "B" * len(b) for f, b in zip(forward, backward, strict=True)))


def alternating_letters(m: int, warmup: int) -> str:
    """``m`` forwards and ``m`` backwards: ``warmup`` (at most ``m``) forwards, then one
    forward and one backward in turn until the forwards are done, then the rest (``warmup
    + 1`` microbatches in flight at most)."""
    return "F" * warmup + "FB" * (m - warmup) + "B" * warmup


def one_f_one_b_letters(num_stages: int, s: int, m: int) -> str:
    """Stage ``s``'s 1F1B(m) letters: :func:`alternating_letters` after ``w = min(S-s-1,
    m)`` warm-up forwards."""
    return alternating_letters(m, min(num_stages - s - 1, m))


def one_f_one_b_order(num_stages: int, m: int) -> Order:
    """1F1B(m) on every stage (model.md, Baselines)."""
    return Order(tuple(one_f_one_b_letters(num_stages, s, m) for s in range(num_stages)))


def window_letters(forward: Sequence[int], backward: Sequence[int], window: int) -> str:
    """The letters the window rule gives one stage (model.md, Windows): a forward whenever
    the next backward is not yet covered or the held samples plus the next forward fit in
    ``window`` (samples); otherwise the next backward."""
    P, Q = prefix_sums(forward), prefix_sums(backward)
    M, N = len(forward), len(backward)
    i = j = 0
    out = []
    while i < M or j < N:
        held = P[i] - Q[j]
        covered = j < N and P[i] >= Q[j + 1]
        if i < M and (not covered or held + forward[i] <= window):
            out.append("F")
            i += 1
        else:
            out.append("B")
            j += 1
    return "".join(out)


def window_order(
    forward: Sequence[Sequence[int]], backward: Sequence[Sequence[int]], windows: Sequence[int]
) -> Order:
    """The order that per-stage windows (samples) stand for, each distinct stage's letters
    made once (a deep pipeline's stages are mostly alike)."""
    keys = [(tuple(f), tuple(b), w) for f, b, w in zip(forward, backward, windows, strict=True)]
    letters = {key: window_letters(*key) for key in dict.fromkeys(keys)}
    return Order(tuple(letters[key] for key in keys))


def peak_held(
    order: Order, forward: Sequence[Sequence[int]], backward: Sequence[Sequence[int]]
) -> list[int]:
    """``peak_held[s]`` (samples): the most stage ``s`` holds after any of its forwards,
    ``P[s][k] - Q[s][j]`` with ``j`` the backwards run before forward ``k`` (model.md,
    Memory)."""
    peaks = []
    for letters, f, b in zip(order.stages, forward, backward, strict=True):
        P, Q = prefix_sums(f), prefix_sums(b)
        i = j = peak = 0
        for op in letters:
            if op == "F":
                i += 1
                peak = max(peak, P[i] - Q[j])
            else:
                j += 1
        peaks.append(peak)
    return peaks
