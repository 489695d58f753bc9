"""``keep_freed_memory``: freed blocks stay in the process, so they do not fault in again.

Each check runs in a child process, so that this process's ``malloc`` keeps its defaults.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

GLIBC = platform.libc_ver()[0] == "glibc"

#: Allocates, fills and frees blocks of 1-8 MiB (23 MiB) 20 times after a first round, then
#: prints the minor page faults those 20 rounds took.
CYCLES = """
import ctypes, resource, sys
from tidgap.profiling.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def cycle():
    blocks = [libc.malloc(mib * 2**20) for mib in (1, 2, 4, 8, 3, 5)]
    for block, mib in zip(blocks, (1, 2, 4, 8, 3, 5)):
        ctypes.memset(block, 1, mib * 2**20)
    for block in blocks:
        libc.free(block)
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
#: The 4 KiB pages the 20 rounds touch.
PAGES = 20 * 23 * 2**20 // 4096


def faults(mode: str) -> int:
    """The minor page faults of :data:`CYCLES` run with ``mode`` (``keep`` or ``default``)."""
    done = subprocess.run(
        [sys.executable, "-c", CYCLES, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def test_keep_freed_memory_takes_where_the_c_library_is_glibc() -> None:
    code = "from tidgap.profiling.allocator import keep_freed_memory as k; print(k())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == str(GLIBC)


@pytest.mark.skipif(not GLIBC, reason="mallopt's settings are glibc's")
def test_freed_blocks_are_reused_without_page_faults() -> None:
    assert faults("default") > PAGES // 2  # glibc's defaults give the blocks back
    assert faults("keep") < PAGES // 100
