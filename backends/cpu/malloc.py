"""Keep freed array memory in the process instead of handing it back to the OS every op.

Every numpy kernel of a training step allocates a few arrays of 0.1–10 MB and frees them
a moment later. glibc's defaults then trim the top of the heap (or unmap the block) on
nearly every free, so the next op page-faults the same memory back in: measured on a
2-core VM, that was 6 of the 7 ms of one ``gelu_backward`` over (1024, 512) floats, and a
quarter of a small GPT training step. A fixed mmap threshold (32 MiB, glibc's own
dynamic maximum) and a high trim threshold make freed blocks reusable at once.

This is a process-wide glibc setting, applied once when the CPU backend is first
instantiated, only where glibc is the C library. ``RIFTCO_CPU_MALLOC=default`` leaves the
allocator alone (a host application that tunes malloc itself).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # blocks larger than this are still mmapped (returned on free)
TRIM_THRESHOLD = 256 << 20  # free heap top kept before trimming

_state: dict[str, str] = {}


def tune() -> str:
    """Apply the thresholds once; returns what was done (recorded by the benchmarks)."""
    if "status" in _state:
        return _state["status"]
    if os.environ.get("RIFTCO_CPU_MALLOC", "") == "default":
        status = "default (RIFTCO_CPU_MALLOC=default)"
    elif not sys.platform.startswith("linux"):
        status = f"default ({sys.platform})"
    else:
        status = _mallopt()
    _state["status"] = status
    return status


def _mallopt() -> str:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and friends: no mallopt, nothing to tune
        return "default (no mallopt)"
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    if not ok:
        return "default (mallopt refused)"
    return (
        f"glibc mmap_threshold={MMAP_THRESHOLD >> 20}MiB trim_threshold={TRIM_THRESHOLD >> 20}MiB"
    )
