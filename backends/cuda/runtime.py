"""The CUDA runtime: one stream per GPU over the driver API of ``cuda.bindings``.

What the host layer (``riftco.kernel_host.runtime.Runtime``) needs, and how CUDA gives it:
- Ordering: every copy, launch and free goes to one stream per device (shared by every
  backend instance of that device, like OpenCL's queue), so the caching allocator may
  hand a freed buffer to the next op without waiting.
- Memory: stream-ordered ``cuMemAllocAsync`` / ``cuMemFreeAsync`` where the device has
  memory pools (a free never stalls the host, unlike ``cuMemFree``), plain ``cuMemAlloc``
  elsewhere. Never managed memory.
- Uploads up to :data:`STAGE_CHUNK` bytes (parameter buffers, token batches) go through a
  pinned staging ring, so they stay asynchronous; a pageable copy may wait for the stream.
- Compilation: NVRTC to CUBIN for the device's own architecture (``compiler.py``), loaded
  with ``cuModuleLoadData``; modules are shared per device and source.
- Launch: kernels take only pointers (parameters travel in buffers, as on Metal); the
  argument array is a preallocated ``void*[]`` whose slots point at a uint64 array of the
  device pointers, so a launch costs one numpy slice write and one ``cuLaunchKernel``.
  The block size is the run's group size (256, or ``RIFTCO_CUDA_GROUP_SIZE``) lowered to
  the kernel's own limit (registers can cap it), and the grid is rounded up to whole blocks.

The driver's current context is per host thread: every entry point makes this device's
primary context current first (a cached per-thread check).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from riftco.errors import BackendUnavailableError, KernelCompileError
from riftco.kernel_host.build_log import BuildLog
from riftco.kernel_host.runtime import KernelsByName, RuntimeCapabilities, checked_group_size

from . import compiler
from .driver import CudaDriverError, DeviceProps, check, load, probe

#: The largest block a kernel may see: threadgroup arrays are sized for 1024 threads.
MAX_GROUP = 1024
GROUP_ENV = "RIFTCO_CUDA_GROUP_SIZE"
WIDE_ENV = "RIFTCO_CUDA_WIDE_MIN_TILES"
#: Most buffers one kernel binds (the widest signature in shaders/ has 9).
MAX_ARGS = 32
#: Pinned staging ring for small uploads: STAGE_CHUNKS chunks of STAGE_CHUNK bytes.
STAGE_CHUNK = 1 << 20
STAGE_CHUNKS = 8
_STAGE_ALIGN = 256


def group_size_for(props: DeviceProps, requested: int | None = None) -> int:
    """The launch group size: ``requested`` or RIFTCO_CUDA_GROUP_SIZE or 256, checked."""
    limit = min(props.max_threads_per_block, MAX_GROUP)
    return checked_group_size("cuda", GROUP_ENV, limit, props.name, requested)


class CudaBuffer:
    """A device allocation; freed (stream-ordered) when the last reference goes."""

    __slots__ = ("ptr", "nbytes", "_device")

    def __init__(self, ptr: int, nbytes: int, device: _Device) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self._device = device

    def __del__(self) -> None:
        try:
            self._device.free(self.ptr)
        except Exception:  # interpreter shutdown: the driver may already be gone
            pass

    def __repr__(self) -> str:
        return f"CudaBuffer(0x{self.ptr:x}, {self.nbytes} bytes)"


class CudaKernel:
    """A function of a loaded module and the block size it launches with."""

    __slots__ = ("function", "name", "group", "max_threads", "registers", "shared_bytes")

    def __init__(self, function: Any, name: str, group: int, attrs: dict[str, int]) -> None:
        self.function = function
        self.name = name
        self.group = group
        self.max_threads = attrs["max_threads"]
        self.registers = attrs["registers"]
        self.shared_bytes = attrs["shared_bytes"]


class _Staging:
    """A pinned host ring; each chunk's reuse waits on an event recorded when it filled."""

    def __init__(self, drv: Any, stream: Any) -> None:
        self.drv = drv
        self.stream = stream
        self.base = int(
            check(drv, drv.cuMemHostAlloc(STAGE_CHUNK * STAGE_CHUNKS, 0), "cuMemHostAlloc")
        )
        flags = int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        self.events = [
            check(drv, drv.cuEventCreate(flags), "cuEventCreate") for _ in range(STAGE_CHUNKS)
        ]
        self.recorded = [False] * STAGE_CHUNKS
        self.chunk = 0
        self.offset = 0

    def put(self, dst: int, src: np.ndarray) -> None:
        n = src.nbytes
        if self.offset + n > STAGE_CHUNK:
            drv = self.drv
            check(drv, drv.cuEventRecord(self.events[self.chunk], self.stream), "cuEventRecord")
            self.recorded[self.chunk] = True
            self.chunk = (self.chunk + 1) % STAGE_CHUNKS
            self.offset = 0
            if self.recorded[self.chunk]:
                check(drv, drv.cuEventSynchronize(self.events[self.chunk]), "cuEventSynchronize")
        host = self.base + self.chunk * STAGE_CHUNK + self.offset
        ctypes.memmove(host, src.ctypes.data, n)
        check(self.drv, self.drv.cuMemcpyHtoDAsync(dst, host, n, self.stream), "cuMemcpyHtoDAsync")
        self.offset += -(-n // _STAGE_ALIGN) * _STAGE_ALIGN


#: The device whose context this host thread last made current (contexts are per thread).
_current = threading.local()


class _Device:
    """Per-GPU state shared by every runtime of that GPU: context, stream, modules."""

    def __init__(self, drv: Any, props: DeviceProps) -> None:
        self.drv = drv
        self.props = props
        self.lock = threading.RLock()
        dev = check(drv, drv.cuDeviceGet(props.index), "cuDeviceGet")
        self.context = check(drv, drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        self.make_current()
        flags = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
        self.stream = check(drv, drv.cuStreamCreate(flags), "cuStreamCreate")
        self.pools = props.memory_pools
        if self.pools:
            self._keep_pool_memory(dev)
        self.staging = _Staging(drv, self.stream)
        self.modules: dict[str, Any] = {}

    def _keep_pool_memory(self, dev: Any) -> None:
        """Freed pool memory stays reserved across synchronisations (the default releases
        it at every sync, so the next ``cuMemAllocAsync`` maps pages again)."""
        drv = self.drv
        try:
            pool = check(drv, drv.cuDeviceGetDefaultMemPool(dev), "cuDeviceGetDefaultMemPool")
            attr = drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
            drv.cuMemPoolSetAttribute(pool, attr, drv.cuuint64_t(0xFFFFFFFFFFFFFFFF))
        except Exception:  # an optimisation only
            pass

    def make_current(self) -> None:
        if getattr(_current, "device", None) is self:
            return
        check(self.drv, self.drv.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        _current.device = self

    def free(self, ptr: int) -> None:
        self.make_current()
        if self.pools:
            self.drv.cuMemFreeAsync(ptr, self.stream)
        else:
            self.drv.cuMemFree(ptr)


_shared_lock = threading.Lock()
_devices: dict[int, _Device] = {}


def _device(index: int) -> _Device:
    drv, reason = load()
    if drv is None:
        raise BackendUnavailableError(f"[cuda] unavailable: {reason}")
    found = probe()
    if found.reason or not 0 <= index < len(found.devices):
        why = found.reason or f"out of range ({len(found.devices)} devices)"
        raise BackendUnavailableError(f"[cuda] no device {index}: {why}")
    with _shared_lock:
        if index not in _devices:
            _devices[index] = _Device(drv, found.devices[index])
        return _devices[index]


class CudaProgram(KernelsByName[CudaKernel]):
    """A loaded CUBIN module; kernels are looked up by their (``extern "C"``) names."""

    def __init__(self, runtime: CudaRuntime, module: Any, name: str, build_log: BuildLog) -> None:
        super().__init__(name, build_log)
        self.runtime = runtime
        self.module = module

    def _lookup(self, name: str) -> CudaKernel:
        return self.runtime.load_kernel(self.module, name, self.name)


class CudaRuntime:
    """Implements ``riftco.kernel_host.runtime.Runtime`` on one NVIDIA GPU."""

    def __init__(self, index: int, group_size: int | None = None) -> None:
        self.index = index
        self._dev = _device(index)
        self.drv = self._dev.drv
        self.props = self._dev.props
        self.device_name = self.props.name
        self.arch = self.props.arch
        self.group_size = group_size_for(self.props, group_size)
        #: GPUs take the threadgroup-tiled kernels (never the CPU-shaped panel/row kernels).
        #: The group size is known here (unlike Metal): row kernels launch one group per
        #: row. Products with at least one 128x128 tile per multiprocessor take
        #: ``matmul_wide`` (below that the 64x64 kernel keeps every one busy);
        #: ``RIFTCO_CUDA_WIDE_MIN_TILES``, read here, overrides that count for tuning.
        raw = os.environ.get(WIDE_ENV, "")
        self.capabilities = RuntimeCapabilities(
            is_cpu=False,
            serial_rows=False,
            group_size_hint=self.group_size,
            matmul_wide_min_tiles=int(raw) if raw.isdigit() else self.props.multiprocessors,
        )
        self._dev.make_current()
        self._args = np.zeros(MAX_ARGS, dtype=np.uint64)
        base = self._args.ctypes.data
        self._arg_ptrs = np.array([base + 8 * i for i in range(MAX_ARGS)], dtype=np.uint64)
        self._arg_ptrs_addr = int(self._arg_ptrs.ctypes.data)

    # -- memory ---------------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> CudaBuffer:
        dev = self._dev
        n = max(int(nbytes), 1)
        with dev.lock:
            dev.make_current()
            if dev.pools:
                ptr = check(self.drv, self.drv.cuMemAllocAsync(n, dev.stream), "cuMemAllocAsync")
            else:
                ptr = check(self.drv, self.drv.cuMemAlloc(n), "cuMemAlloc")
        return CudaBuffer(int(ptr), n, dev)

    def upload(self, buffer: CudaBuffer, array: np.ndarray) -> None:
        src = np.ascontiguousarray(array)
        n = src.nbytes
        if n == 0:
            return
        if n > buffer.nbytes:
            raise CudaDriverError(
                f"[upload] {n} bytes do not fit a {buffer.nbytes}-byte buffer on {self.device_name}"
            )
        dev = self._dev
        with dev.lock:
            dev.make_current()
            if n <= STAGE_CHUNK:
                dev.staging.put(buffer.ptr, src)
            else:  # pageable: the driver stages it (and may wait for the stream)
                check(
                    self.drv,
                    self.drv.cuMemcpyHtoDAsync(buffer.ptr, src.ctypes.data, n, dev.stream),
                    "cuMemcpyHtoDAsync",
                )

    def download(self, buffer: CudaBuffer, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, dtype=np.uint8)
        if nbytes == 0:
            return out
        dev = self._dev
        with dev.lock:
            dev.make_current()
            check(
                self.drv,
                self.drv.cuMemcpyDtoHAsync(out.ctypes.data, buffer.ptr, nbytes, dev.stream),
                "cuMemcpyDtoHAsync",
            )
            self._sync("download")
        return out

    def constant(self, data: bytes) -> CudaBuffer:
        buf = self.allocate(len(data))
        self.upload(buf, np.frombuffer(data, dtype=np.uint8))
        return buf

    # -- programs -------------------------------------------------------------------------------
    def compile(self, source: str, name: str) -> CudaProgram:
        dev = self._dev
        cubin, log = compiler.build(source, name, self.arch)  # kept in memory after the first
        with dev.lock:
            module = dev.modules.get(source)
        if module is None:
            with dev.lock:
                dev.make_current()
                module = dev.modules.get(source)
                if module is None:
                    try:
                        module = check(
                            self.drv, self.drv.cuModuleLoadData(cubin), "cuModuleLoadData"
                        )
                    except CudaDriverError as exc:
                        raise KernelCompileError(
                            f"[compile] {name}: the driver refused the {self.arch} CUBIN: {exc}"
                        ) from None
                    dev.modules[source] = module
        return CudaProgram(self, module, name, log)

    def load_kernel(self, module: Any, name: str, program: str) -> CudaKernel:
        drv = self.drv
        with self._dev.lock:
            self._dev.make_current()
            err, function = drv.cuModuleGetFunction(module, name.encode())
            if err != drv.CUresult.CUDA_SUCCESS:
                raise KernelCompileError(
                    f"[compile] kernel {name!r} not found in {program} on {self.device_name}"
                )
            attrs = {}
            for key, attr in (
                ("max_threads", "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
                ("registers", "CU_FUNC_ATTRIBUTE_NUM_REGS"),
                ("shared_bytes", "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
            ):
                what = f"cuFuncGetAttribute({attr})"
                value = check(
                    drv,
                    drv.cuFuncGetAttribute(getattr(drv.CUfunction_attribute, attr), function),
                    what,
                )
                attrs[key] = int(value)
        group = min(self.group_size, max(32, attrs["max_threads"] // 32 * 32))
        return CudaKernel(function, name, group, attrs)

    # -- launches -------------------------------------------------------------------------------
    def launch(self, kernel: CudaKernel, global_threads: int, buffers: Sequence[Any]) -> None:
        n = len(buffers)
        if n > MAX_ARGS:
            raise CudaDriverError(f"[launch] {kernel.name} binds {n} buffers; at most {MAX_ARGS}")
        g = kernel.group
        blocks = -(-int(global_threads) // g)
        dev = self._dev
        with dev.lock:
            dev.make_current()
            self._args[:n] = [b.ptr for b in buffers]
            (err,) = self.drv.cuLaunchKernel(
                kernel.function, blocks, 1, 1, g, 1, 1, 0, dev.stream, self._arg_ptrs_addr, 0
            )
        if err != self.drv.CUresult.CUDA_SUCCESS:
            check(self.drv, (err,), f"cuLaunchKernel({kernel.name}, {blocks} x {g})")

    def _sync(self, what: str) -> None:
        check(
            self.drv, self.drv.cuStreamSynchronize(self._dev.stream), f"{what}: cuStreamSynchronize"
        )

    def synchronize(self) -> None:
        with self._dev.lock:
            self._dev.make_current()
            self._sync("synchronize")
