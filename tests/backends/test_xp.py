"""The array-module helpers: the running maximum that CuPy (which has no
``ufunc.accumulate``) computes by doubling equals NumPy's ``maximum.accumulate``."""

from __future__ import annotations

import numpy as np
import pytest

from tidgap.backends.xp import doubling_running_max, running_max


@pytest.mark.parametrize("length", [1, 2, 3, 7, 8, 33])
def test_doubling_running_max_equals_accumulate(length: int) -> None:
    values = np.random.default_rng(length).integers(-50, 50, size=(4, 3, length))
    expected = np.maximum.accumulate(values, axis=-1)
    got = doubling_running_max(values)
    assert got.dtype == values.dtype
    assert np.array_equal(got, expected)
    assert np.array_equal(running_max(values), expected)


def test_doubling_running_max_leaves_its_input() -> None:
    values = np.array([[3, 1, 4, 1, 5, 9, 2, 6]])
    kept = values.copy()
    doubling_running_max(values)
    assert np.array_equal(values, kept)
