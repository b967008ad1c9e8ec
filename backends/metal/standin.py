"""A metalcompute stand-in over pyopencl: the Metal backend's host code, run on OpenCL.

Same Python surface as ``metalcompute``: ``Device(index)``, ``get_devices()``,
``dev.kernel(src).function(name)``, ``dev.buffer(n or bytes-like)``, ``fn(count, *bufs)``
returning a handle whose deletion waits, and the exception class ``error``. It compiles
the *same source string* the Metal backend builds (the prelude takes its OpenCL branch
because the OpenCL compiler predefines ``__OPENCL_VERSION__``) and dispatches with
Metal's rules as metalcompute applies them:

- the threadgroup size belongs to the function, is a multiple of 32 and is not told to
  the host: here it is derived from the function name (64 ... 1024) unless
  ``RIFTCO_STANDIN_GROUP_SIZE`` or ``Device(group_size=...)`` fixes it;
- ``count`` threads are rounded up to whole groups; buffers bind in order at offset 0;
- buffers are shared memory seen through the buffer protocol (``np.frombuffer``);
- programs build with fast math, as metalcompute's always do (``fastMathEnabled``): the
  OpenCL flags ``-cl-fast-relaxed-math -cl-finite-math-only`` let the compiler assume no
  NaN or infinity, so a kernel that needs IEEE specials fails here first.
  ``RIFTCO_FAST_MATH=0`` (or ``Device(fast_math=False)``) turns it off, to tell a
  fast-math fault from a host-code one.

``RIFTCO_STANDIN_MODEL_RUNS=1`` (or ``RUNS.enabled = True``) models metalcompute 0.2.9's
run dictionary (``mc_cbs`` in ``src/metalcompute.swift``): every dispatch's run is added
and never removed (``released`` is never set), each holding its command buffer, and each
completion handler scans the whole dictionary to find its run. :data:`RUNS` counts the
entries (live command buffers) and the entries scanned, so ``bench/metal_long_run.py`` can
show the growth over a run; the scan is counted, not timed (Swift's speed is a Mac's to tell).

Shared memory is emulated by copying: a run uploads every bound buffer's host bytes,
launches, and reads them back, all on one in-order queue; deleting the handle waits. So
host reads are only valid after a wait, exactly the discipline real Metal requires.
This is for verification, not speed.
"""

from __future__ import annotations

import zlib
from collections import namedtuple
from typing import Any

import numpy as np
from riftco.backends.opencl import runtime as clrt
from riftco.env_values import flag, whole_number
from riftco.errors import KernelCompileError

cl = clrt.cl

#: Group sizes a function may get, as Metal pipelines report varying maxima.
GROUP_CHOICES = (64, 96, 224, 352, 512, 1024)
GROUP_ENV = "RIFTCO_STANDIN_GROUP_SIZE"

DeviceInfo = namedtuple(
    "DeviceInfo", "deviceName recommendedWorkingSetSize maxTransferRate hasUnifiedMemory"
)


class error(Exception):  # noqa: N801 - metalcompute's spelling
    """What metalcompute raises for compile and dispatch failures."""


def get_devices() -> list[DeviceInfo]:
    devices, _ = clrt.enumerate_devices()
    return [
        DeviceInfo(f"stand-in on {d.name.strip()}", int(d.global_mem_size), 0, True)
        for d in devices
    ]


class RunDictionary:
    """The never-pruned ``mc_cbs`` of metalcompute 0.2.9, as counts (off by default)."""

    def __init__(self) -> None:
        self.enabled = flag("RIFTCO_STANDIN_MODEL_RUNS", default=False)
        self.entries = 0  # runs recorded: each keeps its MTLCommandBuffer alive
        self.scanned = 0  # dictionary entries visited by completion handlers so far

    def record(self) -> None:
        if self.enabled:
            self.entries += 1
            self.scanned += self.entries  # the handler scans every entry to find its run


RUNS = RunDictionary()


class Buffer(np.ndarray):
    """Host bytes (what Python sees) plus the OpenCL buffer the kernels see."""

    device_buffer: Any = None


class Run:
    """A queued dispatch; deleting it waits, like metalcompute's Run."""

    def __init__(self, event: Any, buffers: list[Buffer]) -> None:
        self._event = event
        self._buffers = buffers  # kept alive until the run is waited for

    def __del__(self) -> None:
        event, self._event = self._event, None
        if event is not None:
            event.wait()


class Function:
    def __init__(self, device: Device, kernel: Any, name: str) -> None:
        self.device = device
        self.kernel = kernel
        self.name = name
        g = device.group_size or GROUP_CHOICES[zlib.crc32(name.encode()) % len(GROUP_CHOICES)]
        limit = kernel.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, device.runtime.device
        )
        self.group_size = min(g, int(limit) // 32 * 32)

    def __call__(self, count: int, *buffers: Any) -> Run:
        if not buffers:
            raise error("buffers must be supplied")
        bufs = [b if isinstance(b, Buffer) else self.device.buffer(b) for b in buffers]
        queue = self.device.runtime.queue
        for b in bufs:
            cl.enqueue_copy(queue, b.device_buffer, np.asarray(b), is_blocking=False)
        g = self.group_size
        self.kernel.set_args(*(b.device_buffer for b in bufs))
        cl.enqueue_nd_range_kernel(queue, self.kernel, (-(-int(count) // g) * g,), (g,))
        event = None
        for b in bufs:
            event = cl.enqueue_copy(queue, np.asarray(b), b.device_buffer, is_blocking=False)
        RUNS.record()
        return Run(event, bufs)


class Kernel:
    def __init__(self, device: Device, program: Any) -> None:
        self.device = device
        self.program = program
        #: Not in metalcompute: the OpenCL build log, which MetalRuntime keeps when present.
        self.build_log = program.build_log

    def function(self, name: str) -> Function:
        try:
            return Function(self.device, self.program.kernel(name), name)
        except KernelCompileError as exc:
            raise error(str(exc)) from None


class Device:
    def __init__(
        self, index: int = -1, group_size: int | None = None, fast_math: bool | None = None
    ) -> None:
        if clrt.cl is None:
            raise error(clrt.IMPORT_ERROR)
        fast = clrt.fast_math_from_env(default=True) if fast_math is None else fast_math
        self.runtime = clrt.OpenCLRuntime(max(index, 0), fast_math=fast)
        env = whole_number(GROUP_ENV, 0, "threads")
        self.group_size = group_size or env or None
        if self.group_size is not None and self.group_size % 32:
            raise error(f"group size {self.group_size} is not a multiple of 32")

    def kernel(self, source: str) -> Kernel:
        try:
            return Kernel(self, self.runtime.compile(source, "stand-in library"))
        except KernelCompileError as exc:
            raise error(str(exc)) from None

    def buffer(self, length_or_data: Any) -> Buffer:
        if isinstance(length_or_data, (int, np.integer)):
            host = np.zeros(int(length_or_data), dtype=np.uint8)
        else:
            host = np.frombuffer(memoryview(length_or_data).cast("B"), dtype=np.uint8).copy()
        buf = host.view(Buffer)
        buf.device_buffer = cl.Buffer(
            self.runtime.context, cl.mem_flags.READ_WRITE, size=max(buf.nbytes, 1)
        )
        return buf

    def __str__(self) -> str:
        return f"stand-in Device({self.runtime.device_name})"
