"""The out-of-memory case: a request no device can satisfy must come back as core's
``OutOfMemoryError`` naming the op and the bytes, which core can only do when the backend
raises ``MemoryError`` (or a subclass) for an allocation that fails.

A backend over a library whose allocator raises something else (torch's CPU allocator
raises a bare ``RuntimeError``) hands its users an unannotated error from deep inside a
training step; this case fails such a backend with what to change. The request is an
``exp`` of a stride-0 view of one element, ``(2**40, 2**20)`` float32: the view costs
nothing, its result is 4 EiB, past any device's memory and any 64-bit address space's
allocator, so every backend fails at once without touching memory.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import riftco

from .results import CaseResult

#: The op asked to do the impossible, and the shape of its result.
OP, SHAPE = "exp", (2**40, 2**20)


def memory_cases(backend: Any) -> list[tuple[str, str, Any]]:
    """(case id, op, run), as ``contract.error_cases`` gives them."""
    return [(f"errors/out_of_memory_{OP}", OP, lambda: out_of_memory_result(backend))]


def out_of_memory_result(backend: Any) -> CaseResult:
    res = CaseResult(f"errors/out_of_memory_{OP}", OP, "errors")
    start = time.perf_counter()
    dtype = np.dtype(np.float32 if np.dtype(np.float32) in backend.dtypes else np.float64)
    need = math.prod(SHAPE) * dtype.itemsize
    try:
        x = riftco.ops.upload(backend, np.ones((1, 1), dtype)).broadcast_to(*SHAPE)
        out = riftco.ops.exp(x)
        backend.synchronize()
    except riftco.OutOfMemoryError as exc:
        msg = str(exc)
        if not msg.startswith(f"[{OP}]") or f"{need:,} bytes" not in msg:
            res.status = "fail"
            res.reason = f"OutOfMemoryError without the op and the {need:,} bytes: {msg}"
    except Exception as exc:  # noqa: BLE001 - what the backend raised is the finding
        res.status = "fail"
        res.reason = (
            f"a {need:,}-byte result raised {type(exc).__name__}: {exc}; expected MemoryError "
            "from the backend: raise MemoryError (or a subclass) where an allocation fails "
            "(translate the runtime's out-of-memory error), so core can name the op and the "
            "bytes in OutOfMemoryError"
        )
    else:
        res.status = "fail"
        res.reason = f"a {need:,}-byte result was allocated: {out.shape} {out.dtype.name}?"
    res.dtype, res.examples = dtype.name, 1
    if res.status != "pass":
        res.example = f"{OP}(ones((1, 1)).broadcast_to{SHAPE}) {dtype.name}"
    res.time_s = time.perf_counter() - start
    return res
