"""Launches on the fake CUDA driver that compute: each kernel runs on PoCL (OpenCL on the
CPU) over the fake's device memory, so values come out right and the CUDA runtime's launch
geometry, argument order and copy offsets are checked by the numbers too.

Every runtime compiles the very same program string (``prelude.h`` picks its branch), so
the fake hands the source the CUDA runtime compiled to the OpenCL runtime, binds one
OpenCL buffer per allocation (an allocation bound twice, as an in-place op does, is one
buffer), runs ``threads`` work-items in groups of the CUDA block size, and copies every
bound allocation back. What this cannot see is the CUDA branch of the prelude itself:
NVRTC compiles it (tests/backends/cuda/test_cuda_compile.py), and only a GPU runs it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cuda_fake_memory import Allocation


def pocl_reason() -> str:
    """Empty when an OpenCL device is here to run kernels on, else why not."""
    try:
        from riftco.backends.opencl.runtime import enumerate_devices
    except Exception as exc:  # pyopencl missing
        return f"pyopencl is not importable ({type(exc).__name__}: {exc})"
    devices, error = enumerate_devices()
    return error or ("" if devices else "no OpenCL device")


class OpenCLExecutor:
    """A ``FakeCudaDriver.executor`` that runs each launch on OpenCL device 0."""

    def __init__(self) -> None:
        import pyopencl as cl
        from riftco.backends.opencl.runtime import OpenCLRuntime

        self.cl = cl
        self.runtime = OpenCLRuntime(0)
        self.launches = 0
        self.kernels: dict[tuple[str, str], Any] = {}

    def __call__(
        self,
        source: str,
        name: str,
        threads: int,
        group: int,
        bound: tuple[tuple[Allocation, int], ...],
    ) -> None:
        cl, rt = self.cl, self.runtime
        kernel = self.kernels.get((source, name))
        if kernel is None:
            kernel = self.kernels[source, name] = rt.compile(source, name).kernel(name)
        buffers: dict[int, Any] = {}
        args = []
        for alloc, ptr in bound:
            if ptr != alloc.ptr:
                raise NotImplementedError(f"{name}: a pointer inside an allocation (0x{ptr:x})")
            if alloc.ptr not in buffers:
                flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
                host = np.frombuffer(alloc.data, dtype=np.uint8)
                buffers[alloc.ptr] = (alloc, cl.Buffer(rt.context, flags, hostbuf=host))
            args.append(buffers[alloc.ptr][1])
        kernel.set_args(*args)
        cl.enqueue_nd_range_kernel(rt.queue, kernel, (threads,), (group,))
        for alloc, buffer in buffers.values():
            cl.enqueue_copy(rt.queue, np.frombuffer(alloc.data, dtype=np.uint8), buffer)
        rt.queue.finish()
        self.launches += 1
