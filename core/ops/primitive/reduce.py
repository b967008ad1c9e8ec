"""Reductions: ``sum`` and ``max`` over axes, ``argmax`` over the last axis.

Backends receive the axes normalised: non-negative, sorted, unique and non-empty (a
reduction over no axes never reaches them). ``sum`` is IEEE (NaN propagates, ``inf - inf``
gives NaN) and must accumulate long axes pairwise or in blocks, so its error grows like
``log n``, not ``n``; the order is otherwise the backend's. ``max`` propagates NaN (numpy's
``np.max``) and refuses an empty axis. ``argmax`` returns int32 indices of the first NaN of
a row if it has one, else of its first maximum.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import (
    EXACT_TOLERANCES,
    OpUnit,
    Tolerance,
    Tolerances,
    register,
    rms,
    samples_module,
)
from .binary import div, mul, mul_scalar
from .select import compare

if TYPE_CHECKING:
    from ..samples import Example

FLOATS = checks.FLOATS
_SAMPLES = samples_module(__name__)
Axes = int | Sequence[int] | None


class ReduceMethods(Protocol):
    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        """Sum over ``axes`` (non-negative, sorted, unique, non-empty); same dtype.

        Long axes accumulate pairwise or in blocks (error ~ log n); NaN propagates; an
        empty reduced axis gives 0."""
        ...

    def max(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        """Maximum over ``axes``; NaN if any reduced element is NaN. Axes are never empty."""
        ...

    def argmax(self, x: Tensor) -> Tensor:
        """``int32`` index of the first NaN, else of the first maximum, along the last axis;
        shape ``x.shape[:-1]``. The last axis is never empty."""
        ...


def _kept(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce(unit: OpUnit, x: Tensor, axes: Axes, keepdims: bool) -> Tensor:
    if axes is None and type(x) is Tensor and x.dtype in FLOATS and x.shape:
        ax = tuple(range(len(x.shape)))  # a full reduction, the common case
    else:
        checks.tensor(unit.name, x)
        checks.floats(unit.name, x)
        ax = checks.axes(unit.name, x, axes)
        if not ax:  # a reduction over no axes (rank-0 input) is the identity
            return x
    if unit is MAX and 0 in x.shape and builtins.any(x.shape[a] == 0 for a in ax):
        raise ShapeError(f"[max] cannot reduce an empty axis of shape {x.shape}")
    keep = keepdims if type(keepdims) is bool else checks.flag(unit.name, keepdims, "keepdims")
    return dispatch(unit, x.backend, (x, ax, keep), Out(_kept(x.shape, ax, keep), x.dtype))


def sum(x: Tensor, axes: Axes = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce(SUM, x, axes, keepdims)


def max(x: Tensor, axes: Axes = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce(MAX, x, axes, keepdims)


def argmax(x: Tensor) -> Tensor:
    checks.tensor("argmax", x)
    checks.floats("argmax", x)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ShapeError(f"[argmax] needs a non-empty last axis; got shape {x.shape}")
    return dispatch(ARGMAX, x.backend, (x,), Out(x.shape[:-1], np.dtype(np.int32)))


def mean(x: Tensor, axes: Axes = None, keepdims: bool = False) -> Tensor:
    """``sum`` divided by the number of elements reduced (0 for none: no NaN from 0/0)."""
    checks.floats("mean", checks.tensor("mean", x))
    ax = checks.axes("mean", x, axes)
    count = math.prod(x.shape[a] for a in ax)
    return mul_scalar(sum(x, ax, keepdims), 1.0 / builtins.max(count, 1))


def sum_to_shape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """Sum ``x`` down to ``shape``: the backward of ``broadcast_to``."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    if lead < 0 or builtins.any(
        s not in (1, d) for s, d in zip(shape, x.shape[lead:], strict=True)
    ):
        raise ShapeError(f"[sum_to_shape] cannot sum shape {x.shape} down to {shape}")
    axes = tuple(range(lead)) + tuple(
        lead + i
        for i, (s, d) in enumerate(zip(shape, x.shape[lead:], strict=True))
        if s == 1 and d != 1
    )
    out = sum(x, axes, keepdims=True) if axes else x
    return out.reshape(shape) if out.shape != shape else out


# -- VJPs ------------------------------------------------------------------------------------------
def _as_kept(g: Tensor, x: Tensor, axes: tuple[int, ...]) -> Tensor:
    kshape = _kept(x.shape, axes, True)
    return g if g.shape == kshape else g.contiguous().reshape(kshape)


def _sum_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    x, axes = args[0], checks.axes("sum", args[0], args[1])
    return (_as_kept(g, x, axes).broadcast_to(x.shape),)


def _max_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    """The gradient is shared equally between tied maxima."""
    x, axes = args[0], checks.axes("max", args[0], args[1])
    mask = compare(x, _as_kept(y, x, axes).broadcast_to(x.shape), "eq")
    share = div(_as_kept(g, x, axes), sum(mask, axes, keepdims=True))
    return (mul(mask, share.broadcast_to(x.shape)),)


def _sum_scale(ex: Example) -> float:
    x, axes = ex.args[0].value, ex.args[1]
    n = int(np.prod([x.shape[a] for a in axes]))
    return builtins.max(1.0, n * rms(x))


def _reduce_cost(args: list[Any]) -> tuple[int, int]:
    return (args[0].nbytes, args[0].size)


#: accumulation order is the backend's (tiles, pairwise, blocks): atol per unit of n * rms.
_SUM_TOL = Tolerances(
    Tolerance(1e-6, 1e-5), Tolerance(1e-14, 1e-12), scale=_sum_scale,
    why="accumulation order is the backend's; atol per unit of n * rms(terms)",
)  # fmt: skip


SUM = OpUnit(
    "sum", "primitive", ReduceMethods.sum, module="reduce", function=sum, vjp=_sum_vjp,
    differentiable=(0,), tolerance=_SUM_TOL, cost=_reduce_cost, testing=_SAMPLES,
)  # fmt: skip
MAX = OpUnit(
    "max", "primitive", ReduceMethods.max, module="reduce", function=max, vjp=_max_vjp,
    differentiable=(0,), nan="NaN if any reduced element is NaN",
    tolerance=EXACT_TOLERANCES, cost=_reduce_cost, testing=_SAMPLES,
)  # fmt: skip
ARGMAX = OpUnit(
    "argmax", "primitive", ReduceMethods.argmax, module="reduce", function=argmax,
    nan="index of the first NaN", tolerance=EXACT_TOLERANCES, cost=_reduce_cost,
    testing=_SAMPLES,
)  # fmt: skip

register(SUM, MAX, ARGMAX)
