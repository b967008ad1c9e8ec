"""Metadata checks shared by the op modules.

Every check looks at shapes, dtypes and backends only, never at values, so it costs no
device work and runs *before* any backend method: a backend author can rely on receiving
operands that passed them. Each raises a riftco error whose message starts with ``[op]``
and names what was given and what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes as _dt
from ..errors import DeviceMismatchError, DTypeError, ShapeError
from ..tensor import Tensor
from .capture_hooks import DynamicFloat

if TYPE_CHECKING:
    from ..backend import Backend

FLOATS = _dt.FLOAT_DTYPES
INDEX = _dt.INDEX_DTYPES


def tensor(op: str, x: Any, what: str = "operand") -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"[{op}] {what} must be a riftco Tensor; got {type(x).__name__}")
    return x


def same_backend(op: str, *xs: Tensor) -> Backend:
    """The single backend instance shared by every operand, or a DeviceMismatchError."""
    backend = xs[0].backend
    for x in xs[1:]:
        if x.backend is not backend:
            devs = ", ".join(str(t.device) for t in xs)
            raise DeviceMismatchError(
                f"[{op}] operands live on different devices ({devs}); move them with .to()"
            )
    return backend


def full_precision(op: str, x: Tensor, what: str) -> None:
    """Optimizer state and weights stay float32/float64: an update smaller than half an
    ulp of the weight (2^-9 of it in bfloat16) would vanish, and with it the training."""
    if x.dtype in _dt.LOW_PRECISION:
        raise DTypeError(
            f"[{op}] {what} is {x.dtype.name} {x.shape}; the optimizer keeps float32 master "
            "weights and state (cast a low-precision copy for the forward pass, as "
            "`riftco train --precision bf16-mixed` does)"
        )


def statistics(op: str, like: Tensor, **saved: Tensor) -> None:
    """Saved statistics (mean, rstd, lse, loss rows) beside ``like``: on its backend and in
    its compute dtype (float32 for float16/bfloat16 operands, whose statistics are kept in
    float32; the operand dtype otherwise)."""
    want = _dt.compute_dtype(like.dtype)
    for name, t in saved.items():
        tensor(op, t, name)
        same_backend(op, like, t)
        if t.dtype != want:
            raise DTypeError(
                f"[{op}] {name} must be {want.name} for {like.dtype.name} operands (statistics "
                f"are kept in the compute dtype); got {t.dtype.name}"
            )


def same_shape(op: str, *xs: Tensor) -> None:
    shape = xs[0].shape
    if any(x.shape != shape for x in xs[1:]):
        shapes = ", ".join(str(x.shape) for x in xs)
        raise ShapeError(
            f"[{op}] operands must have equal shapes (broadcast explicitly with "
            f"broadcast_to); got {shapes}"
        )


def same_dtype(op: str, *xs: Tensor) -> None:
    dt = xs[0].dtype
    if any(x.dtype != dt for x in xs[1:]):
        names = ", ".join(x.dtype.name for x in xs)
        raise DTypeError(f"[{op}] operands must share one dtype (no implicit casts); got {names}")


def floats(op: str, *xs: Tensor) -> None:
    for x in xs:
        if x.dtype not in FLOATS:
            raise DTypeError(
                f"[{op}] expects float operands (float16, bfloat16, float32, float64); "
                f"got {x.dtype.name}"
            )


def index(op: str, ids: Tensor, what: str) -> None:
    if ids.dtype not in INDEX:
        raise DTypeError(f"[{op}] {what} must be int32 or int64; got {ids.dtype.name}")


def supported(op: str, backend: Backend, dtype: np.dtype) -> None:
    if dtype not in backend.dtypes:
        names = ", ".join(sorted(d.name for d in backend.dtypes))
        raise DTypeError(
            f"[{op}] backend {backend.name!r} does not support {dtype.name} (supports {names})"
        )


def rank(op: str, x: Tensor, want: int, what: str) -> None:
    if x.ndim != want:
        raise ShapeError(f"[{op}] {what} must have rank {want}; got shape {x.shape}")


def min_rank(op: str, x: Tensor, least: int, what: str) -> None:
    if x.ndim < least:
        raise ShapeError(f"[{op}] {what} needs rank >= {least}; got shape {x.shape}")


def features(op: str, x: Tensor) -> int:
    """The size C of ``x``'s last axis, which a per-row normalisation needs to be >= 1."""
    min_rank(op, x, 1, "x")
    c = x.shape[-1]
    if c == 0:
        raise ShapeError(f"[{op}] needs a non-empty last axis (C >= 1); got shape {x.shape}")
    return c


def shape_is(op: str, x: Tensor, shape: tuple[int, ...], what: str) -> None:
    if x.shape != shape:
        raise ShapeError(f"[{op}] {what} must have shape {shape}; got {x.shape}")


def number(op: str, value: Any, what: str) -> float:
    """A Python (or numpy) real number as a float; bools and tensors are refused."""
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        raise DTypeError(f"[{op}] {what} must be a Python number; got {type(value).__name__}")
    if type(value) is DynamicFloat:  # a captured step refills it on replay: keep it traceable
        return value
    return float(value)


def one_of(op: str, value: Any, options: tuple[str, ...], what: str) -> str:
    """``value`` when it is one of ``options`` (a form, a mode), a ShapeError otherwise."""
    if value not in options:
        raise ShapeError(f"[{op}] {what} must be one of {options}; got {value!r}")
    return str(value)


def matmul_2d(op: str, x: Tensor, weight: Tensor) -> tuple[int, int, int]:
    """``(M, K, N)`` of ``x[M, K] @ weight[K, N]`` (linear layers, fused or not)."""
    rank(op, x, 2, "x [M, K]")
    rank(op, weight, 2, "weight [K, N]")
    (m, k), (k2, n) = x.shape, weight.shape
    if k != k2:
        raise ShapeError(f"[{op}] x {x.shape} @ weight {weight.shape}: inner dims {k} != {k2}")
    return m, k, n


def flag(op: str, value: Any, what: str) -> bool:
    """A bool (numpy's too). Anything else is refused: ``bool("no")`` is True and
    ``bool(tensor)`` asks for its length, so converting would hide a wrong argument."""
    if type(value) is bool:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise DTypeError(f"[{op}] {what} must be a bool; got {type(value).__name__} {value!r}")


def integer(op: str, value: Any, what: str) -> int:
    """A Python or numpy integer as an int; bools, floats (2.5 would truncate) and
    strings are refused."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise DTypeError(f"[{op}] {what} must be an int; got {type(value).__name__} {value!r}")


def dims(op: str, shape: Any, what: str = "shape") -> tuple[int, ...]:
    """A shape given as a tuple or list of non-negative ints, as a tuple."""
    if not isinstance(shape, (tuple, list)):
        raise DTypeError(
            f"[{op}] {what} must be a tuple of ints; got {type(shape).__name__} {shape!r}"
        )
    out = tuple(integer(op, s, f"every dim of {what} {tuple(shape)!r}") for s in shape)
    if any(s < 0 for s in out):
        raise ShapeError(f"[{op}] dims must be >= 0; got {what} {out}")
    return out


def backend_arg(op: str, backend: Any) -> Backend:
    """A backend instance (``riftco.device("cpu").backend``), for ops that take one."""
    if not (
        isinstance(getattr(backend, "dtypes", None), frozenset)
        and isinstance(getattr(backend, "name", None), str)
    ):
        raise DTypeError(
            f"[{op}] expects a backend instance such as riftco.device('cpu').backend; got "
            f"{type(backend).__name__} {backend!r}"
        )
    return backend


def axes(op: str, x: Tensor, axes: int | Sequence[int] | None) -> tuple[int, ...]:
    """Reduction axes as sorted non-negative ints (``None``: all), each in range, no repeats."""
    if axes is None:
        return tuple(range(x.ndim))
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, (bool, np.bool_)):
        axes = (int(axes),)
    if not isinstance(axes, (tuple, list)):
        raise DTypeError(
            f"[{op}] axes must be an int, a tuple of ints or None; got {type(axes).__name__}"
        )
    out = []
    for a in axes:
        a = integer(op, a, "an axis")
        if not -x.ndim <= a < x.ndim:
            raise ShapeError(f"[{op}] axis {a} is out of range for shape {x.shape}")
        out.append(int(a) % x.ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"[{op}] repeated axis in {tuple(axes)}")
    return tuple(sorted(out))


def float_operands(op: str, *xs: Any) -> Backend:
    """Tensors on one backend, float, one dtype: the check most ops start with."""
    for x in xs:
        tensor(op, x)
    backend = same_backend(op, *xs)
    same_dtype(op, *xs)
    floats(op, *xs)
    return backend
