"""Differentiable arithmetic, reductions and layout ops: the Variable-level front.

Each op's VJP lives in its op unit (``riftco.ops``), next to the op; here ``apply`` records
it, after the conveniences only autograd has: Python numbers on either side, domain checks
(``log``/``sqrt`` need positive input), and the layout ops that are Tensor views (no
kernel, so their VJP is written below). Forward and backward call only raw ops or views,
so all numerical work stays on the operands' backend and no graph is built in backward.
Broadcasting is the explicit ``broadcast_to`` node, whose VJP is ``sum_to_shape``.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import ops
from ..errors import DTypeError
from ..ops.primitive import binary, layout, reduce, unary
from ..ops.primitive import matmul as _matmul
from ..tensor import Tensor, _parse_shape
from . import domain
from .apply import apply, as_variable
from .graph import Variable, make

_NUMBER = (int, float, np.integer, np.floating)

__all__ = ["as_variable"]


def _reshape(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    if g.shape == shape:
        return g
    return (g if g.is_contiguous else g.contiguous()).reshape(shape)


# -- binary arithmetic (equal shapes; a Python number on either side) ------------------------------
def add(a: Any, b: Any) -> Variable:
    if isinstance(b, _NUMBER):
        return apply(binary.ADD_SCALAR, a, float(b))
    return apply(binary.ADD, a, b)


def sub(a: Any, b: Any) -> Variable:
    if isinstance(b, _NUMBER):
        return apply(binary.ADD_SCALAR, a, -float(b))
    return apply(binary.SUB, a, b)


def rsub(a: Variable, b: Any) -> Variable:
    """``b - a``."""
    if isinstance(b, _NUMBER):
        return apply(binary.ADD_SCALAR, apply(unary.NEG, a), float(b))
    return sub(as_variable(b, "sub"), a)


def mul(a: Any, b: Any) -> Variable:
    if isinstance(b, _NUMBER):
        return apply(binary.MUL_SCALAR, a, float(b))
    return apply(binary.MUL, a, b)


def div(a: Any, b: Any) -> Variable:
    if isinstance(b, _NUMBER):
        return mul(a, 1.0 / float(b))
    return apply(binary.DIV, a, b)


def rdiv(a: Variable, b: Any) -> Variable:
    """``b / a``."""
    if isinstance(b, _NUMBER):
        return mul(apply(binary.POW_SCALAR, a, -1.0), float(b))
    return div(as_variable(b, "div"), a)


def neg(x: Variable) -> Variable:
    return apply(unary.NEG, x)


def pow(x: Variable, p: Any) -> Variable:  # noqa: A001 - operator spelling
    if not isinstance(p, _NUMBER) or isinstance(p, bool):
        raise DTypeError(f"[pow] exponent must be a Python number; got {type(p).__name__}")
    return apply(binary.POW_SCALAR, x, float(p))


def matmul(a: Any, b: Any) -> Variable:
    """``[..., M, K] @ [..., K, N]`` with identical batch dims (no implicit broadcasting)."""
    return apply(_matmul.MATMUL, a, b, False, False)


def maximum(a: Any, b: Any) -> Variable:
    return apply(binary.MAXIMUM, a, b)


def minimum(a: Any, b: Any) -> Variable:
    return apply(binary.MINIMUM, a, b)


def where(cond: Tensor, a: Any, b: Any) -> Variable:
    return apply(ops.unit("where"), cond, a, b)


# -- unary ------------------------------------------------------------------------------------
def exp(x: Variable) -> Variable:
    return apply(unary.EXP, x)


def log(x: Variable) -> Variable:
    domain.require_positive("log", x._value)
    return apply(unary.LOG, x)


def sqrt(x: Variable) -> Variable:
    domain.require_positive("sqrt", x._value)
    return apply(unary.SQRT, x)


def rsqrt(x: Variable) -> Variable:
    domain.require_positive("rsqrt", x._value)
    return apply(unary.RSQRT, x)


def tanh(x: Variable) -> Variable:
    return apply(unary.TANH, x)


def abs(x: Variable) -> Variable:  # noqa: A001 - numpy spelling
    return apply(unary.ABS, x)


# -- reductions -------------------------------------------------------------------------------
def sum(x: Variable, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:  # noqa: A001
    return apply(reduce.SUM, x, axes, keepdims)


def mean(x: Variable, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:
    xv = x._value
    ax = ops.checks.axes("mean", xv, axes)
    count = builtins.max(math.prod(xv.shape[a] for a in ax), 1)
    return mul(sum(x, ax, keepdims), 1.0 / count)


def max(x: Variable, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:  # noqa: A001
    """Max over ``axes``; the gradient is shared equally between tied maxima."""
    return apply(reduce.MAX, x, axes, keepdims)


# -- layout (views: no kernel forward) ----------------------------------------------------------
def reshape(x: Variable, *shape: Any) -> Variable:
    xv = x._value
    src = xv.shape
    y = (xv if xv.is_contiguous else xv.contiguous()).reshape(*shape)
    return make(y, "reshape", (x,), lambda g: (_reshape(g, src),))


def transpose(x: Variable, a: int = -2, b: int = -1) -> Variable:
    return make(x._value.transpose(a, b), "transpose", (x,), lambda g: (g.transpose(a, b),))


def permute(x: Variable, *axes: Any) -> Variable:
    y = x._value.permute(*axes)  # validates the permutation
    order = [int(a) % x.ndim for a in _parse_shape(axes)]
    inverse = tuple(int(i) for i in np.argsort(order))  # backward applies the inverse order
    return make(y, "permute", (x,), lambda g: (g.permute(inverse),))


def broadcast_to(x: Variable, *shape: Any) -> Variable:
    src = x._value.shape
    return make(
        x._value.broadcast_to(*shape), "broadcast_to", (x,), lambda g: (ops.sum_to_shape(g, src),)
    )


def sum_to_shape(x: Variable, shape: Sequence[int]) -> Variable:
    src = x._value.shape
    return make(
        ops.sum_to_shape(x._value, shape), "sum_to_shape", (x,), lambda g: (g.broadcast_to(src),)
    )


# -- joining along the feature axis --------------------------------------------------------------
def concatenate_last_axis(xs: Sequence[Any]) -> Variable:
    """A list of Variables in: the unit's VJP splits the gradient back into their widths."""
    parents = tuple(as_variable(x, "concatenate_last_axis") for x in xs)
    values = [p._value for p in parents]
    y = ops.concatenate_last_axis(values)
    vjp = layout.CONCATENATE.vjp
    assert vjp is not None
    return make(y, "concatenate_last_axis", parents, lambda g: vjp(g, (values,), y, ()))


def pad_last_axis(g: Tensor, left: int, right: int) -> Tensor:
    """``g`` with ``left``/``right`` zero columns on the last axis: scatters a slice back."""
    lead = g.shape[:-1]
    pieces = [g]
    if left:
        pieces.insert(0, ops.full_like(g, 0.0, lead + (left,)))
    if right:
        pieces.append(ops.full_like(g, 0.0, lead + (right,)))
    return ops.concatenate_last_axis(pieces) if len(pieces) > 1 else g


def split_last_axis(x: Variable, sizes: Sequence[int]) -> list[Variable]:
    pieces = ops.split_last_axis(x._value, sizes)
    total = x._value.shape[-1]
    outs, start = [], 0
    for piece in pieces:
        left, right = start, total - start - piece.shape[-1]

        def rule(g: Tensor, left: int = left, right: int = right) -> tuple[Tensor]:
            return (pad_last_axis(g, left, right),)

        outs.append(make(piece, "split_last_axis", (x,), rule))
        start += piece.shape[-1]
    return outs


def cast(x: Any, dtype: Any) -> Variable:
    """``x`` in another float dtype; the gradient comes back in ``x``'s dtype (so float32
    master weights cast to bfloat16 for a step receive float32 gradients)."""
    from ..ops.primitive.select import CAST

    return apply(CAST, x, dtype)
