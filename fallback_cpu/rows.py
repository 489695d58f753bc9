"""Rows copied element by element in compiled loops (Numba).

Assigning one array to a slice of another (``dst[:] = src``) makes Numba compile its shape
check's error message, string code included: about 2 s of each process's compile on a
first run, once per process, for what these loops do with none.
"""

from __future__ import annotations

from numba import njit

from tidgap.fallback_cpu.numba_cache import CACHING


@njit(cache=CACHING, nogil=True)
def copy_row(dst, src):  # pragma: no cover - compiled
    """``dst[k] = src[k]`` for every ``k`` of ``src`` ``(K,)``."""
    for k in range(src.shape[0]):
        dst[k] = src[k]


@njit(cache=CACHING, nogil=True)
def copy_rows(dst, src):  # pragma: no cover - compiled
    """``dst[s, k] = src[s, k]`` for every ``(s, k)`` of ``src`` ``(S, K)``."""
    for s in range(src.shape[0]):
        copy_row(dst[s], src[s])
