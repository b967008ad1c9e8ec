"""Value checks (``log``/``sqrt`` need strictly positive input, class ids a range) without
a sync per op.

Each check reduces its input to one on-device scalar flag: the input is valid exactly
when the flag is negative (``max(-x)`` for positivity; for a range the larger overshoot
past either end, offset by half a step so integer ids give a clean sign). What happens to
the flag depends on the mode:

* ``"auto"`` (default): read it at once when the backend keeps its buffers as host numpy
  arrays (the value already exists, reading it costs no device wait), else defer it.
  This is a property of the buffer, not of a backend name, so a third-party host backend
  gets eager checks too.
* ``"eager"``: always read it at once (a device sync per op; good for debugging).
* ``"deferred"``: keep it pending; :func:`flush` reads all pending flags with one
  download per backend and dtype. ``backward()``, ``Variable.numpy()`` and ``.item()``
  flush before doing anything else, so a bad value is reported, with the op's name and
  shape, before any gradient changes. 64 pending flags also force a flush.
* ``"off"``: no positivity check (IEEE results: ``nan``/``-inf``). Range checks of class
  ids still run as in ``"auto"``: an out-of-range id has no IEEE answer, only a wrong one.

The positivity flag costs two tiny kernels (neg, max) per checked op; the range flag five
on ``[N]`` ids. On host buffers the range check is numpy ``min``/``max`` of the ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ops
from ..errors import DomainError
from ..ops.capture_hooks import host
from ..tensor import Tensor

MODES = ("auto", "eager", "deferred", "off")
_MAX_PENDING = 64


@dataclass(frozen=True)
class _Check:
    """One pending value check: ``flag`` (a device scalar) is negative when valid; ``fail``
    builds the error and may read more device values (the failure path only)."""

    flag: Tensor
    fail: Callable[[], DomainError]


class _State:
    mode = "auto"
    pending: list[_Check] = []


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


def _on_host(x: Tensor) -> bool:
    return isinstance(x.storage.buffer, np.ndarray)


def _defer(check: _Check) -> None:
    _State.pending.append(check)
    if len(_State.pending) >= _MAX_PENDING:
        flush()


def require_positive(op: str, x: Tensor) -> None:
    """``x > 0`` everywhere (the domain of ``log``/``sqrt`` and their derivatives).

    The reading of the flag goes through ``capture_hooks.host`` so that a captured step
    checks its own values on every replay."""
    mode = _State.mode
    if mode == "off" or x.size == 0:
        return
    flag = ops.max(ops.neg(x))
    shape = x.shape
    if mode == "eager" or (mode == "auto" and _on_host(x)):
        host(lambda f: _positive_now(op, shape, f), flag)
    else:
        host(lambda f: _defer(_Check(f, lambda: _fail(op, shape, float(f.item())))), flag)


def _positive_now(op: str, shape: tuple[int, ...], flag: Tensor) -> None:
    value = float(flag.item())
    if not value < 0:
        raise _fail(op, shape, value)


def _range_error(
    op: str, what: str, low: int, high: int, lo: Any, hi: Any, note: str
) -> DomainError:
    return DomainError(
        f"[{op}] {what} must lie in [{low}, {high}); got values in [{lo}, {hi}]{note}"
    )


def require_in_range(
    op: str,
    what: str,
    ids: Tensor,
    low: int,
    high: int,
    as_float: Tensor | None = None,
    note: str = "",
) -> None:
    """Every integer id in ``[low, high)``: eagerly on host buffers, else per the mode.

    ``as_float`` is ``ids`` already cast to a float dtype of the ids' backend (the device
    flag is computed from it, so callers that cast anyway pay no extra cast); without it
    ``ids`` is cast to float32. A float holds every integer below 2**24 exactly, far past
    any vocabulary, and ids beyond that are still far out of range. ``note`` ends the
    message (what the lowest allowed value means, say)."""
    if ids.size == 0:
        return
    mode = _State.mode
    if _on_host(ids) and mode != "deferred":
        host(lambda t: _range_now(op, what, low, high, note, t), ids)
        return
    values = ops.cast(ids, "float32") if as_float is None else as_float
    hi_t = ops.max(values)
    neg_lo = ops.max(ops.neg(values))
    flag = ops.maximum(
        ops.add_scalar(neg_lo, low - 0.5), ops.add_scalar(hi_t, -(high - 0.5))
    )  # > 0 exactly when lo <= low - 1 or hi >= high

    def check(flag: Tensor, neg_lo: Tensor, hi_t: Tensor) -> None:
        def fail() -> DomainError:
            lo, hi = -float(neg_lo.item()), float(hi_t.item())
            return _range_error(op, what, low, high, f"{lo:.0f}", f"{hi:.0f}", note)

        if mode == "eager":
            if not float(flag.item()) < 0:
                raise fail()
            return
        _defer(_Check(flag, fail))

    host(check, flag, neg_lo, hi_t)


def _range_now(op: str, what: str, low: int, high: int, note: str, ids: Tensor) -> None:
    host_ids = ids.numpy()
    lo, hi = int(host_ids.min()), int(host_ids.max())
    if lo < low or hi >= high:
        raise _range_error(op, what, low, high, lo, hi, note)


def flush() -> None:
    """Read every pending flag (one download per backend and dtype); raise on the first bad."""
    if _State.pending:
        host(_flush_pending)


def _flush_pending() -> None:
    pending = _State.pending
    if not pending:
        return
    _State.pending = []
    groups: dict[tuple[int, Any], list[_Check]] = {}
    for check in pending:
        flag = check.flag
        groups.setdefault((id(flag.backend), flag.dtype), []).append(check)
    for checks in groups.values():
        total = checks[0].flag
        for check in checks[1:]:
            total = ops.maximum(total, check.flag)
        if total.item() < 0:
            continue
        for check in checks:  # failure path only: find the culprit
            if not float(check.flag.item()) < 0:
                raise check.fail()
