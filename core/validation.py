"""Metadata checks shared by raw ops, fused ops and autograd.

Every check looks at shapes, dtypes and backends only, never at values, so it costs no
device work and runs *before* any backend method: a backend author can rely on receiving
operands that passed them. Each raises a riftco error whose message starts with ``[op]``
and names what was given and what was expected.

``tensor_ops`` re-exports these names and looks them up in its own namespace, so a test
may monkeypatch ``riftco.tensor_ops._same_shape`` to switch one check off for raw ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import dtypes as _dt
from .errors import DeviceMismatchError, DTypeError, ShapeError
from .tensor import Tensor


def _require_tensor(op: str, x: Any, what: str = "operand") -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"[{op}] {what} must be a riftco Tensor; got {type(x).__name__}")
    return x


def same_backend(op: str, *xs: Tensor) -> Any:
    """The single backend instance shared by every operand, or a DeviceMismatchError."""
    backend = xs[0].backend
    for x in xs[1:]:
        if x.backend is not backend:
            devs = ", ".join(str(t.device) for t in xs)
            raise DeviceMismatchError(
                f"[{op}] operands live on different devices ({devs}); move them with .to()"
            )
    return backend


def _same_shape(op: str, *xs: Tensor) -> None:
    shape = xs[0].shape
    if any(x.shape != shape for x in xs[1:]):
        shapes = ", ".join(str(x.shape) for x in xs)
        raise ShapeError(
            f"[{op}] operands must have equal shapes (broadcast explicitly with "
            f"broadcast_to); got {shapes}"
        )


def _same_dtype(op: str, *xs: Tensor) -> None:
    dt = xs[0].dtype
    if any(x.dtype != dt for x in xs[1:]):
        names = ", ".join(x.dtype.name for x in xs)
        raise DTypeError(f"[{op}] operands must share one dtype (no implicit casts); got {names}")


def _float(op: str, *xs: Tensor) -> None:
    for x in xs:
        if x.dtype not in _dt.FLOAT_DTYPES:
            raise DTypeError(f"[{op}] expects float32 or float64 operands; got {x.dtype.name}")


def _index(op: str, ids: Tensor, what: str) -> None:
    if ids.dtype not in _dt.INDEX_DTYPES:
        raise DTypeError(f"[{op}] {what} must be int32 or int64; got {ids.dtype.name}")


def _supported(op: str, backend: Any, dtype: np.dtype) -> None:
    if dtype not in backend.dtypes:
        names = ", ".join(sorted(d.name for d in backend.dtypes))
        raise DTypeError(
            f"[{op}] backend {backend.name!r} does not support {dtype.name} (supports {names})"
        )


def _rank(op: str, x: Tensor, rank: int, what: str) -> None:
    if x.ndim != rank:
        raise ShapeError(f"[{op}] {what} must have rank {rank}; got shape {x.shape}")


def _axes(op: str, x: Tensor, axes: int | Sequence[int] | None) -> tuple[int, ...]:
    """Reduction axes as sorted non-negative ints (``None``: all), each in range, no repeats."""
    if axes is None:
        return tuple(range(x.ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (int(axes),)
    out = []
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise ShapeError(f"[{op}] axis {a} is out of range for shape {x.shape}")
        out.append(a % x.ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"[{op}] repeated axis in {tuple(axes)}")
    return tuple(sorted(out))
