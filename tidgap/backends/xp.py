"""One code path over NumPy and CuPy: find the array module of an array."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import numpy as np


def namespace(array: Any) -> ModuleType:
    """``cupy`` for CuPy arrays, else ``numpy`` (never imports CuPy itself)."""
    if type(array).__module__.startswith("cupy"):
        return sys.modules["cupy"]
    return np


def running_max(values: Any) -> Any:
    """The running maximum of ``values`` along the last axis (``np.maximum.accumulate``),
    for NumPy and CuPy arrays: CuPy (14) has no ``ufunc.accumulate``, so there it is
    :func:`doubling_running_max`."""
    if namespace(values) is np:
        return np.maximum.accumulate(values, axis=-1)
    return doubling_running_max(values)


def doubling_running_max(values: Any) -> Any:
    """The running maximum along the last axis (length ``L``) in ``ceil(log2 L)``
    elementwise steps over any array module: after the step of ``shift``, entry ``i`` is
    the maximum of entries ``i - 2 * shift + 1 .. i``."""
    xp = namespace(values)
    result = values.copy()
    shift = 1
    while shift < result.shape[-1]:
        result[..., shift:] = xp.maximum(result[..., shift:], result[..., :-shift].copy())
        shift *= 2
    return result


def to_host(array: Any) -> np.ndarray:
    """A NumPy copy (or view) of a NumPy or CuPy array."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


def host_copy(array: Any) -> np.ndarray:
    """A NumPy array of its own of a NumPy or CuPy array (never a view of ``array``)."""
    return array.get() if hasattr(array, "get") else np.array(array, copy=True)
