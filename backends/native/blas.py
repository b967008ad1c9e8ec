"""numpy's own OpenBLAS, reached directly so that matmul runs on our thread team.

Why: OpenBLAS's worker threads spin while they wait. On a machine with more runnable
threads than cores (a shared CI box, or just our OpenMP team next to them) a 2-thread
sgemm then regularly stalls for whole scheduler ticks: measured on the 2-core box, the
numpy backend's GPT step was bimodal, 57 ms or 390 ms. Calling the very same sgemm
single-threaded from each thread of our (sleeping-when-idle) OpenMP team keeps the BLAS
kernels and removes the spinning.

Only numpy wheels that bundle scipy-openblas (numpy >= 2) expose the symbols used here;
anywhere else :func:`find` returns None and the backend keeps numpy's matmul.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from typing import Any


@dataclass
class Blas:
    sgemm: int
    dgemm: int
    set_threads: Any
    get_threads: Any


def _loaded_openblas() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return []
    return sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", maps)))


def find() -> Blas | None:
    """The cblas gemm entry points (as addresses) and thread controls, or None."""
    import numpy  # noqa: F401 - make sure numpy's BLAS is loaded

    for path in _loaded_openblas():
        try:
            lib = ctypes.CDLL(path)
            syms = [
                getattr(lib, n)
                for n in (
                    "scipy_cblas_sgemm64_",
                    "scipy_cblas_dgemm64_",
                    "scipy_openblas_set_num_threads64_",
                    "scipy_openblas_get_num_threads64_",
                )
            ]
        except (OSError, AttributeError):
            continue
        sgemm, dgemm, set_threads, get_threads = syms
        set_threads.argtypes, set_threads.restype = [ctypes.c_int], None
        get_threads.argtypes, get_threads.restype = [], ctypes.c_int
        addr = ctypes.cast(sgemm, ctypes.c_void_p).value
        daddr = ctypes.cast(dgemm, ctypes.c_void_p).value
        if addr and daddr:
            return Blas(addr, daddr, set_threads, get_threads)
    return None
