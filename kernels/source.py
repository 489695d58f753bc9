"""The CUDA source texts NVRTC compiles: a ``.cu`` file with its local headers inlined.

Kept apart from the launcher so tests can compile the very same text with ``nvcc`` on a
machine without a GPU (or without CuPy).
"""

from __future__ import annotations

import re
from pathlib import Path

from tidgap.backends.gpu import device_free_memory, resident_threads
from tidgap.optimize.genome import BACKWARD_OP, FORWARD_OP, NO_OP
from tidgap.optimize.joint_operators import JOINT_MUTATIONS, MIRRORED_MUTATIONS
from tidgap.optimize.operators import MUTATIONS

KERNEL_DIR = Path(__file__).resolve().parent
_LOCAL_INCLUDE = re.compile(r'^#include "([\w.]+)"$', re.MULTILINE)


def kernel_source(name: str) -> str:
    """The text of ``kernels/NAME`` with every ``#include "local.cuh"`` replaced, recursively,
    by that header's text (include guards keep repeated headers harmless)."""
    text = (KERNEL_DIR / name).read_text(encoding="utf-8")
    return _LOCAL_INCLUDE.sub(lambda match: kernel_source(match.group(1)), text)


def scratch_width(width: int) -> int:
    """The compile-time scratch size (``TIDGAP_MAX_K``) for chromosomes of ``width``:
    a power of two, at least 16."""
    return max(16, 1 << (max(width, 1) - 1).bit_length())


#: The ordered-plan kernels ``CudaOrderedEnds`` can launch: a thread per individual
#: (``windowed_evaluate.cu``) in blocks of 128 threads (``thread``) or of one warp
#: (``thread-warp``: a few thousand individuals then spread over 4x the multiprocessors,
#: and fewer threads share each one's cache), or a lane per stage (``windowed_lanes.cu``).
ORDERED_KERNELS = ("thread", "thread-warp", "lanes")
#: What ``CudaOrderedEnds(kernel=...)`` takes: a kernel of :data:`ORDERED_KERNELS`, or
#: ``"auto"`` (the fastest, timed on the device).
KERNEL_CHOICES = ("auto", *ORDERED_KERNELS)
#: Lanes of a warp (the lane kernel's block, ``windowed_lanes.cu``).
WARP = 32
#: int32 cursors per stage in ``windowed_sim.cuh`` (``TIDGAP_CURSORS``).
CURSORS = 7


#: CUDA's most local memory per thread, in bytes (every compute capability since 2.0).
LOCAL_MEMORY_LIMIT = 512 * 1024


def thread_scratch_bytes(stages: int, width: int) -> int:
    """Local memory of one thread of ``windowed_evaluate.cu`` (the thread kernels) for
    chromosomes of ``stages`` stages and width ``width``, in bytes: its ``arrivals`` int64
    and ``sizes`` int32 arrays at the compile-time sizes the launcher sets
    (:func:`scratch_width` of each; ``nvcc -Xptxas -v`` reports this stack frame)."""
    padded, row = scratch_width(stages), 2 * (scratch_width(width) + 1)
    return 8 * padded * (row + 1) + 4 * padded * (row + CURSORS)


#: What the CUDA driver adds to each thread's local memory (a system-call stack) and the
#: bytes it rounds that up to, when it sizes a context's local memory: for every thread the
#: device holds at once, whatever a launch asks (NVIDIA's developer forums; a launch whose
#: local memory does not fit fails with an out-of-memory error).
LOCAL_MEMORY_EXTRA = 512
LOCAL_MEMORY_GRANULE = 256
#: The most of a device's free memory the thread kernels' local memory may take: the
#: search's populations and tables need the rest.
LOCAL_MEMORY_SHARE = 0.5


def context_local_memory(scratch: int, threads: int) -> int:
    """The bytes a CUDA context reserves to give each of ``threads`` resident threads
    ``scratch`` bytes of local memory."""
    per_thread = scratch + LOCAL_MEMORY_EXTRA
    return -(-per_thread // LOCAL_MEMORY_GRANULE) * LOCAL_MEMORY_GRANULE * threads


def scratch_refusal(stages: int, width: int) -> str | None:
    """``None`` where a thread of the thread kernels holds chromosomes of ``stages`` stages
    and width ``width`` (CUDA's limit per thread), else why not, in one line."""
    needed = thread_scratch_bytes(stages, width)
    if needed <= LOCAL_MEMORY_LIMIT:
        return None
    return (
        f"the GPU's ordered-plan kernel needs {needed // 1024} KiB of scratch per individual "
        f"for {stages} stages of up to {width} microbatches, over CUDA's "
        f"{LOCAL_MEMORY_LIMIT // 1024} KiB per thread"
    )


def ordered_refusal(stages: int, width: int) -> str | None:
    """``None`` where the thread kernels hold chromosomes of ``stages`` stages and width
    ``width`` (the lane kernel never holds more) on the current device, else why not, in
    one line: over CUDA's limit per thread (:func:`scratch_refusal`), or where the local
    memory CUDA would reserve for every resident thread (:func:`context_local_memory`)
    exceeds :data:`LOCAL_MEMORY_SHARE` of the device's free memory (not checked where
    CuPy cannot say)."""
    refusal = scratch_refusal(stages, width)
    if refusal is not None:
        return refusal
    threads, free = resident_threads(), device_free_memory()
    if threads is None or free is None:
        return None
    needed = thread_scratch_bytes(stages, width)
    reserved = context_local_memory(needed, threads)
    if reserved <= LOCAL_MEMORY_SHARE * free:
        return None
    return (
        f"the GPU's ordered-plan kernel needs {needed // 1024} KiB of scratch per individual "
        f"for {stages} stages of up to {width} microbatches, which CUDA reserves for each "
        f"of the device's {threads} resident threads: {reserved / 2**30:.1f} GiB, over "
        f"{LOCAL_MEMORY_SHARE:.0%} of its {free / 2**30:.1f} GiB free"
    )


def lane_group(stages: int) -> int:
    """Lanes per individual in ``windowed_lanes.cu``: the least power of two >= ``stages``."""
    return 1 << (max(stages, 1) - 1).bit_length()


def lane_scratch_bytes(stages: int, width: int) -> int:
    """Shared memory of one warp of ``windowed_lanes.cu`` (``32 / lane_group`` individuals
    of ``stages`` stages and chromosome width ``width``), in bytes: per individual
    ``TIDGAP_LANE_WORDS`` int64 words (``windowed_sim.cuh``'s scratch plus two snapshot
    counts per stage); 0 where ``stages > 32``."""
    row = 2 * (width + 1)
    arrivals = stages * (row + 1)
    sizes = stages * (row + CURSORS) + 2 * stages
    return WARP // lane_group(stages) * 8 * (arrivals + (sizes + 1) // 2)


def operation_defines() -> tuple[str, ...]:
    """The numbering the CPU code uses, as ``-D`` defines every compile of the kernels passes:
    ``-DTIDGAP_OP_<NAME>=i`` for each mutation of :data:`tidgap.optimize.operators.MUTATIONS`
    and ``-DTIDGAP_JOINT_<NAME>=i`` for each of
    :data:`tidgap.optimize.joint_operators.JOINT_MUTATIONS` (``i`` its position in the
    registry, the number the operators draw; ``breed.cuh`` and ``joint_breed.cuh`` test them
    by name), ``-DTIDGAP_MIRRORED_MUTATIONS=<mask>ULL`` (bit ``i`` set for each position ``i``
    in :data:`~tidgap.optimize.joint_operators.MIRRORED_MUTATIONS`), then the op codes of
    :mod:`tidgap.optimize.genome`."""
    return (
        *(f"-DTIDGAP_OP_{name.upper()}={i}" for i, name in enumerate(MUTATIONS)),
        *(f"-DTIDGAP_JOINT_{name.upper()}={i}" for i, name in enumerate(JOINT_MUTATIONS)),
        f"-DTIDGAP_MIRRORED_MUTATIONS={sum(1 << i for i in MIRRORED_MUTATIONS)}ULL",
        f"-DTIDGAP_FORWARD_OP={FORWARD_OP}",
        f"-DTIDGAP_BACKWARD_OP={BACKWARD_OP}",
        f"-DTIDGAP_NO_OP={NO_OP}",
    )
