"""A counter-based random generator written once over ``xp`` (NumPy or CuPy).

Draw ``n`` of a generator seeded ``seed`` is a *stream*: element ``i`` of it is
``splitmix64(stream_n + i)``. The same seed gives the same numbers on every backend and
device, in any evaluation order; a CUDA kernel handed ``stream_n`` computes element ``i``
itself (``kernels/random.cuh`` mirrors :func:`splitmix64` and :func:`uniform_int`).
"""

from __future__ import annotations

import hashlib
from types import ModuleType
from typing import Any

import numpy as np

from tidgap.backends.xp import namespace

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_STREAM_STEP = 0xD1B54A32D192ED03


def splitmix64(x: Any) -> Any:
    """The SplitMix64 finaliser, elementwise on a ``uint64`` array (wrapping arithmetic)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def uniform_int(u: Any, low: Any, high: Any) -> Any:
    """``int64`` in ``[low, high)`` from uniforms ``u`` in ``[0, 1)``: ``low + floor(u * span)``.

    Bounds broadcast and need ``high > low``; the result is clamped to ``high - 1``.
    """
    xp = namespace(u)
    low = xp.asarray(low, dtype=xp.int64)
    span = xp.asarray(high, dtype=xp.int64) - low
    draw = xp.floor(u * span).astype(xp.int64)
    return low + xp.minimum(draw, span - 1)


def seed_word(seed: int) -> int:
    """``seed`` as 64 bits: itself where it is ``0..2**64 - 1``, else a hash of its digits
    (BLAKE2b), so that two seeds a search takes (any integer of at most 100 digits) draw
    alike only by chance (``seed % 2**64`` made ``0``, ``2**64`` and ``-2**64`` one)."""
    if 0 <= seed < 2**64:
        return seed
    return int.from_bytes(hashlib.blake2b(str(seed).encode(), digest_size=8).digest(), "little")


class CounterRng:
    """Deterministic streams of uniform numbers; see the module docstring."""

    def __init__(self, seed: int, xp: ModuleType = np):
        self.xp = xp
        self.key = int(splitmix64(np.array([seed_word(seed)], dtype=np.uint64))[0])
        self.draws = 0

    def stream(self) -> int:
        """The next draw's stream key (``uint64`` as int); advances the draw counter."""
        mixed = self.key ^ (self.draws * _STREAM_STEP % 2**64)
        self.draws += 1
        return int(splitmix64(np.array([mixed], dtype=np.uint64))[0])

    def streams(self, count: int) -> np.ndarray:
        """The keys of the next ``count`` draws, ``(count,)`` uint64 on the host (what a
        kernel that draws for itself is handed)."""
        return np.array([self.stream() for _ in range(count)], dtype=np.uint64)

    def bits(self, shape: tuple[int, ...]) -> Any:
        """Uniform ``uint64`` words of ``shape``, element ``i`` = ``splitmix64(stream + i)``."""
        xp = self.xp
        stream = self.stream()
        count = int(np.prod(shape, dtype=np.int64))
        counter = xp.arange(count, dtype=xp.uint64) + xp.uint64(stream)
        return splitmix64(counter).reshape(shape)

    def random(self, shape: tuple[int, ...]) -> Any:
        """Uniform ``float64`` in ``[0, 1)`` of ``shape``: the top 53 bits times ``2**-53``."""
        return (self.bits(shape) >> np.uint64(11)).astype(self.xp.float64) * 2.0**-53

    def integers(self, low: Any, high: Any, shape: tuple[int, ...]) -> Any:
        """Uniform ``int64`` in ``[low, high)`` of ``shape`` (see :func:`uniform_int`)."""
        return uniform_int(self.random(shape), low, high)
