"""The CUDA source text NVRTC compiles: ``evaluate.cu`` with ``chain.cuh`` inlined.

Kept apart from the launcher so tests can compile the very same text with ``nvcc`` on a
machine without a GPU (or without CuPy).
"""

from __future__ import annotations

from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent
KERNEL_FILES = ("chain.cuh", "evaluate.cu")


def kernel_source() -> str:
    """``evaluate.cu`` with its ``#include "chain.cuh"`` replaced by the header's text."""
    header = (KERNEL_DIR / "chain.cuh").read_text(encoding="utf-8")
    source = (KERNEL_DIR / "evaluate.cu").read_text(encoding="utf-8")
    return source.replace('#include "chain.cuh"', header)


def scratch_width(width: int) -> int:
    """The compile-time scratch size (``TIDGAP_MAX_K``) for chromosomes of ``width``:
    a power of two, at least 16."""
    return max(16, 1 << (max(width, 1) - 1).bit_length())
