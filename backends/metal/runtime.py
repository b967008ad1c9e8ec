"""The Metal runtime over metalcompute (or any module with its surface, e.g. the stand-in).

metalcompute facts this follows (read from its source): ``dev.kernel(src)`` compiles a
library and raises ``metalcompute.error`` with the compiler's message; ``.function(name)``
looks a function up; ``fn(count, *buffers)`` binds buffers in order at offset 0 and
dispatches ``count`` threads rounded up to whole threadgroups of the pipeline's maximum
size; it returns a handle at once and deleting the handle waits for that command buffer.
Command buffers go to one queue and run in submission order. Buffers are shared memory
read and written through the Python buffer protocol.

So: launches keep their handles until a sync point. A download waits for all pending
work (it is a sync point). An upload waits only for the pending launches that bound that
very buffer (the GPU may still read or write it); a buffer no pending launch uses is
written at once, so uploading the next batch does not stall the queue mid-step. Waiting
drops the newest handle first: command buffers of one queue run in order, so one blocking
wait covers the rest, whose drops then return at once. docs/METAL.md counts the calls.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
from riftco.errors import KernelCompileError
from riftco.kernel_host.build_log import BuildLog, capture_compiler_output
from riftco.kernel_host.runtime import RuntimeCapabilities

#: Handles kept before the oldest is waited for, bounding command buffers in flight.
MAX_PENDING = 512


class MetalProgram:
    def __init__(self, library: Any, name: str, device_name: str, build_log: BuildLog) -> None:
        self.library = library
        self.name = name
        self.device_name = device_name
        self.build_log = build_log

    def kernel(self, name: str) -> Any:
        try:
            return self.library.function(name)
        except Exception as exc:
            raise KernelCompileError(
                f"[compile] function {name!r} not found in {self.name} on {self.device_name}: {exc}"
            ) from None


class MetalRuntime:
    """Implements ``riftco.kernel_host.runtime.Runtime`` over a metalcompute-like module."""

    def __init__(self, mc: Any, index: int = 0) -> None:
        self.mc = mc
        self.device = mc.Device(index)
        #: metalcompute picks each pipeline's group size itself (no hint), Apple GPUs take
        #: the tiled kernels and threadgroup trees, and ``matmul_wide`` is CUDA's alone. The
        #: stand-in (``standin.py``, over PoCL) declares the same: it stands in for Metal.
        self.capabilities = RuntimeCapabilities(
            is_cpu=False, serial_rows=False, group_size_hint=None, matmul_wide_min_tiles=math.inf
        )
        try:
            self.device_name = str(mc.get_devices()[index].deviceName)
        except Exception:  # naming is cosmetic
            self.device_name = str(self.device)
        self._pending: deque[tuple[int, Any]] = deque()  # (launch number, handle)
        self._issued = 0  # launches queued so far
        self._waited = 0  # every launch up to this number has completed
        self._last_use: dict[int, int] = {}  # id(buffer) -> number of its last launch
        #: Host waits that found pending work, and uploads that skipped one (bench/tests).
        self.counters = {"drains": 0, "upload_waits_skipped": 0}

    def allocate(self, nbytes: int) -> Any:
        return self.device.buffer(max(int(nbytes), 1))

    def upload(self, buffer: Any, array: np.ndarray) -> None:
        # A recycled buffer may still be read (or written) by queued kernels: wait for those.
        seq = self._last_use.get(id(buffer), 0)
        if seq > self._waited:
            self._wait_through(seq)
        elif self._pending:
            self.counters["upload_waits_skipped"] += 1
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        np.frombuffer(buffer, dtype=np.uint8, count=data.size)[:] = data

    def download(self, buffer: Any, nbytes: int) -> np.ndarray:
        self.synchronize()
        return np.frombuffer(buffer, dtype=np.uint8, count=nbytes).copy()

    def constant(self, data: bytes) -> Any:
        return self.device.buffer(data)

    def compile(self, source: str, name: str) -> MetalProgram:
        """Build a library; whatever the compiler prints on the way is captured. NOTE:
        metalcompute returns no log for a build that succeeds (its ``kernel()`` keeps only
        the error of a failed one), so a real Metal program's log holds only what was
        printed; the stand-in's library carries its OpenCL build log (``build_log``)."""
        said: list[str] = []
        label = f"{name} on {self.device_name}"
        try:
            with capture_compiler_output(said):
                library = self.device.kernel(source)
        except Exception as exc:  # metalcompute.error carries the compiler log
            extra = "".join(f"\n{text}" for text in said)
            raise KernelCompileError(f"[compile] {label} failed to build:\n{exc}{extra}") from None
        inner = getattr(library, "build_log", None)
        text = "\n".join([inner.text if isinstance(inner, BuildLog) else "", *said]).strip()
        return MetalProgram(library, name, self.device_name, BuildLog.parse(text, label))

    def launch(self, kernel: Any, global_threads: int, buffers: Sequence[Any]) -> None:
        handle = kernel(int(global_threads), *buffers)
        self._issued += 1
        seq = self._issued
        last = self._last_use
        for b in buffers:  # the handle keeps them alive, so their ids stay unique
            last[id(b)] = seq
        self._pending.append((seq, handle))
        while len(self._pending) > MAX_PENDING:
            oldest, handle = self._pending.popleft()
            del handle  # the drop waits for that command buffer
            self._waited = oldest

    def synchronize(self) -> None:
        self._wait_through(self._issued)
        self._last_use.clear()

    def _wait_through(self, seq: int) -> None:
        """Wait for every launch numbered up to ``seq`` by dropping their handles."""
        done = []
        while self._pending and self._pending[0][0] <= seq:
            done.append(self._pending.popleft()[1])
        if done:
            self.counters["drains"] += 1
        while done:
            done.pop()  # newest first: the one blocking wait; older runs are complete by then
        self._waited = max(self._waited, seq)
        if len(self._last_use) > 4 * MAX_PENDING:  # forget buffers whose launches are done
            waited = self._waited
            self._last_use = {k: v for k, v in self._last_use.items() if v > waited}
