"""Differentiable arithmetic, reductions and layout ops, each with its VJP right below.

Forward and backward call only raw ``tensor_ops`` (or zero-cost Tensor views), so all the
numerical work stays on the operands' backend and no graph is built during backward.
Elementwise ops need equal shapes: broadcasting is the explicit ``broadcast_to`` node,
whose VJP is ``sum_to_shape``. Rules capture forward *tensors*, never their output node.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import tensor_ops as ops
from ..creation import full_like
from ..errors import DTypeError
from ..tensor import Tensor, _parse_shape
from . import domain
from .graph import Variable, make

_NUMBER = (int, float, np.integer, np.floating)


def as_variable(x: Any, op: str) -> Variable:
    """Variables pass through; a raw Tensor becomes a constant (no gradient) leaf."""
    if isinstance(x, Variable):
        return x
    if isinstance(x, Tensor):
        return Variable(x)
    raise DTypeError(f"[{op}] expects a Variable or Tensor; got {type(x).__name__}")


def _reshape(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    if g.shape == shape:
        return g
    return (g if g.is_contiguous else g.contiguous()).reshape(shape)


# -- binary arithmetic (equal shapes) ------------------------------------------------------------
def add(a: Any, b: Any) -> Variable:
    if isinstance(b, _NUMBER):
        y = ops.add_scalar(a._value, b)  # type: ignore[arg-type]  # numpy scalars pass too
        return make(y, "add_scalar", (a,), lambda g: (g,))
    a, b = as_variable(a, "add"), as_variable(b, "add")
    return make(ops.add(a._value, b._value), "add", (a, b), lambda g: (g, g))


def sub(a: Any, b: Any) -> Variable:
    if isinstance(b, _NUMBER):
        y = ops.add_scalar(a._value, -b)  # type: ignore[arg-type]
        return make(y, "sub_scalar", (a,), lambda g: (g,))
    a, b = as_variable(a, "sub"), as_variable(b, "sub")
    return make(ops.sub(a._value, b._value), "sub", (a, b), lambda g: (g, ops.neg(g)))


def rsub(a: Variable, b: Any) -> Variable:
    """``b - a``."""
    if isinstance(b, _NUMBER):
        y = ops.add_scalar(ops.neg(a._value), b)  # type: ignore[arg-type]
        return make(y, "rsub_scalar", (a,), lambda g: (ops.neg(g),))
    return sub(as_variable(b, "sub"), a)


def mul(a: Any, b: Any) -> Variable:
    if isinstance(b, _NUMBER):
        c = float(b)
        return make(
            ops.mul_scalar(a._value, c), "mul_scalar", (a,), lambda g: (ops.mul_scalar(g, c),)
        )
    a, b = as_variable(a, "mul"), as_variable(b, "mul")
    av, bv = a._value, b._value
    need_a, need_b = a.requires_grad, b.requires_grad

    def rule(g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        return (ops.mul(g, bv) if need_a else None, ops.mul(g, av) if need_b else None)

    return make(ops.mul(av, bv), "mul", (a, b), rule)


def div(a: Any, b: Any) -> Variable:
    if isinstance(b, _NUMBER):
        return mul(a, 1.0 / float(b))
    a, b = as_variable(a, "div"), as_variable(b, "div")
    bv = b._value
    y = ops.div(a._value, bv)
    need_b = b.requires_grad

    def rule(g: Tensor) -> tuple[Tensor, Tensor | None]:
        ga = ops.div(g, bv)  # d(a/b)/db = -(a/b)/b, so gb = -ga * y
        return ga, ops.neg(ops.mul(ga, y)) if need_b else None

    return make(y, "div", (a, b), rule)


def rdiv(a: Variable, b: Any) -> Variable:
    """``b / a``."""
    if isinstance(b, _NUMBER):
        av = a._value
        y = ops.mul_scalar(ops.pow_scalar(av, -1.0), float(b))
        return make(y, "rdiv_scalar", (a,), lambda g: (ops.neg(ops.div(ops.mul(g, y), av)),))
    return div(as_variable(b, "div"), a)


def neg(x: Variable) -> Variable:
    return make(ops.neg(x._value), "neg", (x,), lambda g: (ops.neg(g),))


def pow(x: Variable, p: Any) -> Variable:  # noqa: A001 - operator spelling
    if not isinstance(p, _NUMBER) or isinstance(p, bool):
        raise DTypeError(f"[pow] exponent must be a Python number; got {type(p).__name__}")
    p = float(p)
    xv = x._value

    def rule(g: Tensor) -> tuple[Tensor]:
        if p == 0.0:
            return (ops.mul_scalar(g, 0.0),)
        return (ops.mul(g, ops.mul_scalar(ops.pow_scalar(xv, p - 1.0), p)),)

    return make(ops.pow_scalar(xv, p), "pow", (x,), rule)


def matmul(a: Any, b: Any) -> Variable:
    """``[..., M, K] @ [..., K, N]`` with identical batch dims (no implicit broadcasting)."""
    a, b = as_variable(a, "matmul"), as_variable(b, "matmul")
    av, bv = a._value, b._value
    need_a, need_b = a.requires_grad, b.requires_grad

    def rule(g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        ga = ops.matmul(g, bv, transpose_b=True) if need_a else None  # G Bᵀ
        gb = ops.matmul(av, g, transpose_a=True) if need_b else None  # Aᵀ G
        return ga, gb

    return make(ops.matmul(av, bv), "matmul", (a, b), rule)


# -- unary ------------------------------------------------------------------------------------
def exp(x: Variable) -> Variable:
    y = ops.exp(x._value)
    return make(y, "exp", (x,), lambda g: (ops.mul(g, y),))


def log(x: Variable) -> Variable:
    xv = x._value
    domain.require_positive("log", xv)
    return make(ops.log(xv), "log", (x,), lambda g: (ops.div(g, xv),))


def sqrt(x: Variable) -> Variable:
    xv = x._value
    domain.require_positive("sqrt", xv)
    y = ops.sqrt(xv)
    return make(y, "sqrt", (x,), lambda g: (ops.div(ops.mul_scalar(g, 0.5), y),))


def tanh(x: Variable) -> Variable:
    y = ops.tanh(x._value)
    return make(
        y, "tanh", (x,), lambda g: (ops.mul(g, ops.add_scalar(ops.neg(ops.mul(y, y)), 1.0)),)
    )


# -- reductions -------------------------------------------------------------------------------
def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def sum(x: Variable, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:  # noqa: A001
    xv = x._value
    shape = xv.shape
    kshape = _kept_shape(shape, ops._axes("sum", xv, axes))
    return make(
        ops.sum(xv, axes, keepdims),
        "sum",
        (x,),
        lambda g: (_reshape(g, kshape).broadcast_to(shape),),
    )


def mean(x: Variable, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:
    xv = x._value
    ax = ops._axes("mean", xv, axes)
    count = builtins.max(math.prod(xv.shape[a] for a in ax), 1)
    return mul(sum(x, ax, keepdims), 1.0 / count)


def max(x: Variable, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:  # noqa: A001
    """Max over ``axes``; the gradient is shared equally between tied maxima."""
    xv = x._value
    shape = xv.shape
    ax = ops._axes("max", xv, axes)
    kshape = _kept_shape(shape, ax)
    y = ops.max(xv, ax, keepdims)

    def rule(g: Tensor) -> tuple[Tensor]:
        if not ax:
            return (g,)
        mask = ops.compare(xv, _reshape(y, kshape).broadcast_to(shape), "eq")
        share = ops.div(_reshape(g, kshape), ops.sum(mask, ax, keepdims=True))
        return (ops.mul(mask, share.broadcast_to(shape)),)

    return make(y, "max", (x,), rule)


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
    parents = tuple(as_variable(x, "concatenate_last_axis") for x in xs)
    y = ops.concatenate_last_axis([p._value for p in parents])
    sizes = [p._value.shape[-1] for p in parents]
    return make(y, "concatenate_last_axis", parents, lambda g: ops.split_last_axis(g, sizes))


def pad_last_axis(g: Tensor, left: int, right: int) -> Tensor:
    """``g`` with ``left``/``right`` zero columns on the last axis: scatters a slice back."""
    lead = g.shape[:-1]
    pieces = [g]
    if left:
        pieces.insert(0, full_like(g, 0.0, lead + (left,)))
    if right:
        pieces.append(full_like(g, 0.0, lead + (right,)))
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
