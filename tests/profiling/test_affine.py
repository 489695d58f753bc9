"""The line a profile records of bytes measured at several chunk sizes
(:mod:`tidgap.profiling.affine`) and where :func:`~tidgap.profiling.measure.growth` checks
its two-point line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tidgap.profiling.affine import line_above
from tidgap.profiling.measure import growth, probe_sizes


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


def test_growth_measures_every_size_only_where_the_probes_miss_the_line() -> None:
    """A count affine in the samples is measured at the two sizes and the probes; one in
    steps at every multiple of the unit."""
    given = torch.zeros(8, 3)
    seen: list[int] = []

    def affine(x: torch.Tensor) -> int:
        seen.append(x.shape[0])
        return 100 + 12 * x.shape[0]

    assert growth(affine, given, first=False) == (12, 100)
    assert sorted(seen) == [1, 4, 7, 8]
    seen.clear()

    def stepped(x: torch.Tensor) -> int:
        seen.append(x.shape[0])
        return 100 + 12 * x.shape[0] + 500 * (x.shape[0] >= 7)

    line = growth(stepped, given, first=False)
    assert sorted(seen) == list(range(1, 9))
    assert above({n: 100 + 12 * n + 500 * (n >= 7) for n in range(1, 9)}, line)
