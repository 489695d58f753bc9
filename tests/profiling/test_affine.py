"""The line a profile records of bytes measured at several chunk sizes
(:mod:`tidgap.profiling.affine`) and where :func:`~tidgap.profiling.measure.growth` checks
its two-point line."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from tidgap.profiling.affine import collinear, line_above
from tidgap.profiling.measure import MOST_SIZES, grows_in_steps, growth, probe_sizes, swept_sizes


def above(counts: dict[int, int], line: tuple[int, int]) -> bool:
    per_sample, per_chunk = line
    return all(per_chunk + n * per_sample >= f for n, f in counts.items())


def test_an_affine_count_gives_its_own_line() -> None:
    counts = {n: 300 + 40 * n for n in range(1, 9)}
    assert line_above(counts) == (40, 300)


def test_steps_give_the_least_line_above_every_size() -> None:
    """oneDNN's LSTM workspace as measured on the development machine: 640 B a sample,
    and 25 KB more from 7 samples on."""
    counts = {n: 57344 + 640 * n + 24576 * (n >= 7) for n in range(1, 9)}
    line = line_above(counts)
    assert above(counts, line)
    assert line == (4736, 53248)  # through 1 and 7 samples: no line above has less sum


@pytest.mark.parametrize("seed", range(20))
def test_random_counts_are_below_the_line_and_it_touches_them(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = sorted(set(rng.integers(1, 64, 10).tolist()))
    counts = {
        int(n): int(f) for n, f in zip(sizes, rng.integers(0, 10_000, len(sizes)), strict=True)
    }
    per_sample, per_chunk = line_above(counts)
    assert per_sample >= 0 and per_chunk >= 0 and above(counts, (per_sample, per_chunk))
    slack = [per_chunk + n * per_sample - f for n, f in counts.items()]
    assert min(slack) == 0 or per_chunk == 0  # it touches a point, or the origin
    # no line of a slope one less or one more has a smaller sum over the sizes
    total = sum(counts)
    for slope in (per_sample - 1, per_sample + 1):
        if slope >= 0:
            chunk = max(0, max(f - n * slope for n, f in counts.items()))
            mine = len(counts) * per_chunk + total * per_sample
            assert len(counts) * chunk + total * slope >= mine


def test_probe_sizes_lie_between_the_two_measured() -> None:
    assert probe_sizes(1, 8) == [4, 7]
    assert probe_sizes(2, 16) == [8, 14]
    assert probe_sizes(1, 2) == []
    assert probe_sizes(4, 8) == []


def test_collinear() -> None:
    assert collinear([(1, 5), (8, 40), (4, 20)])
    assert collinear([(1, 5), (3, 0)]) and collinear([])
    assert not collinear([(1, 5), (4, 20), (8, 41)])


def counting(formula: Callable[[int], int]) -> tuple[list[int], Callable[[torch.Tensor], int]]:
    """``formula`` of ``n`` as a count of ``(n, ...)`` tensors, and the ``n`` it is asked."""
    seen: list[int] = []

    def count(x: torch.Tensor) -> int:
        seen.append(x.shape[0])
        return formula(x.shape[0])

    return seen, count


def test_growth_measures_every_size_only_where_the_sizes_measured_are_not_on_a_line() -> None:
    """An affine count is measured at the unit, the probes and the batch: its own line.
    One in steps between the probes, every multiple of the unit; so is any with
    ``sweep``. One off the line at the unit only (a last stage's GRU: its transpose
    of one sample copies nothing) is not, and its line holds every other size exactly."""
    given = torch.zeros(8, 3)
    seen, affine = counting(lambda n: 100 + 12 * n)
    assert growth(affine, given, first=False) == (12, 100)
    assert sorted(seen) == [1, 4, 7, 8]
    seen, stepped = counting(lambda n: 100 + 12 * n + 500 * (n >= 7))
    line = growth(stepped, given, first=False)
    assert sorted(seen) == list(range(1, 9))
    assert above({n: 100 + 12 * n + 500 * (n >= 7) for n in range(1, 9)}, line)
    seen, affine = counting(lambda n: 100 + 12 * n)
    assert growth(affine, given, first=False, sweep=True) == (12, 100)
    assert sorted(seen) == list(range(1, 9))
    seen, gru = counting(lambda n: 4 + 1200 * n - 128 * (n == 1))
    assert growth(gru, given, first=False) == (1200, 4)  # before: (1201, 0), low at 2 and 3
    assert sorted(seen) == [1, 4, 7, 8]


def test_stages_with_an_lstm_are_measured_at_every_size() -> None:
    assert grows_in_steps(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LSTM(2, 2)))
    assert not grows_in_steps(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.GRU(2, 2)))


def test_swept_sizes_are_every_multiple_or_as_many_spread_evenly() -> None:
    assert swept_sizes(2, 16) == [2, 4, 6, 8, 10, 12, 14, 16]
    many = swept_sizes(1, 512)
    assert len(many) == MOST_SIZES and many[0] == 1 and many[-1] == 512
    gaps = [b - a for a, b in zip(many, many[1:], strict=False)]
    assert max(gaps) - min(gaps) <= 1


def test_a_deep_sweep_measures_as_many_sizes_spread_evenly() -> None:
    """A count in steps at 128 samples: measured at :data:`MOST_SIZES` sizes and the
    probes, not 128, and the line is above it at each of them."""

    def stepped(n: int) -> int:
        return 1000 + 10 * n + 3000 * (n % 40 > 30) + 500 * (n >= 100)

    seen, count = counting(stepped)
    line = growth(count, torch.zeros(128, 2), first=False, sweep=True)
    assert sorted(set(seen)) == sorted({*swept_sizes(1, 128), *probe_sizes(1, 128)})
    assert len(set(seen)) <= MOST_SIZES + 2
    assert above({n: stepped(n) for n in seen}, line)
