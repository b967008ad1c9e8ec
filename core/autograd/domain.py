"""Value checks (``log``/``sqrt`` need strictly positive input) without a sync per op.

Each check reduces its input to one on-device scalar, ``max(-x)``: the input is valid
exactly when that flag is negative. What happens to the flag depends on the mode:

* ``"auto"`` (default): read it at once when the backend keeps its buffers as host numpy
  arrays (the value already exists, reading it costs no device wait), else defer it.
  This is a property of the buffer, not of a backend name, so a third-party host backend
  gets eager checks too.
* ``"eager"``: always read it at once (a device sync per op; good for debugging).
* ``"deferred"``: keep it pending; :func:`flush` reads all pending flags with one
  download per backend and dtype. ``backward()``, ``Variable.numpy()`` and ``.item()``
  flush before doing anything else, so a bad value is reported, with the op's name and
  shape, before any gradient changes. 64 pending flags also force a flush.
* ``"off"``: no check (IEEE results: ``nan``/``-inf``).

The flag costs two tiny kernels (neg, max) per checked op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import tensor_ops as ops
from ..errors import DomainError
from ..tensor import Tensor

MODES = ("auto", "eager", "deferred", "off")
_MAX_PENDING = 64


class _State:
    mode = "auto"
    pending: list[tuple[str, tuple[int, ...], Tensor]] = []


def set_domain_checks(mode: str) -> str:
    """Choose how value checks run; returns the previous mode."""
    if mode not in MODES:
        raise ValueError(f"[set_domain_checks] mode must be one of {MODES}; got {mode!r}")
    prev, _State.mode = _State.mode, mode
    if mode in ("eager", "off"):
        flush()
    return prev


def _fail(op: str, shape: tuple[int, ...], flag: float) -> DomainError:
    return DomainError(
        f"[{op}] input must be strictly positive (its derivative is unbounded at 0 and "
        f"undefined below); got a minimum of {-flag:.6g} in a tensor of shape {shape}"
    )


def require_positive(op: str, x: Tensor) -> None:
    mode = _State.mode
    if mode == "off" or x.size == 0:
        return
    flag = ops.max(ops.neg(x))
    if mode == "eager" or (mode == "auto" and isinstance(x.storage.buffer, np.ndarray)):
        value = float(flag.item())
        if not value < 0:
            raise _fail(op, x.shape, value)
        return
    _State.pending.append((op, x.shape, flag))
    if len(_State.pending) >= _MAX_PENDING:
        flush()


def flush() -> None:
    """Read every pending flag (one download per backend and dtype); raise on the first bad."""
    pending = _State.pending
    if not pending:
        return
    _State.pending = []
    groups: dict[tuple[int, Any], list[tuple[str, tuple[int, ...], Tensor]]] = {}
    for entry in pending:
        flag = entry[2]
        groups.setdefault((id(flag.backend), flag.dtype), []).append(entry)
    for entries in groups.values():
        total = entries[0][2]
        for _, _, flag in entries[1:]:
            total = ops.maximum(total, flag)
        if total.item() < 0:
            continue
        for op, shape, flag in entries:  # failure path only: find the culprit
            value = float(flag.item())
            if not value < 0:
                raise _fail(op, shape, value)
