"""The CUDA backend: the portable kernels of ``riftco.shaders`` on NVIDIA GPUs.

Devices: ``cuda:N`` in the driver's order (``CUDA_VISIBLE_DEVICES`` applies). Kernels are
the same family files every GPU runtime compiles, built by NVRTC to CUBIN for each device's
own architecture; ``shaders/prelude.h`` picks its CUDA branch from ``__CUDACC_RTC__``.
float32 and float64 (every CUDA GPU has doubles; consumer parts run them slowly), with
int32 and int64 index tensors.

Priority (for ``auto``): 30, above every other in-tree backend, so an NVIDIA machine runs
riftco on its GPU. The priority is a constant: importing this module probes nothing (the
registry probes lazily); ``is_available`` runs the probe once, bounded in time and never
raising (``driver.probe``), and elsewhere reports why there is no GPU, so ``auto`` passes
over it at the cost of one failed library load.

Group size: 256 by default (lowered per kernel to what its registers allow);
``RIFTCO_CUDA_GROUP_SIZE`` or the ``group_size`` argument picks any multiple of 32 up to
1024, so the kernels can be run at the irregular sizes Metal may choose.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from riftco.backend import DeviceInfo
from riftco.dtypes import LOW_PRECISION
from riftco.kernel_host.backend import KernelBackend

from . import compiler, driver
from . import runtime as rt

#: float16 and bfloat16 (with ml_dtypes) as 16-bit storage converted by shaders/half.h
_WIDE = (np.float32, np.float64, np.int32, np.int64)
_DTYPES = frozenset(np.dtype(t) for t in _WIDE) | LOW_PRECISION
PRIORITY_WITH_GPU = 30


def availability() -> tuple[bool, str]:
    """``(True, "")`` when a GPU and NVRTC are both usable, else ``(False, reason)``."""
    try:
        found = driver.probe()
        if found.reason:
            return False, found.reason
        reason = compiler.nvrtc_status()
        if reason:
            return False, f"a GPU is present but NVRTC cannot compile: {reason}"
    except Exception as exc:  # a probe must never break plugin loading
        return False, f"CUDA probe failed: {type(exc).__name__}: {exc}"
    return True, ""


class CudaBackend(KernelBackend):
    name: ClassVar[str] = "cuda"
    priority: ClassVar[int] = PRIORITY_WITH_GPU
    dtypes: ClassVar[frozenset[np.dtype]] = _DTYPES

    def __init__(self, device_index: int = 0, group_size: int | None = None) -> None:
        self._group_size = group_size
        super().__init__(device_index)

    def make_runtime(self, device_index: int) -> rt.CudaRuntime:
        ok, reason = availability()
        if not ok:
            from riftco.errors import BackendUnavailableError

            raise BackendUnavailableError(f"[cuda] unavailable: {reason}")
        return rt.CudaRuntime(device_index, self._group_size)

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        return availability()

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        found = driver.probe()
        if found.reason:
            return []
        major, minor = divmod(found.driver_version // 10, 100)
        try:
            nv = ".".join(map(str, compiler.nvrtc_version()))
            cache = compiler.kernel_cache()
        except Exception:
            nv, cache = "missing", None
        out = []
        for d in found.devices:
            details = {
                "compute_capability": f"{d.capability[0]}.{d.capability[1]}",
                "arch": d.arch,
                "multiprocessors": d.multiprocessors,
                "global_mem_bytes": d.total_memory,
                "l2_bytes": d.l2_bytes,
                "max_group_size": d.max_threads_per_block,
                "driver": f"{major}.{minor}",
                "nvrtc": nv,
            }
            details["memory"], details["uploads"] = rt.memory_paths(d.index, d.memory_pools)
            if cache is not None:  # its entries' build logs: riftco backends --verbose
                details["kernel_cache"] = str(cache.folder)
            dts = tuple(sorted(dt.name for dt in _DTYPES))
            out.append(DeviceInfo(d.index, d.name, dts, details))
        return out
