"""riftco's own Metal runtime: Metal's Objective-C API through :mod:`.objc` (cffi ABI mode).

Why not metalcompute (issue 29, docs/METAL.md): it makes a command buffer, an encoder and
an uncached pipeline state per dispatch, keeps every run in a never-pruned dictionary
scanned from Metal's completion thread, and never reads a command buffer's status. Here:

- **Batched submission.** Dispatches are encoded into one command buffer and one serial
  compute encoder until a sync point: a download, ``synchronize``, an upload into a buffer
  that pending work uses, or :data:`MAX_BATCH` dispatches; then ``endEncoding`` +
  ``commit``. A training step (298 dispatches, one loss download) is one command buffer.
- **Completion checked.** Every committed command buffer is waited for at the next sync
  point and its ``status`` read; an error raises :class:`MetalCommandBufferError` naming
  the device, Metal's description and the first and last kernels it held, after every
  pending command buffer has been retired, so riftco stays usable.
- **Hazards.** One queue, one serial encoder per command buffer and buffers in Metal's
  default tracked hazard mode: dispatches see each other's writes in order, so the caching
  allocator may hand a freed buffer to the next op at once (as on OpenCL). The host is the
  only other writer: an upload into a buffer a pending dispatch uses waits first.
- **Lifetimes exact.** What ``new…``/``alloc``/``MTLCreateSystemDefaultDevice`` return is
  released once; the autoreleased command buffer and encoder are retained while in use
  and every call that may autorelease runs inside an autorelease pool. Buffers and
  libraries that die while a pending command buffer may use them are released after it
  completes (Metal's command buffers retain them too; this does not rely on it).
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from riftco.errors import BackendUnavailableError, KernelCompileError, RiftcoError
from riftco.kernel_host.build_log import BuildLog
from riftco.kernel_host.runtime import RuntimeCapabilities

from .objc import ObjC, ObjCLibrary, ffi, load_system_library

#: MTLLanguageVersion2_3 (macOS 11, every Apple-silicon Mac): what the kernels are written
#: and syntax-checked for; docs/DECISIONS.md says why not newer. Checked against the table.
LANGUAGE_VERSION = 131075
#: MTLResourceStorageModeShared: unified memory the host reads and writes via ``contents``.
STORAGE_SHARED = 0
STATUS_COMPLETED = 4  # MTLCommandBufferStatusCompleted
STATUS_ERROR = 5  # MTLCommandBufferStatusError
#: Dispatches per command buffer before it is committed without a sync point. A training
#: step of the ``make train`` model is 298, so a step is one command buffer; the cap bounds
#: how much work waits unsubmitted (and the resources it holds) in a loop that never syncs.
MAX_BATCH = 1024
#: Committed command buffers not yet waited for (only the cap commits without a wait);
#: beyond this the oldest is waited for, so a loop that never syncs stays bounded.
MAX_IN_FLIGHT = 4


class MetalCommandBufferError(RiftcoError, RuntimeError):
    """A command buffer ended with ``MTLCommandBufferStatusError`` (a GPU fault, a timeout)."""


class ObjCBuffer:
    """A shared-storage ``MTLBuffer`` and a numpy view of its ``contents``."""

    __slots__ = ("handle", "nbytes", "view", "__weakref__")

    def __init__(self, handle: int, nbytes: int, view: np.ndarray) -> None:
        self.handle = handle
        self.nbytes = nbytes
        self.view = view


@dataclass(eq=False)
class ObjCKernel:
    """A cached ``MTLComputePipelineState`` and the group size Metal chose for it."""

    pipeline: int
    name: str
    group_size: int
    execution_width: int


@dataclass(eq=False)
class _Batch:
    """A command buffer being encoded or in flight, and what it uses."""

    number: int
    command_buffer: int
    encoder: int
    buffers: set[int] = field(default_factory=set)
    dispatches: int = 0
    first: str = ""
    last: str = ""


class ObjCProgram:
    """An ``MTLLibrary``; each function's pipeline state is made once, on first use."""

    def __init__(self, runtime: ObjCMetalRuntime, library: int, name: str, log: BuildLog) -> None:
        self._runtime = runtime
        self.library = library
        self.name = name
        self.build_log = log
        self._kernels: dict[str, ObjCKernel] = {}
        runtime._release_with(self, [library])

    def kernel(self, name: str) -> ObjCKernel:
        """The function's pipeline state, made once; it lives as long as the kernel object
        (which may outlive this program, as an OpenCL kernel keeps its program)."""
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = self._runtime._pipeline(self, name)
            self._runtime._release_with(k, [k.pipeline])
        return k


class ObjCMetalRuntime:
    """Implements ``riftco.kernel_host.runtime.Runtime`` over Metal's Objective-C API."""

    def __init__(
        self, library: ObjCLibrary | None = None, index: int = 0, fast_math: bool = False
    ) -> None:
        if library is None:
            try:
                library = load_system_library()
            except OSError as exc:
                raise BackendUnavailableError(f"[metal] objc runtime cannot start: {exc}") from None
        if index != 0:
            raise BackendUnavailableError(
                f"[metal] the objc runtime drives the system default device only (metal:0), "
                f"not metal:{index}"
            )
        self.objc = objc = ObjC(library)
        self.library_description = library.description
        self.fast_math = bool(fast_math)
        device = int(ffi.cast("uintptr_t", library.create_system_default_device()))
        if not device:
            raise BackendUnavailableError(
                "[metal] MTLCreateSystemDefaultDevice() returned nil (no Metal device)"
            )
        self.device = device
        self._owned = [device]  # released by close(), newest first
        with objc.autorelease_pool():
            self.device_name = objc.text(objc.send(device, "name"))
            #: Read once: the kernels and docs/METAL.md rely on these.
            self.facts = {
                "unified_memory": objc.send(device, "hasUnifiedMemory"),
                "working_set_bytes": int(objc.send(device, "recommendedMaxWorkingSetSize")),
                "max_threadgroup_memory": int(objc.send(device, "maxThreadgroupMemoryLength")),
            }
            self.queue = self._own(objc.send(device, "newCommandQueue"))
            self.options = self._own(objc.send(objc.cls("MTLCompileOptions"), "new"))
            objc.send(self.options, "setLanguageVersion:", LANGUAGE_VERSION)
            objc.send(self.options, "setFastMathEnabled:", self.fast_math)
        #: As metalcompute's runtime declares: Metal picks each pipeline's group size.
        self.capabilities = RuntimeCapabilities(
            is_cpu=False, serial_rows=False, group_size_hint=None, matmul_wide_min_tiles=math.inf
        )
        self._batch: _Batch | None = None
        self._in_flight: deque[_Batch] = deque()
        self._batches = 0  # command buffers opened so far
        self._graveyard: list[tuple[int, list[int]]] = []  # (after batch number, handles)
        self._closed = False
        #: Host waits that found pending work (as metalcompute's runtime counts them),
        #: uploads that needed none, command buffers committed and dispatches encoded.
        self.counters = {"drains": 0, "upload_waits_skipped": 0, "command_buffers": 0,
                         "dispatches": 0}  # fmt: skip

    def _own(self, handle: int) -> int:
        if not handle:
            raise BackendUnavailableError(f"[metal] {self.device_name}: Metal returned nil")
        self._owned.append(handle)
        return handle

    # -- buffers ---------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> ObjCBuffer:
        n = max(int(nbytes), 1)
        send = self.objc.send
        handle = send(self.device, "newBufferWithLength:options:", n, STORAGE_SHARED)
        if not handle:
            raise MemoryError(f"{self.device_name}: newBufferWithLength:{n} returned nil")
        view = np.frombuffer(ffi.buffer(send(handle, "contents"), n), dtype=np.uint8)
        buf = ObjCBuffer(handle, n, view)
        self._release_with(buf, [handle])
        return buf

    def _uses(self, handle: int) -> _Batch | None:
        """The newest pending command buffer that binds ``handle``, if any."""
        if self._batch is not None and handle in self._batch.buffers:
            return self._batch
        for batch in reversed(self._in_flight):
            if handle in batch.buffers:
                return batch
        return None

    def upload(self, buffer: ObjCBuffer, array: np.ndarray) -> None:
        user = self._uses(buffer.handle)
        if user is not None:
            self._wait_through(user)
        elif self._batch is not None or self._in_flight:
            self.counters["upload_waits_skipped"] += 1
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        buffer.view[: data.size] = data

    def download(self, buffer: ObjCBuffer, nbytes: int) -> np.ndarray:
        self.synchronize()
        return buffer.view[:nbytes].copy()

    def constant(self, data: bytes) -> ObjCBuffer:
        buf = self.allocate(len(data))  # new, so no pending work uses it: no wait
        buf.view[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        return buf

    # -- compiling -------------------------------------------------------------------------
    def compile(self, source: str, name: str) -> ObjCProgram:
        """``newLibraryWithSource:options:error:``: the compiler's log raises on failure
        and is kept as the BuildLog on success (warnings come back in ``error``)."""
        objc = self.objc
        label = f"{name} on {self.device_name}"
        error = ffi.new("void **")
        with objc.autorelease_pool():
            library = objc.send(
                self.device, "newLibraryWithSource:options:error:",
                objc.string(source), self.options, error,
            )  # fmt: skip
            log = objc.description(int(ffi.cast("uintptr_t", error[0])))
        if not library:
            raise KernelCompileError(f"[compile] {label} failed to build:\n{log}")
        return ObjCProgram(self, library, name, BuildLog.parse(log, label))

    def _pipeline(self, program: ObjCProgram, name: str) -> ObjCKernel:
        objc = self.objc
        error = ffi.new("void **")
        with objc.autorelease_pool():
            function = objc.send(program.library, "newFunctionWithName:", objc.string(name))
            if not function:
                raise KernelCompileError(
                    f"[compile] function {name!r} not found in {program.name} on {self.device_name}"
                )
            pipeline = objc.send(
                self.device, "newComputePipelineStateWithFunction:error:", function, error
            )
            objc.release(function)
            if not pipeline:
                why = objc.description(int(ffi.cast("uintptr_t", error[0])))
                raise KernelCompileError(
                    f"[compile] no pipeline state for {name!r} of {program.name} on "
                    f"{self.device_name}: {why}"
                )
        return ObjCKernel(
            pipeline, name,
            int(objc.send(pipeline, "maxTotalThreadsPerThreadgroup")),
            int(objc.send(pipeline, "threadExecutionWidth")),
        )  # fmt: skip

    # -- submission ------------------------------------------------------------------------
    def _open(self) -> _Batch:
        objc = self.objc
        with objc.autorelease_pool():  # both come back autoreleased: keep them past the pool
            cb = objc.retain(objc.send(self.queue, "commandBuffer"))
            encoder = objc.retain(objc.send(cb, "computeCommandEncoder"))
        self._batches += 1
        self._batch = _Batch(self._batches, cb, encoder)
        return self._batch

    def launch(self, kernel: ObjCKernel, global_threads: int, buffers: Sequence[Any]) -> None:
        batch = self._batch or self._open()
        send, encoder = self.objc.send, batch.encoder
        send(encoder, "setComputePipelineState:", kernel.pipeline)
        used = batch.buffers
        for index, buf in enumerate(buffers):
            send(encoder, "setBuffer:offset:atIndex:", buf.handle, 0, index)
            used.add(buf.handle)
        g = kernel.group_size
        groups = max(1, -(-int(global_threads) // g))
        send(encoder, "dispatchThreadgroups:threadsPerThreadgroup:", (groups, 1, 1), (g, 1, 1))
        if not batch.dispatches:
            batch.first = kernel.name
        batch.last = kernel.name
        batch.dispatches += 1
        self.counters["dispatches"] += 1
        if batch.dispatches >= MAX_BATCH:
            self._commit()
            if len(self._in_flight) > MAX_IN_FLIGHT:
                self._wait_through(self._in_flight[0])

    def _commit(self) -> None:
        batch, self._batch = self._batch, None
        if batch is None:
            return
        send = self.objc.send
        send(batch.encoder, "endEncoding")
        self.objc.release(batch.encoder)
        batch.encoder = 0
        send(batch.command_buffer, "commit")
        self.counters["command_buffers"] += 1
        self._in_flight.append(batch)

    def synchronize(self) -> None:
        self._commit()
        if self._in_flight:
            self._wait_through(self._in_flight[-1])

    def _wait_through(self, target: _Batch) -> None:
        """Commit ``target`` if it is still open, then wait for it and everything before it
        (one queue: in order); read every status; raise the first failure afterwards."""
        if target is self._batch:
            self._commit()
        self.counters["drains"] += 1
        objc = self.objc
        failures: list[str] = []
        done = 0
        while self._in_flight and self._in_flight[0].number <= target.number:
            batch = self._in_flight.popleft()
            cb = batch.command_buffer
            objc.send(cb, "waitUntilCompleted")
            if objc.send(cb, "status") == STATUS_ERROR:
                with objc.autorelease_pool():
                    why = objc.description(objc.send(cb, "error")) or "no description"
                failures.append(
                    f"{why} (command buffer {batch.number}: {batch.dispatches} dispatches, "
                    f"first {batch.first}, last {batch.last})"
                )
            objc.release(cb)
            done = batch.number
        self._bury(done)
        if failures:
            raise MetalCommandBufferError(
                f"[metal] command buffer failed on {self.device_name}: " + "; ".join(failures)
            )

    # -- lifetimes -------------------------------------------------------------------------
    def _pending_number(self) -> int:
        """The newest command buffer that may still use a resource dying now (0: none)."""
        if self._batch is not None:
            return self._batch.number
        return self._in_flight[-1].number if self._in_flight else 0

    def _release_with(self, owner: object, handles: list[int]) -> None:
        """Release ``handles`` when ``owner`` is collected; not at interpreter exit, where
        the process's end frees everything and the library may already be gone."""
        weakref.finalize(owner, self._release_later, handles).atexit = False

    def _release_later(self, handles: list[int]) -> None:
        """Release ``handles`` now, or once the command buffers that may use them are done."""
        pending = 0 if self._closed else self._pending_number()
        if pending:
            self._graveyard.append((pending, list(handles)))
            return
        for h in handles:
            self.objc.release(h)

    def _bury(self, completed: int) -> None:
        if not self._graveyard:
            return
        keep = [(n, hs) for n, hs in self._graveyard if n > completed]
        dead = [hs for n, hs in self._graveyard if n <= completed]
        self._graveyard = keep
        for handles in dead:
            for h in handles:
                self.objc.release(h)

    def close(self) -> None:
        """Finish pending work and release what this runtime owns (tests, shutdown)."""
        if self._closed:
            return
        try:
            self.synchronize()
        finally:
            self._closed = True
            self._bury(self._batches)
            for h in reversed(self._owned):
                self.objc.release(h)
            self._owned = []

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass
