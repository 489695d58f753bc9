"""Keep freed memory in the process, so that an op's tensors do not fault in anew.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc gives a large block back
to the system when it is freed (``munmap``, or a trim of the heap's top) and the next
allocation faults every page in again, zeroed. How often that happens depends on the order
of allocations and frees, so the same ops cost more in one schedule than in another: on the
2-core development machine a 1F1B(8) iteration of the fidelity benchmark's GPT took about
6,200 minor page faults against GPipe(8)'s 2,400, and 1F1B ran 8-10% slower (median over
alternating runs) where the model prices both alike. With freed memory kept, neither takes
faults after the first iteration and the gap fell to 1-3% (``docs/measurements.md``).

``tidgap profile`` and ``tidgap run``'s workers (so ``tidgap calibrate`` too) do this
before they measure. A process then keeps its peak for its life instead of lending memory
back between ops (a stage's peak is what it must have anyway). Blocks over 32 MiB (glibc's
largest mmap threshold) are still mapped and unmapped each time. Elsewhere (another C
library, no ``mallopt``) nothing changes.
"""

from __future__ import annotations

import ctypes

#: How a profile's ``source.timing.allocator`` says that freed memory was kept.
ALLOCATOR_KEPT = "glibc's malloc kept freed memory (no munmap, no trim), as in tidgap run's workers"
#: ``mallopt`` parameters (glibc's ``malloc.h``).
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
#: Blocks below this come from the heap, not ``mmap``: glibc's largest threshold (bytes).
MMAP_THRESHOLD = 32 * 2**20
#: Free memory at the heap's top that glibc keeps rather than trims (bytes): the most
#: ``mallopt`` takes (an ``int``).
TRIM_THRESHOLD = 2**31 - 1
#: What the heap grows by beyond each request (bytes): fewer, larger extensions.
TOP_PAD = 256 * 2**20


def keep_freed_memory() -> bool:
    """Set glibc's ``malloc`` of this process to keep what is freed; whether it took."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = {M_MMAP_THRESHOLD: MMAP_THRESHOLD, M_TRIM_THRESHOLD: TRIM_THRESHOLD}
    settings[M_TOP_PAD] = TOP_PAD
    return all(mallopt(parameter, value) == 1 for parameter, value in settings.items())
