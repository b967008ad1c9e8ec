"""Result buffers the native backend keeps for the next result of the same size.

A training step frees and reallocates the same few dozen 0.1-10 MB arrays every step.
glibc returns such blocks to the OS (or trims the heap top) on free, so each new result
page-faults its memory back in: measured on a 2-core VM, 10-15% of a small GPT step.
A process-wide ``mallopt`` would fix that for everyone in the process; this pool fixes it
for the native backend's own results only, and can be emptied (:meth:`clear`).

A buffer is recycled only when nothing else can reach it: it owns its memory and no
numpy view of it is alive (its reference count says so), so a recycled buffer never
aliases a live array.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

#: Smaller buffers come from malloc's bins without page faults: not worth pooling.
MIN_BYTES = 1 << 16


class BufferPool:
    """Flat, owning numpy arrays by (dtype, length), at most ``limit`` bytes in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._free: dict[tuple[np.dtype, int], list[np.ndarray]] = {}
        #: References a released buffer has when nothing but the release path holds it
        #: (Storage.buffer, the hook's frames, getrefcount's argument): measured once by
        #: :meth:`calibrate`, because it depends on the interpreter's calling convention.
        self.own_refs = 0  # 0: not calibrated, recycle nothing
        self._calibrating = False

    def calibrate(self, make_storage: Callable[[np.ndarray], Any]) -> None:
        """Let a probe buffer take the real release path once and remember the reference
        count :meth:`give` sees then. ``make_storage(buf)`` wraps it in a Storage whose
        release hook ends in :meth:`give`; the Storage is the probe's only holder."""
        self._calibrating = True
        try:
            storage = make_storage(np.empty(MIN_BYTES, dtype=np.uint8))
            del storage  # runs Storage.__del__ -> release hook -> give
        finally:
            self._calibrating = False

    def take(self, dtype: np.dtype, n: int) -> np.ndarray:
        """A flat array of ``n`` elements: a recycled one if any, else a new one."""
        free = self._free.get((dtype, n))
        if free:
            try:
                arr = free.pop()
            except IndexError:  # emptied by a release that ran in between (GC)
                pass
            else:
                self.held -= arr.nbytes
                return arr
        return np.empty(n, dtype=dtype)

    def give(self, buf: np.ndarray) -> None:
        """Keep ``buf`` for reuse if it is large, unshared and fits under the limit."""
        if self._calibrating:
            self.own_refs = sys.getrefcount(buf)
            return
        nbytes = buf.nbytes
        if (
            nbytes < MIN_BYTES
            or self.held + nbytes > self.limit
            or buf.base is not None
            or buf.ndim != 1
            or sys.getrefcount(buf) > self.own_refs
        ):
            return
        self._free.setdefault((buf.dtype, buf.size), []).append(buf)
        self.held += nbytes

    def clear(self) -> None:
        self._free = {}
        self.held = 0
