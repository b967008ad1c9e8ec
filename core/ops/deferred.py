"""Value checks on device data without a sync per op: flags read at the next sync point.

An op whose contract depends on values (embedding ids in range, targets in range) cannot
look at them on a GPU without stalling the queue. Its composite instead reduces the
violation to a one-element flag tensor on the device and :func:`defer` records it;
:func:`flush` reads every pending flag of a backend with one download (``download`` —
hence ``Tensor.numpy()`` and ``item()`` — flushes first) and raises the op's
``DomainError``. On backends whose buffers are host numpy arrays the value is already
there, so ops check at once instead (see ``host_resident``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import DomainError
from ..tensor import Tensor
from .capture_hooks import host

#: (backend, flag tensor (> 0 means violated), message maker)
_pending: list[tuple[Any, Tensor, Callable[[], str]]] = []
_MAX_PENDING = 64
_lock = threading.Lock()  # threads defer and flush on shared devices (DECISIONS, threads)


def host_resident(x: Tensor) -> bool:
    """True when ``x``'s values are already in host memory (reading them costs no sync)."""
    return isinstance(x.storage.buffer, np.ndarray)


def defer(flag: Tensor, message: Callable[[], str]) -> None:
    """Raise ``DomainError(message())`` at the next sync if ``flag`` holds a value > 0."""
    host(lambda f: _add(f, message), flag)  # a captured step defers its own flag again


def _add(flag: Tensor, message: Callable[[], str]) -> None:
    with _lock:
        _pending.append((flag.backend, flag, message))
        full = len(_pending) >= _MAX_PENDING
    if full:
        flush()


def flush(backend: Any = None) -> None:
    """Read the pending flags (of ``backend``, or all); raise on the first violated one."""
    global _pending
    if not _pending:
        return
    with _lock:
        mine = [p for p in _pending if backend is None or p[0] is backend]
        _pending = [p for p in _pending if not (backend is None or p[0] is backend)]
    for b, flag, message in mine:
        value = b.to_numpy(flag).reshape(-1)
        if value.size and value[0] > 0:
            raise DomainError(message() + " (detected at the next sync point: deferred)")


def check_before_update(backend: Any, device_status: bool = True) -> None:
    """Raise now any value error deferred on ``backend`` (composite flags and, with
    ``device_status``, a kernel backend's status word: ``check_deferred``), before an
    update writes state that outlives the step. The optimizers call it (through ``host``,
    so replays do too): a bad id stops the step before any parameter is written
    (docs/DECISIONS.md, "A bad id on a device"). AdamW leaves the status word to its
    kernels, which read it themselves. Free when nothing is pending; else one small read,
    which waits for the queue."""
    flush(backend)
    check = getattr(backend, "check_deferred", None) if device_status else None
    if check is not None:
        check()


def pending() -> int:
    return len(_pending)
