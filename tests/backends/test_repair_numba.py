"""The compiled repair (the numba backend's) equals the ``xp`` one exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tidgap.backends import BACKENDS, load
from tidgap.optimize.ga import random_chromosomes
from tidgap.optimize.order_genes import canonical
from tidgap.optimize.rng import CounterRng


@pytest.mark.parametrize(
    ("stages", "width", "units", "cap"),
    [(1, 5, 5, 5), (2, 8, 8, 3), (3, 8, 8, 8), (6, 12, 12, 4), (8, 64, 256, 64)],
)
def test_the_numba_repair_equals_canonical(stages: int, width: int, units: int, cap: int) -> None:
    repair = load(BACKENDS["numba"].repair or "")
    rng = CounterRng(stages * 7 + width)
    caps = np.full(stages, cap)
    forward = random_chromosomes(300, stages, width, units, caps, rng)
    backward = random_chromosomes(300, stages, width, units, caps, rng)
    lead = np.asarray(rng.integers(-4, stages + 4, (300, stages, width)), dtype=np.int32)
    expected, got = canonical(forward, backward, lead), repair(forward, backward, lead)
    for want, have in zip(expected, got, strict=True):
        assert have.dtype == want.dtype
        np.testing.assert_array_equal(have, want)


def test_every_backend_names_a_repair_that_loads_or_none() -> None:
    for record in BACKENDS.values():
        assert record.repair is None or callable(load(record.repair))
