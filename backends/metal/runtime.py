"""The Metal runtime over metalcompute (or any module with its surface, e.g. the stand-in).

metalcompute facts this follows (read from its source): ``dev.kernel(src)`` compiles a
library and raises ``metalcompute.error`` with the compiler's message; ``.function(name)``
looks a function up; ``fn(count, *buffers)`` binds buffers in order at offset 0 and
dispatches ``count`` threads rounded up to whole threadgroups of the pipeline's maximum
size; it returns a handle at once and deleting the handle waits for that command buffer.
Command buffers go to one queue and run in submission order. Buffers are shared memory
read and written through the Python buffer protocol.

So: launches keep their handles until a sync point; host access to a buffer (upload,
download) first waits for pending work, since the GPU may still be reading or writing it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
from riftco.errors import KernelCompileError

#: Handles kept before the oldest is waited for, bounding command buffers in flight.
MAX_PENDING = 512


class MetalProgram:
    def __init__(self, library: Any, name: str, device_name: str) -> None:
        self.library = library
        self.name = name
        self.device_name = device_name

    def kernel(self, name: str) -> Any:
        try:
            return self.library.function(name)
        except Exception as exc:
            raise KernelCompileError(
                f"[compile] function {name!r} not found in {self.name} on {self.device_name}: {exc}"
            ) from None


class MetalRuntime:
    """Implements ``riftco.kernels.runtime.Runtime`` over a metalcompute-like module."""

    def __init__(self, mc: Any, index: int = 0) -> None:
        self.mc = mc
        self.device = mc.Device(index)
        try:
            self.device_name = str(mc.get_devices()[index].deviceName)
        except Exception:  # naming is cosmetic
            self.device_name = str(self.device)
        self._pending: deque[Any] = deque()

    def allocate(self, nbytes: int) -> Any:
        return self.device.buffer(max(int(nbytes), 1))

    def upload(self, buffer: Any, array: np.ndarray) -> None:
        self.synchronize()  # a recycled buffer may still be read by queued kernels
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        np.frombuffer(buffer, dtype=np.uint8, count=data.size)[:] = data

    def download(self, buffer: Any, nbytes: int) -> np.ndarray:
        self.synchronize()
        return np.frombuffer(buffer, dtype=np.uint8, count=nbytes).copy()

    def constant(self, data: bytes) -> Any:
        return self.device.buffer(data)

    def compile(self, source: str, name: str) -> MetalProgram:
        try:
            library = self.device.kernel(source)
        except Exception as exc:  # metalcompute.error carries the compiler log
            raise KernelCompileError(
                f"[compile] {name} failed to build on {self.device_name}:\n{exc}"
            ) from None
        return MetalProgram(library, name, self.device_name)

    def launch(self, kernel: Any, global_threads: int, buffers: Sequence[Any]) -> None:
        self._pending.append(kernel(int(global_threads), *buffers))
        while len(self._pending) > MAX_PENDING:
            self._pending.popleft()  # dropping a handle waits for its command buffer

    def synchronize(self) -> None:
        while self._pending:
            self._pending.popleft()
