"""The OpenCL backend: the portable kernels of ``riftco.shaders`` on any OpenCL device.

Devices: ``opencl:N`` enumerates every device of every platform, GPUs and accelerators
first (see ``runtime.enumerate_devices``). float64 is offered where the device has
``cl_khr_fp64``; float16 and bfloat16 everywhere (bfloat16 with ml_dtypes installed).

Priority (for ``auto``): 10 when at least one non-CPU OpenCL device exists, so a real GPU
beats the numpy reference; -1 when the only devices are CPUs (PoCL, Intel's CPU runtime).
A CPU OpenCL device is still selectable by name, but ``auto`` on a laptop with only PoCL
keeps the numpy backend, which is faster for small work and has no compile latency.
The priority is computed once, when the class is created, by a probe that never raises.

Group size: 256 (or the device maximum if lower) by default; ``RIFTCO_OPENCL_GROUP_SIZE``
or the ``group_size`` constructor argument picks any multiple of 32 up to 1024, so tests
can imitate the irregular group sizes Metal chooses (96, 352, ...).

Fast math: off by default (OpenCL is IEEE unless asked); ``RIFTCO_FAST_MATH=1`` or
``fast_math=True`` builds every program with ``-cl-fast-relaxed-math -cl-finite-math-only``,
as Metal compiles by default, so CI can prove the kernels do not rely on IEEE specials.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from riftco.backend import DeviceInfo
from riftco.dtypes import LOW_PRECISION
from riftco.kernel_host.backend import KernelBackend

from . import pocl
from . import runtime as rt

#: float16 and bfloat16 (when ml_dtypes is installed) on every device: core OpenCL's
#: vload_half / vstore_half and integer bit work (shaders/half.h), no cl_khr_fp16 needed.
_BASE_DTYPES = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64),
                *sorted(LOW_PRECISION, key=str))  # fmt: skip


def _probe() -> tuple[int, frozenset[np.dtype]]:
    try:
        devices, error = rt.enumerate_devices()
        if error:
            return -1, frozenset(_BASE_DTYPES)
        priority = 10 if any(rt.is_gpu(d) for d in devices) else -1
        fp64 = any(rt.has_fp64(d) for d in devices)
    except Exception:  # a probe must never break plugin loading
        return -1, frozenset(_BASE_DTYPES)
    return priority, frozenset(_BASE_DTYPES + ((np.dtype(np.float64),) if fp64 else ()))


_PRIORITY, _DTYPES = _probe()


class OpenCLBackend(KernelBackend):
    name: ClassVar[str] = "opencl"
    priority: ClassVar[int] = _PRIORITY
    dtypes: ClassVar[frozenset[np.dtype]] = _DTYPES
    #: named on the conformance certificate with their versions (an extra, not a requirement)
    libraries: ClassVar[tuple[str, ...]] = ("pyopencl",)

    def __init__(
        self, device_index: int = 0, group_size: int | None = None, fast_math: bool | None = None
    ) -> None:
        self._group_size = group_size
        self._fast_math = fast_math
        super().__init__(device_index)
        device = self.runtime.device  # type: ignore[attr-defined]
        fp64 = (np.dtype(np.float64),) if rt.has_fp64(device) else ()
        self.dtypes = frozenset(_BASE_DTYPES + fp64)  # type: ignore[misc]  # per device

    def make_runtime(self, device_index: int) -> rt.OpenCLRuntime:
        return rt.OpenCLRuntime(device_index, self._group_size, self._fast_math)

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        try:
            devices, error = rt.enumerate_devices()
        except Exception as exc:
            return False, f"OpenCL probe failed: {type(exc).__name__}: {exc}"
        if error:
            return False, error
        return True, ""

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        devices, error = rt.enumerate_devices()
        out = []
        for i, d in enumerate(devices):
            dts = [dt.name for dt in _BASE_DTYPES] + (["float64"] if rt.has_fp64(d) else [])
            details: dict[str, Any] = {
                "platform": d.platform.name.strip(),
                "type": "gpu" if rt.is_gpu(d) else "cpu",
                "max_group_size": int(d.max_work_group_size),
                "compute_units": int(d.max_compute_units),
                "global_mem_bytes": int(d.global_mem_size),
                **pocl.details(d),  # which PoCL and LLVM, compiling for which CPU
            }
            cache = rt.kernel_cache(d)
            if cache is not None:  # its entries' build logs: riftco backends --verbose
                details["kernel_cache"] = str(cache.folder)
            out.append(DeviceInfo(i, d.name.strip(), tuple(sorted(dts)), details))
        return out
