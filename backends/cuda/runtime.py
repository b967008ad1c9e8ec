"""The CUDA runtime: one stream per GPU over the driver API of ``cuda.bindings``.

What the host layer (``riftco.kernel_host.runtime.Runtime``) needs, and how CUDA gives it:
- Ordering: every copy, launch and free goes to one stream per device (shared by every
  backend instance of that device, like OpenCL's queue), so the caching allocator may
  hand a freed buffer to the next op without waiting.
- Memory: stream-ordered ``cuMemAllocAsync`` / ``cuMemFreeAsync`` where the device has
  memory pools (a free never stalls the host, unlike ``cuMemFree``), plain ``cuMemAlloc``
  elsewhere, after a first ``cuMemAllocAsync`` failure that is not out-of-memory (a
  sandboxed driver may refuse pools), or with ``RIFTCO_CUDA_POOLS=0``. Never managed memory.
- Uploads up to :data:`STAGE_CHUNK` bytes (parameter buffers, token batches) go through a
  pinned staging ring, so they stay asynchronous; a pageable copy may wait for the stream.
  Where ``cuMemHostAlloc`` is refused (or ``RIFTCO_CUDA_POOLS=0``) every upload is pageable.
  Both fallbacks are said (a ``RuntimeWarning`` and ``riftco backends``), never silent.
- Errors: launches are asynchronous, so a kernel's fault surfaces at a later call. A
  synchronisation that fails names the kernels launched since the last one (first, last,
  count); ``RIFTCO_CUDA_SYNC=1`` synchronises after every launch and names the very
  kernel. A sticky error (an illegal address, ...) marks the device lost: every later
  call raises :class:`~riftco.errors.DeviceLostError` at once with the first error's text.
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
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from riftco.env_values import flag
from riftco.errors import BackendUnavailableError, KernelCompileError
from riftco.kernel_host.build_log import BuildLog
from riftco.kernel_host.runtime import KernelsByName, RuntimeCapabilities, checked_group_size

from . import compiler
from .driver import (
    STICKY,
    CudaDeviceLostError,
    CudaDriverError,
    DeviceProps,
    check,
    error_name,
    error_text,
    load,
    probe,
)

#: The largest block a kernel may see: threadgroup arrays are sized for 1024 threads.
MAX_GROUP = 1024
GROUP_ENV = "RIFTCO_CUDA_GROUP_SIZE"
WIDE_ENV = "RIFTCO_CUDA_WIDE_MIN_TILES"
SYNC_ENV = "RIFTCO_CUDA_SYNC"
POOLS_ENV = "RIFTCO_CUDA_POOLS"
#: Most buffers one kernel binds (the widest signature in shaders/ has 9).
MAX_ARGS = 32
#: Pinned staging ring for small uploads: STAGE_CHUNKS chunks of STAGE_CHUNK bytes.
STAGE_CHUNK = 1 << 20
STAGE_CHUNKS = 8
_STAGE_ALIGN = 256


def sync_each_launch() -> bool:
    """``RIFTCO_CUDA_SYNC=1``: wait for every launch, so a fault names its own kernel."""
    return flag(SYNC_ENV, default=False)


def pools_wanted() -> bool:
    """``RIFTCO_CUDA_POOLS=0`` forces plain ``cuMemAlloc`` and pageable uploads."""
    return flag(POOLS_ENV, default=True)


def group_size_for(props: DeviceProps, requested: int | None = None) -> int:
    """The launch group size: ``requested`` or RIFTCO_CUDA_GROUP_SIZE or 256, checked."""
    limit = min(props.max_threads_per_block, MAX_GROUP)
    return checked_group_size("cuda", GROUP_ENV, limit, props.name, requested)


class CudaBuffer:
    """A device allocation; freed (stream-ordered when pooled) when the last reference goes."""

    __slots__ = ("ptr", "nbytes", "_device", "pooled")

    def __init__(self, ptr: int, nbytes: int, device: _Device, pooled: bool = True) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self._device = device
        self.pooled = pooled

    def __del__(self) -> None:
        try:
            self._device.free(self.ptr, self.pooled)
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

    def __init__(self, drv: Any, stream: Any, checked: Callable[..., Any] | None = None) -> None:
        self.drv = drv
        self.stream = stream
        #: The device's checking call (it remembers a sticky error), plain check before.
        self.check = checked or (lambda result, what: check(drv, result, what))
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
            self.check(drv.cuEventRecord(self.events[self.chunk], self.stream), "cuEventRecord")
            self.recorded[self.chunk] = True
            self.chunk = (self.chunk + 1) % STAGE_CHUNKS
            self.offset = 0
            if self.recorded[self.chunk]:
                self.check(drv.cuEventSynchronize(self.events[self.chunk]), "cuEventSynchronize")
        host = self.base + self.chunk * STAGE_CHUNK + self.offset
        ctypes.memmove(host, src.ctypes.data, n)
        self.check(self.drv.cuMemcpyHtoDAsync(dst, host, n, self.stream), "cuMemcpyHtoDAsync")
        self.offset += -(-n // _STAGE_ALIGN) * _STAGE_ALIGN


#: The device whose context this host thread last made current (contexts are per thread).
_current = threading.local()


class _Device:
    """Per-GPU state shared by every runtime of that GPU: context, stream, modules."""

    def __init__(self, drv: Any, props: DeviceProps) -> None:
        self.drv = drv
        self.props = props
        self.lock = threading.RLock()
        #: The first sticky error's text: once set, every call raises at once.
        self.lost = ""
        #: Launches since the last completed synchronisation: count, first and last kernel.
        self.pending = 0
        self.pending_first = self.pending_last = ""
        dev = check(drv, drv.cuDeviceGet(props.index), "cuDeviceGet")
        self.context = check(drv, drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        self.make_current()
        flags = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
        self.stream = check(drv, drv.cuStreamCreate(flags), "cuStreamCreate")
        self.pools = props.memory_pools and pools_wanted()
        self.memory, self.uploads = planned_paths(props.memory_pools)
        if self.pools:
            self._keep_pool_memory(dev)
        self.staging: _Staging | None = None
        if pools_wanted():
            try:
                self.staging = _Staging(drv, self.stream, self.check)
            except CudaDeviceLostError:
                raise
            except CudaDriverError as exc:
                self.uploads = f"pageable copies (pinned staging refused: {exc})"
                self._said(f"pinned staging refused ({exc}); uploads are pageable copies")
        self.modules: dict[str, Any] = {}

    def _said(self, what: str) -> None:
        warnings.warn(f"[cuda] {self.props.name}: {what}", RuntimeWarning, stacklevel=4)

    def enter(self) -> None:
        """Every entry point's first step: refuse a lost device, make the context current."""
        if self.lost:
            raise CudaDeviceLostError(
                f"[cuda] {self.props.name} is lost since an earlier error ({self.lost}); "
                "nothing more can run on it in this process: restart it"
            )
        self.make_current()

    def check(self, result: tuple[Any, ...], what: str) -> Any:
        """``driver.check`` that remembers a sticky error, so later calls fail fast."""
        try:
            return check(self.drv, result, what)
        except CudaDeviceLostError as exc:
            self.lost = self.lost or str(exc).removeprefix("[cuda] ")
            raise

    def launched(self, name: str) -> None:
        if not self.pending:
            self.pending_first = name
        self.pending_last = name
        self.pending += 1

    def synchronize(self, what: str) -> None:
        """Wait for the stream; a failure names the kernels that may have caused it."""
        result = self.drv.cuStreamSynchronize(self.stream)
        if result[0] != self.drv.CUresult.CUDA_SUCCESS and self.pending:
            if self.pending == 1:
                what += f" after {self.pending_first}"
            else:
                what += (
                    f" after {self.pending} launches (first {self.pending_first}, last "
                    f"{self.pending_last}; {SYNC_ENV}=1 names the failing one)"
                )
        self.check(result, f"{what}: cuStreamSynchronize")
        self.pending = 0

    def allocate(self, n: int) -> CudaBuffer:
        drv = self.drv
        if self.pools:
            result = drv.cuMemAllocAsync(n, self.stream)
            name = error_name(drv, result[0]) if result[0] != drv.CUresult.CUDA_SUCCESS else ""
            if not name or "OUT_OF_MEMORY" in name or name in STICKY:
                return CudaBuffer(int(self.check(result, f"cuMemAllocAsync({n})")), n, self)
            self.pools = False
            why = f"cuMemAllocAsync failed with {error_text(drv, result[0])}"
            self.memory = f"cuMemAlloc/cuMemFree ({why})"
            self._said(f"{why}; falling back to cuMemAlloc/cuMemFree")
        ptr = self.check(drv.cuMemAlloc(n), f"cuMemAlloc({n})")
        return CudaBuffer(int(ptr), n, self, pooled=False)

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

    def free(self, ptr: int, pooled: bool) -> None:
        if self.lost:  # the context is gone; the driver reclaims everything at exit
            return
        self.make_current()
        if pooled:
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
        self._sync_each = sync_each_launch()
        self._dev.make_current()
        self._args = np.zeros(MAX_ARGS, dtype=np.uint64)
        base = self._args.ctypes.data
        self._arg_ptrs = np.array([base + 8 * i for i in range(MAX_ARGS)], dtype=np.uint64)
        self._arg_ptrs_addr = int(self._arg_ptrs.ctypes.data)

    # -- memory ---------------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> CudaBuffer:
        dev = self._dev
        with dev.lock:
            dev.enter()
            return dev.allocate(max(int(nbytes), 1))

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
            dev.enter()
            if n <= STAGE_CHUNK and dev.staging is not None:
                dev.staging.put(buffer.ptr, src)
            else:  # pageable: the driver stages it (and may wait for the stream)
                dev.check(
                    self.drv.cuMemcpyHtoDAsync(buffer.ptr, src.ctypes.data, n, dev.stream),
                    f"cuMemcpyHtoDAsync({n} bytes)",
                )

    def download(self, buffer: CudaBuffer, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, dtype=np.uint8)
        if nbytes == 0:
            return out
        dev = self._dev
        with dev.lock:
            dev.enter()
            dev.check(
                self.drv.cuMemcpyDtoHAsync(out.ctypes.data, buffer.ptr, nbytes, dev.stream),
                f"cuMemcpyDtoHAsync({nbytes} bytes)",
            )
            dev.synchronize("download")
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
                dev.enter()
                module = dev.modules.get(source)
                if module is None:
                    try:
                        module = dev.check(self.drv.cuModuleLoadData(cubin), "cuModuleLoadData")
                    except CudaDeviceLostError:
                        raise
                    except CudaDriverError as exc:
                        raise KernelCompileError(
                            f"[compile] {name}: the driver refused the {self.arch} CUBIN: {exc}"
                        ) from None
                    dev.modules[source] = module
        return CudaProgram(self, module, name, log)

    def load_kernel(self, module: Any, name: str, program: str) -> CudaKernel:
        drv = self.drv
        with self._dev.lock:
            self._dev.enter()
            err, function = drv.cuModuleGetFunction(module, name.encode())
            if err != drv.CUresult.CUDA_SUCCESS:
                text = error_text(drv, err)
                if error_name(drv, err) == "CUDA_ERROR_NOT_FOUND":
                    raise KernelCompileError(
                        f"[compile] kernel {name!r} not found in {program} on "
                        f"{self.device_name} ({text})"
                    )
                self._dev.check((err,), f"cuModuleGetFunction({name!r} in {program})")
            attrs = {}
            for key, attr in (
                ("max_threads", "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
                ("registers", "CU_FUNC_ATTRIBUTE_NUM_REGS"),
                ("shared_bytes", "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
            ):
                what = f"cuFuncGetAttribute({attr})"
                value = self._dev.check(
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
            dev.enter()
            self._args[:n] = [b.ptr for b in buffers]
            (err,) = self.drv.cuLaunchKernel(
                kernel.function, blocks, 1, 1, g, 1, 1, 0, dev.stream, self._arg_ptrs_addr, 0
            )
            if err != self.drv.CUresult.CUDA_SUCCESS:
                dev.check((err,), f"cuLaunchKernel({kernel.name}, {blocks} x {g})")
            dev.launched(kernel.name)
            if self._sync_each:
                dev.synchronize(f"{kernel.name} ({blocks} x {g} threads, {SYNC_ENV}=1)")

    def synchronize(self) -> None:
        with self._dev.lock:
            self._dev.enter()
            self._dev.synchronize("synchronize")


def planned_paths(pools_supported: bool) -> tuple[str, str]:
    """How a device allocates and uploads before any fallback: pools where it has them,
    the pinned ring, unless ``RIFTCO_CUDA_POOLS=0`` asks for the plain paths."""
    if not pools_wanted():
        return f"cuMemAlloc/cuMemFree ({POOLS_ENV}=0)", f"pageable copies ({POOLS_ENV}=0)"
    memory = (
        "stream-ordered pool (cuMemAllocAsync/cuMemFreeAsync)"
        if pools_supported
        else "cuMemAlloc/cuMemFree (the device has no memory pools)"
    )
    return memory, f"pinned staging ring ({STAGE_CHUNKS} x {STAGE_CHUNK >> 20} MiB)"


def memory_paths(index: int, pools_supported: bool) -> tuple[str, str]:
    """How device ``index`` allocates and uploads (``riftco backends`` prints it): what the
    live device chose, fallbacks included, or what it will choose once it starts."""
    with _shared_lock:
        dev = _devices.get(index)
    return (dev.memory, dev.uploads) if dev is not None else planned_paths(pools_supported)
