"""glibc's malloc, told to keep the memory a step frees: every command calls
`keep_freed_memory` as it starts (`minitx.cli.launch`)."""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20
"""Blocks below this many bytes come from the heap, not from mmap: glibc's largest (64-bit)."""
TRIM_THRESHOLD = 1 << 30
"""The heap's free top goes back to the kernel only beyond this many bytes (1 GiB)."""


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks of up to 32 MB for the next allocation.

    Why: a training or beam-search step allocates and frees tensors of up to tens of MB. By
    default glibc gives such blocks back to the kernel once freed (mmap'd ones at once, the
    heap's top beyond a threshold), and the next step faults in fresh zeroed pages. On a
    2-core Xeon (docs/guides/speed.md) that cost 4-6% of an fp32 beam search, 4-8% of the
    benchmark's training step, about 1% of a training run. Both settings or none: either
    one turns glibc's adaptive thresholds off (the trim threshold alone leaves every block
    above 128 KB to mmap). The process keeps up to 1 GiB of freed heap in exchange.

    The environment does the same for any process: ``MALLOC_MMAP_THRESHOLD_=33554432
    MALLOC_TRIM_THRESHOLD_=1073741824``. Returns whether glibc took both settings (False
    on other systems and C libraries).
    """
    if not sys.platform.startswith("linux"):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the process's own C library
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and (
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    )
