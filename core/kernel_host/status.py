"""The device status buffer: how an out-of-range id found inside a kernel becomes a DomainError.

On the CPU backends core checks ids before dispatch (a free ``min``/``max``). A device
backend cannot without reading the ids back, which would stall the queue every step. So
the index-taking kernels (``shaders/status.h``) clamp a bad id, never touching memory
through it, and record it in this small int32 buffer with integer atomics; the host reads
one word at the next sync point (``synchronize``, ``to_numpy`` and so ``item``), and only
when a flagged kernel ran since the last read. A non-zero word means a bad id: the host
reads the rest, resets the buffer and raises the same ``DomainError`` the CPU backend
raises, saying that it was detected late (the op ran asynchronously; its output rows for
bad ids are zeros and must not be used).

This is the scheme of the C++ original (a status word checked at synchronisation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import DomainError

#: Op numbers of shaders/status.h, in order, and slots per op (RIFTCO_STATUS_SLOTS).
STATUS_OPS = ("embedding", "embedding_backward", "cross_entropy", "cross_entropy_backward")
SLOTS = 4
#: What each op indexes with, and the lowest valid value (cross-entropy: -1 = ignored).
_WHAT = {
    "embedding": ("ids", 0),
    "embedding_backward": ("ids", 0),
    "cross_entropy": ("targets (-1 = ignored)", -1),
    "cross_entropy_backward": ("targets (-1 = ignored)", -1),
}
WORDS = 1 + 2 * SLOTS * len(STATUS_OPS)
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_INITIAL = np.array([0] + [_INT_MAX, _INT_MIN] * SLOTS * len(STATUS_OPS), dtype=np.int32)


class DeviceStatus:
    """One status buffer per backend instance, read at sync points when something could
    have flagged it. ``allocate``, ``upload`` and ``download`` are the runtime's.

    Each flagged launch gets a slot for its op, tied to its bound (V) until the next check,
    so an error names the bound of the call that saw the bad id; a fifth distinct bound
    shares the last slot (the message then lists the bounds it may have been)."""

    def __init__(
        self,
        allocate: Callable[[int], Any],
        upload: Callable[[Any, np.ndarray], None],
        download: Callable[[Any, int], np.ndarray],
    ) -> None:
        self._allocate = allocate
        self._upload = upload
        self._download = download
        self._buffer: Any = None
        #: op -> the bounds given each slot since the last check
        self.pending: dict[str, list[set[int]]] = {}
        self.reads = 0
        self.read_bytes = 0

    def raw(self) -> Any:
        """The buffer, made on first use: what a guarded kernel reads (word 0, the flags:
        an optimizer kernel writes nothing when an earlier kernel flagged a bad id)."""
        if self._buffer is None:
            self._buffer = self._allocate(_INITIAL.nbytes)
            self._upload(self._buffer, _INITIAL)
        return self._buffer

    def buffer(self, op: str, high: int) -> tuple[Any, int]:
        """``(raw buffer, slot)`` to bind for a launch of ``op`` whose ids lie below ``high``."""
        self.raw()
        slots = self.pending.setdefault(op, [])
        high = int(high)
        for i, bounds in enumerate(slots):
            if high in bounds:
                return self._buffer, i
        if len(slots) < SLOTS:
            slots.append({high})
        else:
            slots[-1].add(high)
        return self._buffer, len(slots) - 1

    def check(self) -> None:
        """Raise the deferred DomainError if a kernel flagged a bad id since the last check.

        Costs nothing when no index-taking kernel ran, else one 4-byte read (which waits
        for the queue, as the sync point that calls it does anyway)."""
        if not self.pending:
            return
        pending, self.pending = self.pending, {}
        word = self._read(1)
        if word[0] == 0:
            return
        words = self._read(WORDS)
        self._upload(self._buffer, _INITIAL)
        raise _error(words, pending)

    def _read(self, count: int) -> np.ndarray:
        nbytes = 4 * count
        self.reads += 1
        self.read_bytes += nbytes
        return self._download(self._buffer, nbytes).view(np.int32)


def _error(words: np.ndarray, pending: dict[str, list[set[int]]]) -> DomainError:
    flags = int(words[0]) & 0xFFFFFFFF
    parts = []
    for i, op in enumerate(STATUS_OPS):
        what, low = _WHAT[op]
        for slot in range(SLOTS):
            k = i * SLOTS + slot
            if not flags >> k & 1:
                continue
            lo, hi = int(words[1 + 2 * k]), int(words[2 + 2 * k])
            slots = pending.get(op, [])
            bounds = sorted(slots[slot]) if slot < len(slots) else []
            if len(bounds) == 1:
                valid = f"[{low}, {bounds[0]})"
            else:
                listed = " or ".join(str(b) for b in bounds) or "unknown"
                valid = f"[{low}, V) (V = {listed})"
            saturated = _INT_MIN in (lo, hi) or _INT_MAX in (lo, hi)
            got = f"[{lo}, {hi}]" + (" (saturated to int32)" if saturated else "")
            parts.append(f"[{op}] {what} must lie in {valid}; got out-of-range values in {got}")
    if not parts:  # a flag bit outside the layout: a kernel/host mismatch, say so
        parts.append(f"[device status] unknown flags {flags:#x}")
    head, rest = parts[0], parts[1:]
    also = "".join(f"; also {p}" for p in rest)
    return DomainError(
        f"{head}{also}. Detected on the device at the next sync point (deferred: the kernel "
        "ran asynchronously, read nothing through the bad ids and wrote zeros for them; "
        "discard the results of this step)"
    )
