"""Raw tensor operations: validate, then dispatch to the operands' backend.

These are the functions autograd rules, optimizers and compiled objectives call. Each one
checks metadata only (shapes, dtypes, one backend for all operands, index dtypes) and
raises a riftco error naming the op *before* any backend method runs. Operands reach the
backend dense unless it declares ``accepts_strided``. Fused ops go to the backend when it
implements them and to the composite in ``composites.py`` otherwise.

The checks live in ``validation.py``. Dispatch, its fast paths and the shadow
``validator`` stay here, together: the hook is then one module global read per call, and
``riftco.shadow`` sets it on this module.

No graph is built here: this is the layer below ``Variable``.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import dtypes as _dt
from .backend import COMPARE_OPS
from .errors import DTypeError, ShapeError
from .tensor import Tensor

# Re-exported: fused ops, autograd and tests reach the checks as ``ops._float`` and so on,
# and the raw ops below look them up here (see ``validation``'s docstring).
from .validation import (  # noqa: F401
    _axes,
    _float,
    _index,
    _rank,
    _require_tensor,
    _same_dtype,
    _same_shape,
    _supported,
    same_backend,
)

#: Shadow validation hook, installed by ``riftco.shadow`` when RIFTCO_VALIDATE is set.
#: ``None`` keeps dispatch at one attribute test.
validator: Callable[[str, Any, tuple[Any, ...], Any], None] | None = None


# -- dispatch ---------------------------------------------------------------------------------
def _prep(backend: Any, x: Tensor) -> Tensor:
    return x if backend.accepts_strided or x.is_dense else backend.copy_strided(x)


def _call(op: str, backend: Any, *args: Any) -> Any:
    out = getattr(backend, op)(*args)
    if validator is not None:
        validator(op, backend, args, out)
    return out


def _elementwise(op: str, *xs: Tensor) -> Any:
    for x in xs:
        _require_tensor(op, x)
    backend = same_backend(op, *xs)
    _same_shape(op, *xs)
    _same_dtype(op, *xs)
    _float(op, xs[0])
    return _call(op, backend, *(_prep(backend, x) for x in xs))


# Fast paths for the calls a training step makes thousands of times. They accept exactly
# the operands the generic checks above accept and hand anything else to them, so every
# error (type, device, shape, dtype, in that order) is still raised by the same code.
_FLOATS = _dt.FLOAT_DTYPES


def _unary(op: str, x: Tensor) -> Any:
    if type(x) is Tensor and x.dtype in _FLOATS:
        backend = x.backend
        if not (backend.accepts_strided or x.is_dense):
            x = backend.copy_strided(x)
        out = getattr(backend, op)(x)
        if validator is not None:
            validator(op, backend, (x,), out)
        return out
    return _elementwise(op, x)


def _binary(op: str, a: Tensor, b: Tensor) -> Any:
    if type(a) is Tensor and type(b) is Tensor:
        backend = a.backend
        dt = a.dtype
        if b.backend is backend and a.shape == b.shape and b.dtype == dt and dt in _FLOATS:
            if not backend.accepts_strided:
                a, b = _prep(backend, a), _prep(backend, b)
            out = getattr(backend, op)(a, b)
            if validator is not None:
                validator(op, backend, (a, b), out)
            return out
    return _elementwise(op, a, b)


# -- elementwise ------------------------------------------------------------------------------
def neg(x: Tensor) -> Tensor:
    return _unary("neg", x)


def exp(x: Tensor) -> Tensor:
    return _unary("exp", x)


def log(x: Tensor) -> Tensor:
    return _unary("log", x)


def sqrt(x: Tensor) -> Tensor:
    return _unary("sqrt", x)


def rsqrt(x: Tensor) -> Tensor:
    return _unary("rsqrt", x)


def tanh(x: Tensor) -> Tensor:
    return _unary("tanh", x)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - numpy spelling
    return _unary("abs", x)


def add(a: Tensor, b: Tensor) -> Tensor:
    return _binary("add", a, b)


def sub(a: Tensor, b: Tensor) -> Tensor:
    return _binary("sub", a, b)


def mul(a: Tensor, b: Tensor) -> Tensor:
    return _binary("mul", a, b)


def div(a: Tensor, b: Tensor) -> Tensor:
    return _binary("div", a, b)


def maximum(a: Tensor, b: Tensor) -> Tensor:
    return _binary("maximum", a, b)


def minimum(a: Tensor, b: Tensor) -> Tensor:
    return _binary("minimum", a, b)


def _scalar(op: str, x: Tensor, value: Any) -> Tensor:
    tv = type(value)
    if type(x) is Tensor and (tv is float or tv is int) and x.dtype in _FLOATS:
        backend = x.backend  # fast path: same checks, already passed
        return _call(op, backend, _prep(backend, x), float(value))
    _require_tensor(op, x)
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        raise DTypeError(f"[{op}] scalar must be a Python number; got {type(value).__name__}")
    _float(op, x)
    backend = x.backend
    return _call(op, backend, _prep(backend, x), float(value))


def add_scalar(x: Tensor, value: float) -> Tensor:
    return _scalar("add_scalar", x, value)


def mul_scalar(x: Tensor, value: float) -> Tensor:
    return _scalar("mul_scalar", x, value)


def pow_scalar(x: Tensor, value: float) -> Tensor:
    return _scalar("pow_scalar", x, value)


def where(cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return _elementwise("where", cond, a, b)


def compare(a: Tensor, b: Tensor, op: str) -> Tensor:
    if op not in COMPARE_OPS:
        raise ShapeError(f"[compare] unknown comparison {op!r}; expected one of {COMPARE_OPS}")
    for x in (a, b):
        _require_tensor("compare", x)
    backend = same_backend("compare", a, b)
    _same_shape("compare", a, b)
    _same_dtype("compare", a, b)
    _float("compare", a)
    return _call("compare", backend, _prep(backend, a), _prep(backend, b), op)


def cast(x: Tensor, dtype: Any) -> Tensor:
    _require_tensor("cast", x)
    dt = _dt.as_dtype(dtype, "cast")
    _supported("cast", x.backend, dt)
    if dt == x.dtype:
        return x
    return _call("cast", x.backend, _prep(x.backend, x), dt)


# -- reductions ---------------------------------------------------------------------------------
def _reduce(op: str, x: Tensor, axes: Any, keepdims: bool) -> Tensor:
    if axes is None and type(x) is Tensor and x.dtype in _FLOATS and x.shape:
        ax = tuple(range(len(x.shape)))  # fast path: a full reduction, the common case
    else:
        _require_tensor(op, x)
        _float(op, x)
        ax = _axes(op, x, axes)
        if not ax:  # a reduction over no axes (rank-0 input) is the identity
            return x
    if op == "max" and 0 in x.shape and any(x.shape[a] == 0 for a in ax):
        raise ShapeError(f"[max] cannot reduce an empty axis of shape {x.shape}")
    return _call(op, x.backend, _prep(x.backend, x), ax, bool(keepdims))


def sum(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce("sum", x, axes, keepdims)


def max(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce("max", x, axes, keepdims)


def mean(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    _float("mean", _require_tensor("mean", x))
    ax = _axes("mean", x, axes)
    count = math.prod(x.shape[a] for a in ax)
    return mul_scalar(sum(x, ax, keepdims), 1.0 / builtins.max(count, 1))


def argmax(x: Tensor) -> Tensor:
    _require_tensor("argmax", x)
    _float("argmax", x)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ShapeError(f"[argmax] needs a non-empty last axis; got shape {x.shape}")
    return _call("argmax", x.backend, _prep(x.backend, x))


def sum_to_shape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """Sum ``x`` down to ``shape``: the backward of ``broadcast_to``."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    if lead < 0 or any(s not in (1, d) for s, d in zip(shape, x.shape[lead:], strict=True)):
        raise ShapeError(f"[sum_to_shape] cannot sum shape {x.shape} down to {shape}")
    axes = tuple(range(lead)) + tuple(
        lead + i
        for i, (s, d) in enumerate(zip(shape, x.shape[lead:], strict=True))
        if s == 1 and d != 1
    )
    out = sum(x, axes, keepdims=True) if axes else x
    return out.reshape(shape) if out.shape != shape else out


# -- linear algebra and layout ---------------------------------------------------------------
def matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    if type(a) is Tensor and type(b) is Tensor:
        backend = a.backend  # fast path: every check below, inline, in one go
        sa, sb = a.shape, b.shape
        if (
            b.backend is backend
            and a.dtype == b.dtype
            and a.dtype in _FLOATS
            and len(sa) >= 2
            and len(sa) == len(sb)
            and sa[:-2] == sb[:-2]
            and (sa[-2] if transpose_a else sa[-1]) == (sb[-1] if transpose_b else sb[-2])
        ):
            if not backend.accepts_strided:
                a, b = _prep(backend, a), _prep(backend, b)
            return _call("matmul", backend, a, b, bool(transpose_a), bool(transpose_b))
    _require_tensor("matmul", a)
    _require_tensor("matmul", b)
    backend = same_backend("matmul", a, b)
    _same_dtype("matmul", a, b)
    _float("matmul", a)
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(f"[matmul] operands need rank >= 2; got {a.shape} and {b.shape}")
    if a.shape[:-2] != b.shape[:-2]:
        raise ShapeError(
            f"[matmul] batch dims must be identical (no implicit broadcasting); got "
            f"{a.shape} and {b.shape}"
        )
    k_a = a.shape[-2] if transpose_a else a.shape[-1]
    k_b = b.shape[-1] if transpose_b else b.shape[-2]
    if k_a != k_b:
        raise ShapeError(
            f"[matmul] inner dims differ: {a.shape}{'ᵀ' if transpose_a else ''} @ "
            f"{b.shape}{'ᵀ' if transpose_b else ''} ({k_a} != {k_b})"
        )
    return _call(
        "matmul",
        backend,
        _prep(backend, a),
        _prep(backend, b),
        bool(transpose_a),
        bool(transpose_b),
    )


def concatenate_last_axis(xs: Sequence[Tensor]) -> Tensor:
    xs = list(xs)
    if not xs:
        raise ShapeError("[concatenate_last_axis] needs at least one tensor")
    for x in xs:
        _require_tensor("concatenate_last_axis", x)
    backend = same_backend("concatenate_last_axis", *xs)
    _same_dtype("concatenate_last_axis", *xs)
    lead = xs[0].shape[:-1]
    if any(x.ndim == 0 or x.shape[:-1] != lead for x in xs):
        shapes = ", ".join(str(x.shape) for x in xs)
        raise ShapeError(f"[concatenate_last_axis] leading dims must match; got {shapes}")
    return _call("concatenate_last_axis", backend, [_prep(backend, x) for x in xs])


def split_last_axis(x: Tensor, sizes: Sequence[int]) -> list[Tensor]:
    _require_tensor("split_last_axis", x)
    sizes = [int(s) for s in sizes]
    if x.ndim == 0 or builtins.sum(sizes) != x.shape[-1] or any(s <= 0 for s in sizes):
        raise ShapeError(
            f"[split_last_axis] positive sizes {sizes} must add up to the last dim of {x.shape}"
        )
    return _call("split_last_axis", x.backend, _prep(x.backend, x), sizes)


# -- in-place and layout helpers -------------------------------------------------------------------
def contiguous(x: Tensor) -> Tensor:
    return x.contiguous()


def fill_(x: Tensor, value: float) -> Tensor:
    """In place; bumps the storage version so graphs reading ``x`` become stale."""
    _require_tensor("fill_", x)
    if not x.is_dense:
        raise ShapeError("[fill_] needs a dense tensor (offset 0, C-contiguous)")
    _call("fill", x.backend, x, float(value))
    x.bump_version()
    return x


def assign_(dst: Tensor, src: Tensor) -> Tensor:
    """In place: ``dst`` takes the values of ``src`` (same shape, dtype, backend).

    Implemented by giving ``dst``'s storage a dense copy of ``src``'s buffer, so it works on
    every backend without an extra protocol method; ``dst`` must cover its whole storage.
    """
    _require_tensor("assign_", dst)
    _require_tensor("assign_", src)
    same_backend("assign_", dst, src)
    _same_shape("assign_", dst, src)
    _same_dtype("assign_", dst, src)
    if not dst.is_dense or dst.storage.size != dst.size:
        raise ShapeError("[assign_] destination must be a dense tensor owning its whole storage")
    fresh = dst.backend.copy_strided(src)
    # Swap, not overwrite: ``fresh``'s storage then releases dst's old buffer when it dies,
    # so a backend's release hook (byte count, buffer pool) never frees the live one.
    dst.storage.buffer, fresh.storage.buffer = fresh.storage.buffer, dst.storage.buffer
    dst.bump_version()
    return dst


# fused ops live in their own module to keep this file about primitives
from .fused_ops import *  # noqa: E402,F403
from .fused_ops import __all__ as _fused_all  # noqa: E402

__all__ = [  # noqa: F405
    "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "abs", "add", "sub", "mul", "div",
    "maximum", "minimum", "add_scalar", "mul_scalar", "pow_scalar", "where", "compare", "cast",
    "sum", "max", "mean", "argmax", "sum_to_shape", "matmul", "concatenate_last_axis",
    "split_last_axis", "contiguous", "fill_", "assign_", "same_backend", *_fused_all,
]  # fmt: skip
