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


def to_host(array: Any) -> np.ndarray:
    """A NumPy copy (or view) of a NumPy or CuPy array."""
    return array.get() if hasattr(array, "get") else np.asarray(array)
