"""A size-bucketed caching allocator for device buffers.

Training allocates the same shapes every step; asking the driver each time costs a
system call (OpenCL) or a page-zeroing allocation (Metal). Freed buffers go back to a
pool keyed by a size class and the next request of that class reuses one. Reuse without
waiting is safe because every runtime executes commands in submission order: a kernel
queued later cannot overtake the kernels that still read the buffer's old contents.

A :class:`DeviceBuffer` is what a ``Tensor``'s storage holds. The raw buffer returns to
the pool when the ``DeviceBuffer`` object dies (``weakref.finalize``), which follows the
object rather than the ``Storage``, so ``assign_`` moving a buffer between storages is
safe.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import DeviceLostError

MIN_BLOCK = 256


def size_class(nbytes: int) -> int:
    """Round up to one of four classes per power of two (at most 25% slack)."""
    if nbytes <= MIN_BLOCK:
        return MIN_BLOCK
    step = 1 << max(nbytes.bit_length() - 3, 0)
    return -(-nbytes // step) * step


class DeviceBuffer:
    """A pooled device buffer: ``raw`` is the runtime's object, ``nbytes`` what was asked."""

    __slots__ = ("raw", "nbytes", "capacity", "__weakref__")

    def __init__(self, raw: Any, nbytes: int, capacity: int) -> None:
        self.raw = raw
        self.nbytes = nbytes
        self.capacity = capacity

    def __repr__(self) -> str:
        return f"DeviceBuffer(nbytes={self.nbytes}, capacity={self.capacity})"


class CachingAllocator:
    """Hands out :class:`DeviceBuffer` objects, recycling the raw buffers of dead ones."""

    def __init__(self, allocate: Callable[[int], Any]) -> None:
        self._allocate = allocate
        self._pool: dict[int, list[Any]] = {}
        self._lock = threading.Lock()
        self.allocated_bytes = 0  # requested bytes of live buffers
        self.peak_bytes = 0
        self.reserved_bytes = 0  # capacity of live buffers plus pooled ones
        self.pooled_bytes = 0
        self.device_allocations = 0
        self.reuses = 0

    def allocate(self, nbytes: int) -> DeviceBuffer:
        cap = size_class(nbytes)
        with self._lock:
            free = self._pool.get(cap)
            raw = free.pop() if free else None
            if raw is not None:
                self.pooled_bytes -= cap
                self.reuses += 1
        if raw is None:
            raw = self._fresh(cap)
            with self._lock:
                self.device_allocations += 1
                self.reserved_bytes += cap
        buf = DeviceBuffer(raw, nbytes, cap)
        with self._lock:
            self.allocated_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.allocated_bytes)
        fin = weakref.finalize(buf, self._release, raw, nbytes, cap)
        fin.atexit = False
        return buf

    def _fresh(self, cap: int) -> Any:
        """A new raw buffer; when the device refuses, drop the pooled buffers and ask once
        more (they may be what fills the device), then let the runtime's error through."""
        try:
            return self._allocate(cap)
        except DeviceLostError:  # emptying the pool cannot help a lost device
            raise
        except Exception:
            if not self.pooled_bytes:
                raise
        self.empty_cache()
        return self._allocate(cap)

    def _release(self, raw: Any, nbytes: int, cap: int) -> None:
        with self._lock:
            self._pool.setdefault(cap, []).append(raw)
            self.allocated_bytes -= nbytes
            self.pooled_bytes += cap

    def empty_cache(self) -> None:
        """Drop every pooled buffer (the driver frees them once queued work is done)."""
        with self._lock:
            self.reserved_bytes -= self.pooled_bytes
            self.pooled_bytes = 0
            self._pool.clear()

    def reset_peak(self) -> None:
        self.peak_bytes = self.allocated_bytes

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "allocated_bytes": self.allocated_bytes,
                "peak_bytes": self.peak_bytes,
                "reserved_bytes": self.reserved_bytes,
                "pooled_bytes": self.pooled_bytes,
                "device_allocations": self.device_allocations,
                "reuses": self.reuses,
            }
