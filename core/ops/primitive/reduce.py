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
from typing import Any, Protocol

import numpy as np

from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import EXACT_TOLERANCES, OpUnit, Tolerance, Tolerances, register
from ..samples import (
    Arr,
    Ctx,
    Draw,
    Example,
    Params,
    Samples,
    edges,
    error,
    grid,
    label,
    normal,
    rms,
    rng_of,
    with_specials,
)
from .binary import div, mul, mul_scalar
from .select import compare

FLOATS = checks.FLOATS
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


# -- conformance samples ---------------------------------------------------------------------------
def _draw_reduce(d: Draw) -> Params:
    shape = d.shape(1, 4)
    return {
        "shape": shape,
        "axes": d.subset(range(len(shape))),
        "keepdims": d.boolean(),
        "special": d.boolean() and d.boolean(),
    }


def _reduce_samples(op: str) -> Samples:
    def build(p: Params, ctx: Ctx) -> Example:
        rng = rng_of(p)
        x = normal(rng, p["shape"])
        if p.get("neg_inf"):
            x[..., ::3] = -np.inf
        if p.get("special"):
            x = with_specials(x, rng, np.nan, np.inf, -np.inf)
        args = [Arr(x, layout=p["layout"]), p["axes"]]
        return Example(label(p), args, {"keepdims": p["keepdims"]}, params=p)

    e = edges(
        {"label": "long row", "shape": (3, 4097), "axes": (1,), "keepdims": False},
        {"label": "long leading axis", "shape": (20000, 3), "axes": (0,), "keepdims": False},
        {"label": "all axes", "shape": (5, 7, 3), "axes": (0, 1, 2), "keepdims": True},
        {"label": "middle axis, transposed", "shape": (4, 33, 6), "axes": (1,), "keepdims": True,
         "layout": "transposed"},
        {"label": "broadcast", "shape": (9, 65), "axes": (0,), "keepdims": False,
         "layout": "broadcast"},
        {"label": "offset x[1:]", "shape": (6, 10), "axes": (1,), "keepdims": False,
         "layout": "offset"},
        {"label": "rows x[:, :k]", "shape": (7, 9), "axes": (0, 1), "keepdims": False,
         "layout": "rows"},
        {"label": "size-1 axes", "shape": (1, 1, 5), "axes": (0, 1), "keepdims": False},
        {"label": "NaN and +-inf", "shape": (6, 11), "axes": (1,), "keepdims": False,
         "special": True},
        {"label": "rows with -inf", "shape": (4, 10), "axes": (1,), "keepdims": False,
         "neg_inf": True},
    )  # fmt: skip
    if op == "sum":
        e += edges({"label": "empty axis", "shape": (3, 0), "axes": (1,), "keepdims": False})
    bench = {"shape": (1024, 1024), "axes": (1,), "keepdims": False}
    return Samples(build, e, _draw_reduce, bench=bench)


def _sum_scale(ex: Example) -> float:
    x, axes = ex.args[0].value, ex.args[1]
    n = int(np.prod([x.shape[a] for a in axes]))
    return builtins.max(1.0, n * rms(x))


def _build_argmax(p: Params, ctx: Ctx) -> Example:
    rng = rng_of(p)
    x = grid(rng, p["shape"], 2) if p.get("ties") else normal(rng, p["shape"])
    if p.get("special"):
        x = with_specials(x, rng, np.nan, np.inf, -np.inf)
    return Example(label(p), [Arr(x, layout=p["layout"])], params=p)


def _draw_argmax(d: Draw) -> Params:
    return {"shape": d.shape(), "ties": d.boolean()}


_ARGMAX_EDGES = edges(
    {"label": "ties (first maximum wins)", "shape": (6, 9), "ties": True},
    {"label": "long row", "shape": (2, 4097)},
    {"label": "width 1", "shape": (5, 1)},
    {"label": "transposed", "shape": (7, 33), "ties": True, "layout": "transposed"},
    {"label": "offset x[1:]", "shape": (5, 8), "layout": "offset"},
    {"label": "NaN (first NaN wins) and +-inf", "shape": (8, 13), "special": True},
)


def _reduce_cost(args: list[Any]) -> tuple[int, int]:
    return (args[0].nbytes, args[0].size)


#: accumulation order is the backend's (tiles, pairwise, blocks): atol per unit of n * rms.
_SUM_TOL = Tolerances(
    Tolerance(1e-6, 1e-5), Tolerance(1e-14, 1e-12), scale=_sum_scale,
    why="accumulation order is the backend's; atol per unit of n * rms(terms)",
)  # fmt: skip


def _reduce_errors(op: str, fn: Any) -> tuple[Any, ...]:
    return (
        error(f"{op}_axis_out_of_range", op, lambda t: fn(t.f(2, 3), 2)),
        error(f"{op}_repeated_axis", op, lambda t: fn(t.f(2, 3), (1, -1))),
        error(f"{op}_index_dtype", op, lambda t: fn(t.i(4)), "index"),
    )


SUM = OpUnit(
    "sum", "primitive", "reduce", ReduceMethods.sum, function=sum, vjp=_sum_vjp,
    differentiable=(0,), tolerance=_SUM_TOL, samples=_reduce_samples("sum"), cost=_reduce_cost,
    errors=_reduce_errors("sum", sum),
)  # fmt: skip
MAX = OpUnit(
    "max", "primitive", "reduce", ReduceMethods.max, function=max, vjp=_max_vjp,
    differentiable=(0,), nan="NaN if any reduced element is NaN",
    tolerance=EXACT_TOLERANCES, samples=_reduce_samples("max"), cost=_reduce_cost,
    errors=(*_reduce_errors("max", max),
            error("max_empty_axis", "max", lambda t: max(t.f(3, 0), 1))),
)  # fmt: skip
ARGMAX = OpUnit(
    "argmax", "primitive", "reduce", ReduceMethods.argmax, function=argmax,
    nan="index of the first NaN", tolerance=EXACT_TOLERANCES,
    samples=Samples(_build_argmax, _ARGMAX_EDGES, _draw_argmax, bench={"shape": (1024, 1024)}),
    cost=_reduce_cost,
    errors=(error("argmax_empty_row", "argmax", lambda t: argmax(t.f(3, 0))),
            error("argmax_0d", "argmax", lambda t: argmax(t.f()))),
)  # fmt: skip

register(SUM, MAX, ARGMAX)
