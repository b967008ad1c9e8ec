"""A validating stand-in for ``cuda.bindings.driver``: the CUDA backend's host code, run
without a GPU in every ``make test``, against the contracts a real driver would enforce
only by crashing (or by corrupting memory silently).

``install(monkeypatch)`` makes ``riftco.backends.cuda`` find a :class:`FakeCudaDriver`
instead of the real driver, keeps the real NVRTC (it needs no GPU: every module loaded is
a real CUBIN), and tells the fake the source of each CUBIN and how many buffers each
``CudaRuntime.launch`` bound. Enums and handle types are ``cuda.bindings``' own, so the
runtime sees the same ``CUresult`` members and ``CUdeviceptr``/``CUstream`` objects.

What the fake checks (a breach raises :class:`DriverContractError` from the offending call
and is kept in ``violations``, for breaches inside ``__del__`` that nothing re-raises):

- a context is current on the calling thread for every call that needs one (contexts are
  per host thread), and every handle, pointer and stream belongs to that context;
- ``cuLaunchKernel``: the function's parameter count is read from its ``KERNEL void
  name(...)`` signature in the program source (``cuda_kernel_signatures``, cross-checked
  with the CUBIN's own record); exactly that many pointers are bound, each inside a live
  (unfreed) allocation; ``blockDimX`` is a multiple of 32 and within the kernel's limit;
  the stream is one the context created (never the legacy default stream);
- copies and memsets fit their allocation; pinned staging memory is not rewritten before
  its asynchronous copy ran; a stream-ordered free comes after, on the same stream, every
  enqueued operation that uses the buffer; nothing is freed twice or used after its free.

Launches compute nothing unless ``executor`` is set (``cuda_fake_compute.OpenCLExecutor``
runs each kernel on PoCL): device memory holds what copies and memsets put there, so values
downloaded after a kernel are otherwise not results (zeros, or stale bytes of a reused
buffer).

Failure injection (for the fallback and error-naming paths):

- :meth:`FakeCudaDriver.fail` makes a named entry point return an error (``times`` calls,
  after skipping ``after`` matching calls, optionally only where ``when(*args)`` holds);
- :meth:`FakeCudaDriver.fault_launch` lets a launch succeed and surfaces its error at the
  next synchronising call, as real launch faults do; illegal-address-like errors are
  sticky: every later call of that context returns them;
- :attr:`FakeCudaDriver.kernel_limits` sets a kernel's ``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK``.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
from cuda.bindings import driver as _real
from cuda_fake_memory import (
    Allocation,
    DeviceMemory,
    Operation,
    PinnedMemory,
    Stream,
)
from cuda_kernel_signatures import SignatureError, cubin_kernels, source_kernels

R = _real.CUresult
#: Errors after which the context is unusable (the real driver returns them from then on).
STICKY = frozenset(
    {
        R.CUDA_ERROR_ILLEGAL_ADDRESS,
        R.CUDA_ERROR_LAUNCH_FAILED,
        R.CUDA_ERROR_MISALIGNED_ADDRESS,
        R.CUDA_ERROR_ILLEGAL_INSTRUCTION,
        R.CUDA_ERROR_HARDWARE_STACK_ERROR,
        R.CUDA_ERROR_INVALID_PC,
        R.CUDA_ERROR_ASSERT,
    }
)
#: The value the fake writes over each argument slot it read, so that a later launch
#: binding fewer buffers than its kernel takes reads this instead of a stale pointer.
POISON = 0xBAD0_0000_0000_0000
_DA = _real.CUdevice_attribute
_FA = _real.CUfunction_attribute


#: ``executor(source, kernel name, threads, group, ((allocation, pointer), ...))``
Executor = Callable[[str, str, int, int, tuple[tuple[Allocation, int], ...]], None]


class DriverContractError(AssertionError):
    """The CUDA host code broke a driver contract (see the module docstring)."""


@dataclass
class Injection:
    """A planted failure; ``hits`` counts how often it fired."""

    call: str
    error: Any
    times: int | None = 1
    after: int = 0
    when: Callable[..., bool] | None = None
    kernel: str | None = None  # fault_launch: only launches of this kernel
    deferred: bool = False  # fault_launch: the launch succeeds, the next sync fails
    seen: int = 0
    hits: int = 0

    def fires(self) -> bool:
        self.seen += 1
        if self.seen <= self.after or (self.times is not None and self.hits >= self.times):
            return False
        self.hits += 1
        return True


@dataclass(frozen=True)
class DeviceShape:
    """What each fake GPU reports (the probe reads it; an H200-like sm_90 by default)."""

    memory_pools: bool = True  # CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
    capability: tuple[int, int] = (9, 0)
    total_memory: int = 8 << 30  # allocations beyond it fail with CUDA_ERROR_OUT_OF_MEMORY
    max_threads_per_block: int = 1024  # also each kernel's limit unless kernel_limits says
    name: str = "riftco fake GPU (tests/cuda_fake_driver.py)"


@dataclass
class Call:
    index: int
    name: str
    args: tuple[Any, ...]
    thread: str
    result: Any = None
    injected: bool = False


@dataclass
class Launch:
    index: int
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    stream: int
    pointers: tuple[int, ...]


@dataclass
class _Kernel:
    module: int
    name: str
    params: int
    source: str | None  # the program's source, where the fake was told it


@dataclass
class _Context:
    handle: int
    device: int
    error: Any = None  # a fault not yet reported (non-sticky) or the sticky one
    streams: dict[int, Stream] = field(default_factory=dict)
    modules: dict[int, dict[str, int]] = field(default_factory=dict)  # module -> kernels


def _entry(returns: int = 0, context: bool = True) -> Callable[[Callable[..., Any]], Any]:
    """An entry point returning ``(CUresult, *returns values)``; ``context``: it needs a
    current context (and fails with that context's sticky error)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(self: FakeCudaDriver, *args: Any) -> tuple[Any, ...]:
            with self._lock:
                return self._dispatch(fn, returns, context, args)

        call.returns = returns  # type: ignore[attr-defined]
        return call

    return wrap


def _error(error: Any) -> Any:
    return getattr(R, error) if isinstance(error, str) else R(int(error))


class FakeCudaDriver:
    """Looks like ``cuda.bindings.driver`` to ``riftco.backends.cuda``; see the module doc."""

    CUresult = _real.CUresult
    CUdevice_attribute = _real.CUdevice_attribute
    CUfunction_attribute = _real.CUfunction_attribute
    CUstream_flags = _real.CUstream_flags
    CUevent_flags = _real.CUevent_flags
    CUmemPool_attribute = _real.CUmemPool_attribute
    cuuint64_t = _real.cuuint64_t

    def __init__(self, devices: int = 1, **shape: Any) -> None:
        """``devices`` GPUs, each as ``DeviceShape(**shape)`` describes."""
        self.device_count = devices
        self.shape = DeviceShape(**shape)
        #: kernel name -> CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK (default: the device's)
        self.kernel_limits: dict[str, int] = {}
        self.calls: list[Call] = []
        self.launches: list[Launch] = []
        self.violations: list[str] = []
        self.injections: list[Injection] = []
        self.memory = DeviceMemory()
        self.pinned = PinnedMemory()
        self._lock = threading.RLock()
        self._thread = threading.local()  # .context: this thread's current context
        self._contexts: dict[int, _Context] = {}  # primary contexts by device ordinal
        self._kernels: dict[int, _Kernel] = {}  # function handle -> kernel
        self._events: dict[int, tuple[Stream, int] | None] = {}
        self._sources: dict[bytes, str] = {}  # CUBIN -> program source
        self._module_sources: dict[int, str | None] = {}
        #: Runs a launch's kernel when its stream gets there (``cuda_fake_compute``); None:
        #: launches compute nothing.
        self.executor: Executor | None = None
        self._handles = 0x1000

    # -- the test-facing API ---------------------------------------------------------------
    def fail(
        self,
        call: str,
        error: Any = "CUDA_ERROR_NOT_SUPPORTED",
        *,
        times: int | None = 1,
        after: int = 0,
        when: Callable[..., bool] | None = None,
    ) -> Injection:
        """Make ``call`` (e.g. ``"cuMemAllocAsync"``) return ``error`` (a ``CUresult`` or its
        name) without doing anything, ``times`` times (None: always), after letting
        ``after`` matching calls through; ``when(*args)`` narrows which calls match."""
        if not callable(getattr(self, call, None)) or not call.startswith("cu"):
            raise ValueError(f"the fake driver has no entry point {call!r}")
        injection = Injection(call, _error(error), times, after, when)
        self.injections.append(injection)
        return injection

    def fault_launch(
        self,
        error: Any = "CUDA_ERROR_ILLEGAL_ADDRESS",
        *,
        kernel: str | None = None,
        times: int | None = 1,
        after: int = 0,
    ) -> Injection:
        """Let a launch (of ``kernel``, or any) be accepted and fail when it runs: the next
        synchronising call (stream/context/event sync, a copy to pageable memory,
        ``cuMemFree``) returns ``error``. Sticky errors (:data:`STICKY`) then poison the
        context: every later call that needs it returns the same error."""
        injection = Injection("cuLaunchKernel", _error(error), times, after, None, kernel, True)
        self.injections.append(injection)
        return injection

    def clear_injections(self) -> None:
        self.injections.clear()

    def register_source(self, image: bytes, source: str) -> None:
        """Tell the fake which program source ``image`` (a CUBIN) was compiled from."""
        self._sources[bytes(image)] = source

    def expect_arguments(self, count: int | None) -> None:
        """How many buffers the runtime bound for the next launch on this thread (the
        ``install`` hook sets it around ``CudaRuntime.launch``)."""
        self._thread.expected = count

    def count(self, name: str) -> int:
        return sum(1 for c in self.calls if c.name == name)

    def call_counts(self) -> Counter[str]:
        return Counter(c.name for c in self.calls)

    def live_allocations(self) -> list[Allocation]:
        return self.memory.live()

    def assert_clean(self) -> None:
        """Raise listing every contract breach seen (also those swallowed on the way)."""
        if self.violations:
            shown = "\n  ".join(self.violations[:20])
            raise DriverContractError(
                f"{len(self.violations)} driver contract breaches:\n  {shown}"
            )

    # -- dispatch ---------------------------------------------------------------------------
    def _dispatch(
        self, fn: Callable[..., Any], returns: int, context: bool, args: tuple[Any, ...]
    ) -> tuple[Any, ...]:
        call = Call(len(self.calls), fn.__name__, args, threading.current_thread().name)
        self.calls.append(call)
        self._call = call
        for inj in self.injections:
            if inj.call == call.name and not inj.deferred:
                if (inj.when is None or inj.when(*args)) and inj.fires():
                    call.injected, call.result = True, inj.error
                    return (inj.error,) + (None,) * returns
        if context:
            ctx = self._current()
            if ctx.error in STICKY:
                call.result = ctx.error
                return (ctx.error,) + (None,) * returns
        result = fn(self, *args)
        call.result = result[0]
        return result

    def _violate(self, message: str) -> NoReturn:
        text = f"call #{self._call.index} {self._call.name}: {message}"
        self.violations.append(text)
        raise DriverContractError(text)

    def _handle(self) -> int:
        self._handles += 0x10
        return self._handles

    def _current(self) -> _Context:
        ctx = getattr(self._thread, "context", None)
        if ctx is None:
            self._violate(
                f"no context is current on thread {threading.current_thread().name!r} "
                "(contexts are per host thread: cuCtxSetCurrent first)"
            )
        return ctx

    def _device(self, dev: Any) -> int:
        index = int(dev)
        if not 0 <= index < self.device_count:
            self._violate(f"device {index} does not exist ({self.device_count} devices)")
        return index

    def _stream(self, ctx: _Context, handle: Any) -> Stream:
        stream = ctx.streams.get(int(handle or 0))
        if stream is None:
            self._violate(
                f"stream {handle!r} is not a stream of the current context (the device's own "
                "stream is required, never the legacy default stream 0)"
            )
        return stream

    def _range(self, ctx: _Context, address: Any, nbytes: int, what: str) -> Allocation:
        """The live allocation of ``ctx`` holding ``[address, address + nbytes)``."""
        address = int(address)
        alloc = self.memory.find(address)
        if alloc is None:
            self._violate(f"{what} 0x{address:x} is not inside any device allocation")
        if alloc.freed_at is not None:
            self._violate(f"{what} 0x{address:x} was freed: {alloc.describe()}")
        if alloc.context != ctx.handle:
            self._violate(f"{what} 0x{address:x} belongs to another context")
        if nbytes < 0 or address + nbytes > alloc.ptr + alloc.nbytes:
            self._violate(
                f"{what} [0x{address:x}, +{nbytes}) runs past its allocation {alloc.describe()} "
                f"by {address + nbytes - alloc.ptr - alloc.nbytes} bytes"
            )
        return alloc

    def _sync(self, ctx: _Context, streams: list[Stream]) -> Any:
        """Run the streams' queues; the error to report (sticky errors stay)."""
        for stream in streams:
            fault = stream.run_until()
            if fault is not None and ctx.error is None:
                ctx.error = fault
        error = ctx.error
        if error is not None and error not in STICKY:
            ctx.error = None
        return error if error is not None else R.CUDA_SUCCESS

    # -- init, devices, contexts ------------------------------------------------------------
    @_entry(context=False)
    def cuInit(self, Flags: int) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS,)

    @_entry(1, context=False)
    def cuDriverGetVersion(self) -> tuple[Any, ...]:
        return R.CUDA_SUCCESS, 13000

    @_entry(1, context=False)
    def cuDeviceGetCount(self) -> tuple[Any, ...]:
        return R.CUDA_SUCCESS, self.device_count

    @_entry(1, context=False)
    def cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        if not 0 <= int(ordinal) < self.device_count:
            return R.CUDA_ERROR_INVALID_DEVICE, None
        return R.CUDA_SUCCESS, _real.CUdevice(int(ordinal))

    @_entry(1, context=False)
    def cuDeviceGetName(self, length: int, dev: Any) -> tuple[Any, ...]:
        index = self._device(dev)
        return R.CUDA_SUCCESS, f"{self.shape.name} #{index}".encode().ljust(length, b"\0")[:length]

    @_entry(1, context=False)
    def cuDeviceGetAttribute(self, attrib: Any, dev: Any) -> tuple[Any, ...]:
        self._device(dev)
        values = {
            _DA.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.shape.capability[0],
            _DA.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.shape.capability[1],
            _DA.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132,
            _DA.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: self.shape.max_threads_per_block,
            _DA.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: 48 << 10,
            _DA.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: 50 << 20,
            _DA.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: int(self.shape.memory_pools),
            _DA.CU_DEVICE_ATTRIBUTE_WARP_SIZE: 32,
        }
        if attrib not in values:
            return R.CUDA_ERROR_INVALID_VALUE, None
        return R.CUDA_SUCCESS, values[attrib]

    @_entry(1, context=False)
    def cuDeviceTotalMem(self, dev: Any) -> tuple[Any, ...]:
        self._device(dev)
        return R.CUDA_SUCCESS, self.shape.total_memory

    @_entry(1, context=False)
    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple[Any, ...]:
        index = self._device(dev)
        if index not in self._contexts:
            ctx = _Context(self._handle(), index)
            self._contexts[index] = ctx
        return R.CUDA_SUCCESS, _real.CUcontext(self._contexts[index].handle)

    @_entry(context=False)
    def cuDevicePrimaryCtxRelease(self, dev: Any) -> tuple[Any, ...]:
        self._device(dev)
        return (R.CUDA_SUCCESS,)

    @_entry(context=False)
    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any, ...]:
        handle = int(ctx or 0)
        found = [c for c in self._contexts.values() if c.handle == handle]
        if handle and not found:
            self._violate(f"context 0x{handle:x} was never created")
        self._thread.context = found[0] if found else None
        return (R.CUDA_SUCCESS,)

    @_entry(1, context=False)
    def cuCtxGetCurrent(self) -> tuple[Any, ...]:
        ctx = getattr(self._thread, "context", None)
        return R.CUDA_SUCCESS, _real.CUcontext(ctx.handle if ctx else 0)

    @_entry()
    def cuCtxSynchronize(self) -> tuple[Any, ...]:
        ctx = self._current()
        return (self._sync(ctx, list(ctx.streams.values())),)

    # -- streams and events -----------------------------------------------------------------
    @_entry(1)
    def cuStreamCreate(self, Flags: int) -> tuple[Any, ...]:
        ctx = self._current()
        stream = Stream(self._handle(), ctx.handle)
        ctx.streams[stream.handle] = stream
        return R.CUDA_SUCCESS, _real.CUstream(stream.handle)

    @_entry()
    def cuStreamDestroy(self, hStream: Any) -> tuple[Any, ...]:
        ctx = self._current()
        stream = self._stream(ctx, hStream)
        self._sync(ctx, [stream])
        del ctx.streams[stream.handle]
        return (R.CUDA_SUCCESS,)

    @_entry()
    def cuStreamSynchronize(self, hStream: Any) -> tuple[Any, ...]:
        ctx = self._current()
        return (self._sync(ctx, [self._stream(ctx, hStream)]),)

    @_entry(1)
    def cuEventCreate(self, Flags: int) -> tuple[Any, ...]:
        handle = self._handle()
        self._events[handle] = None
        return R.CUDA_SUCCESS, _real.CUevent(handle)

    def _event(self, hEvent: Any) -> int:
        handle = int(hEvent or 0)
        if handle not in self._events:
            self._violate(f"event {hEvent!r} was never created (or was destroyed)")
        return handle

    @_entry()
    def cuEventRecord(self, hEvent: Any, hStream: Any) -> tuple[Any, ...]:
        stream = self._stream(self._current(), hStream)
        self._events[self._event(hEvent)] = (stream, stream.enqueued)
        return (R.CUDA_SUCCESS,)

    def _event_wait(self, hEvent: Any) -> Any:
        mark = self._events[self._event(hEvent)]
        if mark is None:  # never recorded: complete
            return R.CUDA_SUCCESS
        stream, count = mark
        ctx = self._current()
        fault = stream.run_until(count)
        if fault is not None and ctx.error is None:
            ctx.error = fault
        return self._sync(ctx, [])

    @_entry()
    def cuEventSynchronize(self, hEvent: Any) -> tuple[Any, ...]:
        return (self._event_wait(hEvent),)

    @_entry()
    def cuEventQuery(self, hEvent: Any) -> tuple[Any, ...]:
        return (self._event_wait(hEvent),)  # the device always gets there eventually

    @_entry()
    def cuEventDestroy(self, hEvent: Any) -> tuple[Any, ...]:
        del self._events[self._event(hEvent)]
        return (R.CUDA_SUCCESS,)

    # -- device memory ----------------------------------------------------------------------
    @_entry(1)
    def cuDeviceGetDefaultMemPool(self, dev: Any) -> tuple[Any, ...]:
        self._device(dev)
        if not self.shape.memory_pools:
            return R.CUDA_ERROR_NOT_SUPPORTED, None
        return R.CUDA_SUCCESS, _real.CUmemoryPool(0x900 + int(dev))

    @_entry()
    def cuMemPoolSetAttribute(self, pool: Any, attr: Any, value: Any) -> tuple[Any, ...]:
        return (R.CUDA_SUCCESS,)

    def _allocate(self, ctx: _Context, bytesize: int, call: str) -> tuple[Any, ...]:
        n = int(bytesize)
        if n <= 0:
            return R.CUDA_ERROR_INVALID_VALUE, None
        if self.memory.live_bytes + n > self.shape.total_memory:
            return R.CUDA_ERROR_OUT_OF_MEMORY, None
        alloc = self.memory.allocate(n, ctx.handle, call, self._call.index)
        return R.CUDA_SUCCESS, _real.CUdeviceptr(alloc.ptr)

    @_entry(1)
    def cuMemAllocAsync(self, bytesize: int, hStream: Any) -> tuple[Any, ...]:
        ctx = self._current()
        self._stream(ctx, hStream)
        if not self.shape.memory_pools:
            return R.CUDA_ERROR_NOT_SUPPORTED, None
        return self._allocate(ctx, bytesize, "cuMemAllocAsync")

    @_entry(1)
    def cuMemAlloc(self, bytesize: int) -> tuple[Any, ...]:
        return self._allocate(self._current(), bytesize, "cuMemAlloc")

    def _freeable(self, ctx: _Context, dptr: Any) -> Allocation:
        ptr = int(dptr)
        alloc = self.memory.by_ptr.get(ptr)
        if alloc is None:
            self._violate(f"0x{ptr:x} is not a pointer an allocation returned")
        if alloc.freed_at is not None:
            self._violate(f"double free of {alloc.describe()}")
        return self._range(ctx, ptr, alloc.nbytes, "pointer to free")

    @_entry()
    def cuMemFreeAsync(self, dptr: Any, hStream: Any) -> tuple[Any, ...]:
        ctx = self._current()
        stream = self._stream(ctx, hStream)
        alloc = self._freeable(ctx, dptr)
        others = {s: n for s, n in alloc.pending.items() if n and s != stream.handle}
        if others:
            self._violate(
                f"{alloc.describe()} freed on stream 0x{stream.handle:x} while "
                f"{sum(others.values())} enqueued operations on other streams still use it "
                "(the free is not ordered after them)"
            )
        self.memory.release(alloc, self._call.index)

        def drop() -> None:
            alloc.data = None

        stream.enqueue(Operation(self._call.index, "free", drop))
        return (R.CUDA_SUCCESS,)

    @_entry()
    def cuMemFree(self, dptr: Any) -> tuple[Any, ...]:
        ctx = self._current()
        alloc = self._freeable(ctx, dptr)
        error = self._sync(ctx, list(ctx.streams.values()))  # it waits for the device
        if error != R.CUDA_SUCCESS:
            return (error,)
        self.memory.release(alloc, self._call.index)
        alloc.data = None
        return (R.CUDA_SUCCESS,)

    @_entry(2)
    def cuMemGetInfo(self) -> tuple[Any, ...]:
        self._current()
        total = self.shape.total_memory
        return R.CUDA_SUCCESS, total - self.memory.live_bytes, total

    # -- host memory and copies -------------------------------------------------------------
    @_entry(1)
    def cuMemHostAlloc(self, bytesize: int, Flags: int) -> tuple[Any, ...]:
        self._current()
        return R.CUDA_SUCCESS, self.pinned.allocate(int(bytesize)).address

    @_entry()
    def cuMemFreeHost(self, p: Any) -> tuple[Any, ...]:
        block = self.pinned.blocks.get(int(p))
        if block is None or block.freed_at is not None:
            self._violate(f"0x{int(p):x} is not live pinned memory from cuMemHostAlloc")
        block.freed_at = self._call.index
        return (R.CUDA_SUCCESS,)

    def _host(self, host: Any, nbytes: int, what: str) -> tuple[int, bool]:
        """``(address, pinned)`` of a host buffer argument; pinned ranges must fit."""
        address = int(host.ctypes.data) if isinstance(host, np.ndarray) else int(host)
        block = self.pinned.find(address)
        if block is None:
            return address, False
        if block.freed_at is not None:
            self._violate(f"{what} 0x{address:x} is pinned memory freed by call #{block.freed_at}")
        if address + nbytes > block.address + block.nbytes:
            self._violate(f"{what} [0x{address:x}, +{nbytes}) runs past its pinned block")
        return address, True

    def _upload(self, dst: Any, src: Any, n: int, stream: Stream | None) -> tuple[Any, ...]:
        ctx = self._current()
        n = int(n)
        alloc = self._range(ctx, dst, n, "destination")
        host, pinned = self._host(src, n, "source")
        offset = int(dst) - alloc.ptr
        if not pinned or stream is None:  # the driver reads pageable memory before returning
            error = self._sync(ctx, [stream] if stream else list(ctx.streams.values()))
            if error != R.CUDA_SUCCESS:
                return (error,)
            alloc.data[offset : offset + n] = ctypes.string_at(host, n)
            return (R.CUDA_SUCCESS,)
        snapshot, index = ctypes.string_at(host, n), self._call.index

        def copy() -> None:
            now = ctypes.string_at(host, n)
            if now != snapshot:
                self.violations.append(
                    f"call #{index} cuMemcpyHtoDAsync: pinned source 0x{host:x} (+{n}) was "
                    "rewritten before the copy ran (staging reused without waiting for it)"
                )
            alloc.data[offset : offset + n] = now

        stream.enqueue(Operation(index, "upload", copy, (alloc,)))
        return (R.CUDA_SUCCESS,)

    def _download(self, dst: Any, src: Any, n: int, stream: Stream | None) -> tuple[Any, ...]:
        ctx = self._current()
        n = int(n)
        alloc = self._range(ctx, src, n, "source")
        host, pinned = self._host(dst, n, "destination")
        offset = int(src) - alloc.ptr

        def copy() -> None:
            ctypes.memmove(host, bytes(alloc.data[offset : offset + n]), n)

        if stream is None:  # synchronous: after everything enqueued before it
            error = self._sync(ctx, list(ctx.streams.values()))
            if error == R.CUDA_SUCCESS:
                copy()
            return (error,)
        stream.enqueue(Operation(self._call.index, "download", copy, (alloc,)))
        if pinned:
            return (R.CUDA_SUCCESS,)
        return (self._sync(ctx, [stream]),)  # pageable: returns once the copy is done

    @_entry()
    def cuMemcpyHtoDAsync(self, dstDevice: Any, srcHost: Any, ByteCount: int, hStream: Any):
        stream = self._stream(self._current(), hStream)
        return self._upload(dstDevice, srcHost, ByteCount, stream)

    @_entry()
    def cuMemcpyDtoHAsync(self, dstHost: Any, srcDevice: Any, ByteCount: int, hStream: Any):
        stream = self._stream(self._current(), hStream)
        return self._download(dstHost, srcDevice, ByteCount, stream)

    @_entry()
    def cuMemcpyHtoD(self, dstDevice: Any, srcHost: Any, ByteCount: int) -> tuple[Any, ...]:
        return self._upload(dstDevice, srcHost, ByteCount, None)

    @_entry()
    def cuMemcpyDtoH(self, dstHost: Any, srcDevice: Any, ByteCount: int) -> tuple[Any, ...]:
        return self._download(dstHost, srcDevice, ByteCount, None)

    @_entry()
    def cuMemsetD8Async(self, dstDevice: Any, uc: int, N: int, hStream: Any) -> tuple[Any, ...]:
        ctx = self._current()
        stream = self._stream(ctx, hStream)
        alloc = self._range(ctx, dstDevice, int(N), "destination")
        offset, n, value = int(dstDevice) - alloc.ptr, int(N), int(uc) & 0xFF

        def fill() -> None:
            alloc.data[offset : offset + n] = bytes([value]) * n

        stream.enqueue(Operation(self._call.index, "memset", fill, (alloc,)))
        return (R.CUDA_SUCCESS,)

    # -- modules and launches ---------------------------------------------------------------
    @_entry(1)
    def cuModuleLoadData(self, image: Any) -> tuple[Any, ...]:
        ctx = self._current()
        blob = bytes(image)
        source = self._sources.get(blob)
        try:
            recorded = cubin_kernels(blob)
        except SignatureError:
            recorded = None
        if source is None and recorded is None:
            return R.CUDA_ERROR_INVALID_IMAGE, None
        kernels = recorded if source is None else source_kernels(source)
        if recorded is not None and source is not None and recorded != kernels:
            differ = sorted(
                k for k in set(kernels) | set(recorded) if kernels.get(k) != recorded.get(k)
            )
            self._violate(
                "the program source and its CUBIN disagree on the parameters of "
                f"{differ[:5]}: source {[kernels.get(k) for k in differ[:5]]}, "
                f"CUBIN {[recorded.get(k) for k in differ[:5]]}"
            )
        handle = self._handle()
        ctx.modules[handle] = kernels
        self._module_sources[handle] = source
        return R.CUDA_SUCCESS, _real.CUmodule(handle)

    @_entry()
    def cuModuleUnload(self, hmod: Any) -> tuple[Any, ...]:
        ctx = self._current()
        if ctx.modules.pop(int(hmod), None) is None:
            self._violate(f"module {hmod!r} is not loaded in the current context")
        return (R.CUDA_SUCCESS,)

    @_entry(1)
    def cuModuleGetFunction(self, hmod: Any, name: Any) -> tuple[Any, ...]:
        ctx = self._current()
        kernels = ctx.modules.get(int(hmod))
        if kernels is None:
            self._violate(f"module {hmod!r} is not loaded in the current context")
        text = name.decode() if isinstance(name, bytes) else str(name)
        if text not in kernels:
            return R.CUDA_ERROR_NOT_FOUND, None
        handle = self._handle()
        source = self._module_sources.get(int(hmod))
        self._kernels[handle] = _Kernel(int(hmod), text, kernels[text], source)
        return R.CUDA_SUCCESS, _real.CUfunction(handle)

    def _kernel(self, ctx: _Context, hfunc: Any) -> _Kernel:
        kernel = self._kernels.get(int(hfunc or 0))
        if kernel is None or kernel.module not in ctx.modules:
            self._violate(f"function {hfunc!r} is not a kernel of a module loaded in this context")
        return kernel

    def _limit(self, kernel: _Kernel) -> int:
        return self.kernel_limits.get(kernel.name, self.shape.max_threads_per_block)

    @_entry(1)
    def cuFuncGetAttribute(self, attrib: Any, hfunc: Any) -> tuple[Any, ...]:
        kernel = self._kernel(self._current(), hfunc)
        values = {
            _FA.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: self._limit(kernel),
            _FA.CU_FUNC_ATTRIBUTE_NUM_REGS: 32,
            _FA.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: 0,
        }
        return R.CUDA_SUCCESS, values.get(attrib, 0)

    def _arguments(self, kernel: _Kernel, params: Any) -> list[int]:
        """The device pointers bound, read from a ``void**`` address or a (values, types)
        pair; the slots read are then poisoned (see :data:`POISON`)."""
        if isinstance(params, (tuple, list)):
            pair = len(params) == 2 and isinstance(params[0], (tuple, list))
            values = list(params[0]) if pair else list(params)
            if len(values) != kernel.params:
                self._violate(
                    f"{kernel.name} takes {kernel.params} buffers; {len(values)} were bound"
                )
            return [int(v) for v in values]
        address = int(params or 0)
        if kernel.params and not address:
            self._violate(f"{kernel.name} takes {kernel.params} buffers; kernelParams is NULL")
        slots = (ctypes.c_uint64 * kernel.params).from_address(address) if address else []
        values = []
        for i, slot in enumerate(slots):
            cell = ctypes.c_uint64.from_address(slot)
            values.append(int(cell.value))
            cell.value = POISON + i
        return values

    @_entry()
    def cuLaunchKernel(
        self,
        f: Any,
        gridDimX: int,
        gridDimY: int,
        gridDimZ: int,
        blockDimX: int,
        blockDimY: int,
        blockDimZ: int,
        sharedMemBytes: int,
        hStream: Any,
        kernelParams: Any,
        extra: Any,
    ) -> tuple[Any, ...]:
        ctx = self._current()
        kernel = self._kernel(ctx, f)
        stream = self._stream(ctx, hStream)
        grid = (int(gridDimX), int(gridDimY), int(gridDimZ))
        block = (int(blockDimX), int(blockDimY), int(blockDimZ))
        limit = self._limit(kernel)
        if block[0] % 32 or block[1:] != (1, 1) or not 0 < block[0] <= limit:
            self._violate(
                f"{kernel.name}: block {block} must be (32k, 1, 1) with 32k <= {limit}, "
                "the kernel's CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"
            )
        if not 1 <= grid[0] < 2**31 or grid[1:] != (1, 1):
            self._violate(f"{kernel.name}: grid {grid} must be (1..2^31-1, 1, 1)")
        if int(sharedMemBytes) or extra not in (None, 0):
            self._violate(f"{kernel.name}: dynamic shared memory / extra are not used by riftco")
        expected = getattr(self._thread, "expected", None)
        if expected is not None and expected != kernel.params:
            self._violate(
                f"{kernel.name} takes {kernel.params} buffers (its KERNEL signature); the "
                f"runtime bound {expected}"
            )
        pointers = self._arguments(kernel, kernelParams)
        uses = []
        for i, ptr in enumerate(pointers):
            if POISON <= ptr < POISON + 4096:
                self._violate(
                    f"{kernel.name}: argument {i} was not bound for this launch (its slot still "
                    "holds what a previous launch left)"
                )
            uses.append(self._range(ctx, ptr, 0, f"{kernel.name} argument {i}"))
        fault = None
        for inj in self.injections:
            if inj.deferred and inj.kernel in (None, kernel.name) and inj.fires():
                fault = inj.error
                break
        self.launches.append(
            Launch(self._call.index, kernel.name, grid, block, stream.handle, tuple(pointers))
        )
        run: Callable[[], None] = lambda: None  # noqa: E731
        if self.executor is not None and kernel.source is not None:
            run = functools.partial(
                self.executor, kernel.source, kernel.name, grid[0] * block[0], block[0],
                tuple(zip(uses, pointers)),
            )  # fmt: skip
        stream.enqueue(Operation(self._call.index, kernel.name, run, tuple(uses), fault))
        return (R.CUDA_SUCCESS,)

    # -- errors -----------------------------------------------------------------------------
    @_entry(1, context=False)
    def cuGetErrorName(self, error: Any) -> tuple[Any, ...]:
        try:
            return R.CUDA_SUCCESS, R(int(error)).name.encode()
        except ValueError:
            return R.CUDA_ERROR_INVALID_VALUE, None

    @_entry(1, context=False)
    def cuGetErrorString(self, error: Any) -> tuple[Any, ...]:
        try:
            doc = (R(int(error)).__doc__ or "").strip()
        except ValueError:
            return R.CUDA_ERROR_INVALID_VALUE, None
        return R.CUDA_SUCCESS, " ".join(doc.split(".")[0].split()).encode()


def _swap(monkeypatch: Any, original: Any, replacement: Any) -> None:
    """Replace ``original`` wherever a module of ``riftco.backends.cuda`` holds it (the
    runtime imports ``load``/``probe`` by name, the backend uses ``driver.probe``)."""
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("riftco.backends.cuda"):
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                monkeypatch.setattr(module, attr, replacement)


def install(monkeypatch: Any, fake: FakeCudaDriver | None = None, **options: Any) -> FakeCudaDriver:
    """Route ``riftco.backends.cuda`` to ``fake`` (a new ``FakeCudaDriver(**options)`` by
    default) until ``monkeypatch`` undoes it: driver loading and the probe (a fresh cached
    probe), the per-process device table, and two hooks that tell the fake each CUBIN's
    source and each launch's buffer count. Use it with a fresh registry (the ``registry``
    fixture), since the registry caches backend instances and availability."""
    from riftco.backends.cuda import compiler, driver, runtime

    fake = fake or FakeCudaDriver(**options)
    _swap(monkeypatch, driver.load, lambda: (fake, ""))
    probe = functools.lru_cache(maxsize=1)(driver.probe.__wrapped__)
    _swap(monkeypatch, driver.probe, probe)
    monkeypatch.setattr(runtime, "_devices", {})
    real_build = compiler.build

    def build(source: str, name: str, arch: str, extra: Any = ()) -> tuple[bytes, Any]:
        cubin, log = real_build(source, name, arch, extra)
        fake.register_source(cubin, source)
        return cubin, log

    _swap(monkeypatch, real_build, build)
    real_launch = runtime.CudaRuntime.launch

    def launch(self: Any, kernel: Any, global_threads: int, buffers: Any) -> None:
        fake.expect_arguments(len(buffers))
        try:
            real_launch(self, kernel, global_threads, buffers)
        finally:
            fake.expect_arguments(None)

    monkeypatch.setattr(runtime.CudaRuntime, "launch", launch)
    return fake
