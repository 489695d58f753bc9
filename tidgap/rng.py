"""A counter-based random generator written once over ``xp`` (NumPy or CuPy).

Each draw hashes ``(seed, draw number, element index)`` with SplitMix64, so the same
seed gives the same numbers on every backend and device, in any evaluation order.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: Any) -> Any:
    """The SplitMix64 finaliser, elementwise on a ``uint64`` array (wrapping arithmetic)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


class CounterRng:
    """Deterministic streams: draw ``n`` of a generator seeded ``seed`` is a pure function."""

    def __init__(self, seed: int, xp: ModuleType = np):
        self.xp = xp
        self.key = int(splitmix64(np.array([seed % 2**64], dtype=np.uint64))[0])
        self.draws = 0

    def bits(self, shape: tuple[int, ...]) -> Any:
        """Uniform ``uint64`` words of ``shape``; advances the draw counter."""
        xp = self.xp
        stream = splitmix64(
            np.array([self.key ^ (self.draws * 0xD1B54A32D192ED03 % 2**64)], dtype=np.uint64)
        )[0]
        self.draws += 1
        count = int(np.prod(shape, dtype=np.int64))
        counter = xp.arange(count, dtype=xp.uint64) + xp.uint64(stream)
        return splitmix64(counter).reshape(shape)

    def random(self, shape: tuple[int, ...]) -> Any:
        """Uniform ``float64`` in ``[0, 1)`` of ``shape`` (53 random bits each)."""
        return (self.bits(shape) >> np.uint64(11)).astype(self.xp.float64) * 2.0**-53

    def integers(self, low: Any, high: Any, shape: tuple[int, ...]) -> Any:
        """Uniform ``int64`` in ``[low, high)`` (bounds broadcast; ``high > low``)."""
        xp = self.xp
        span = xp.asarray(high, dtype=xp.int64) - xp.asarray(low, dtype=xp.int64)
        draw = xp.floor(self.random(shape) * span).astype(xp.int64)
        return xp.asarray(low, dtype=xp.int64) + xp.minimum(draw, span - 1)
