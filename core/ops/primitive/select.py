"""Masks and conversions: ``where``, ``compare`` and ``cast``.

Masks have the operands' float dtype and hold exactly 1 or 0 (one element type per kernel;
a mask multiplies a gradient directly). ``where`` picks ``a`` wherever ``cond`` is
non-zero, NaN included, ``-0.0`` excluded. ``compare`` is IEEE: every comparison with NaN
is false except ``ne``. ``cast`` truncates floats toward zero and saturates to the target
integer range, NaN becoming 0 (OpenCL's ``convert_int_sat_rtz``), so no input is undefined.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ... import dtypes as _dt
from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import EXACT_TOLERANCES, OpUnit, register
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
    rng_of,
    with_specials,
)
from .memory import full_like

COMPARE_OPS: tuple[str, ...] = ("lt", "le", "gt", "ge", "eq", "ne")


class SelectMethods(Protocol):
    def where(self, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
        """``a`` where ``cond != 0`` (NaN counts as non-zero, -0.0 as zero), else ``b``;
        all three share one shape and float dtype."""
        ...

    def compare(self, a: Tensor, b: Tensor, op: str) -> Tensor:
        """Mask (1/0 in ``a.dtype``) of ``a <op> b``, ``op`` in ``lt le gt ge eq ne``;
        IEEE: false for NaN except ``ne``."""
        ...

    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        """Convert to ``dtype`` (a riftco dtype the backend declares, never ``x.dtype``).

        float -> int truncates toward zero and saturates to the int range; NaN -> 0,
        +inf -> max, -inf -> min. int -> int saturates likewise. -> float rounds to nearest
        (overflow gives +-inf)."""
        ...


def where(cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    backend = checks.float_operands("where", cond, a, b)
    checks.same_shape("where", cond, a, b)
    return dispatch(WHERE, backend, (cond, a, b), Out(a.shape, a.dtype))


def compare(a: Tensor, b: Tensor, op: str) -> Tensor:
    if op not in COMPARE_OPS:
        raise ShapeError(f"[compare] unknown comparison {op!r}; expected one of {COMPARE_OPS}")
    backend = checks.float_operands("compare", a, b)
    checks.same_shape("compare", a, b)
    return dispatch(COMPARE, backend, (a, b, op), Out(a.shape, a.dtype))


def cast(x: Tensor, dtype: Any) -> Tensor:
    """``x`` converted to ``dtype``; ``x`` itself when it already has that dtype."""
    checks.tensor("cast", x)
    dt = _dt.as_dtype(dtype, "cast")
    checks.supported("cast", x.backend, dt)
    if dt == x.dtype:
        return x
    return dispatch(CAST, x.backend, (x, dt), Out(x.shape, dt))


def _where_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[None, Any, Any]:
    cond = args[0]
    zero = full_like(g, 0.0, (1,) * g.ndim).broadcast_to(g.shape)
    return (
        None,
        where(cond, g, zero) if needs[1] else None,
        where(cond, zero, g) if needs[2] else None,
    )


# -- conformance samples ---------------------------------------------------------------------------
EDGES = edges(
    {"label": "size-1 axes", "shape": (1, 1, 1)},
    {"label": "odd sizes", "shape": (3, 67)},
    {"label": "0-d", "shape": ()},
    {"label": "empty", "shape": (0, 3)},
    {"label": "transposed", "shape": (5, 33), "layout": "transposed"},
    {"label": "broadcast", "shape": (4, 9), "layout": "broadcast"},
    {"label": "offset x[1:]", "shape": (6, 7), "layout": "offset"},
    {"label": "rows x[:, :k]", "shape": (5, 9), "layout": "rows"},
    {"label": "NaN and +-inf", "shape": (4, 33), "special": True},
)
_SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0)


def _build_where(p: Params, ctx: Ctx) -> Example:
    rng, s = rng_of(p), p["shape"]
    cond = (rng.random(s) < 0.5).astype(np.float64)
    a, b = normal(rng, s), normal(rng, s)
    if p.get("special"):  # NaN cond picks a, -0.0 picks b; NaN values pass through
        cond = with_specials(cond, rng, np.nan, -0.0, 1.0, 0.0)
        a, b = with_specials(a, rng, *_SPECIALS), with_specials(b, rng, *_SPECIALS)
    args = [Arr(cond, "mask", p["layout"]), Arr(a), Arr(b, layout=p["layout"])]
    return Example(label(p), args, params=p)


def _build_compare(p: Params, ctx: Ctx) -> Example:
    rng, s = rng_of(p), p["shape"]
    a, b = grid(rng, s), grid(rng, s)
    if p.get("special"):
        a, b = with_specials(a, rng, *_SPECIALS), with_specials(b, rng, *_SPECIALS)
    return Example(label(p), [Arr(a, layout=p["layout"]), Arr(b), p["cmp"]], params=p)


def _draw_compare(d: Draw) -> Params:
    return {"shape": d.shape(), "cmp": d.choice(COMPARE_OPS)}


def _draw_shape(d: Draw) -> Params:
    return {"shape": d.shape()}


def _build_cast(p: Params, ctx: Ctx) -> Example:
    rng, s, to = rng_of(p), p["shape"], p["to"]
    others = [d for d in ctx.float_dtypes if d != ctx.dtype]
    if to == "other float" and not others:
        to = "index"
    if to == "index":  # truncation toward zero, negatives included; specials saturate
        target = ctx.index_dtype(p["seed"])
        values = rng.uniform(-1000, 1000, s)
        if p.get("special"):
            values = with_specials(values, rng, np.nan, np.inf, -np.inf, 3e9, -3e9, 1e19, -0.7)
        x = Arr(values, layout=p["layout"])
    elif to == "float from index":
        target = ctx.dtype
        x = Arr(rng.integers(-1000, 1000, s), "index", p["layout"], ctx.index_dtype(p["seed"]))
    else:
        target = others[0]
        values = normal(rng, s)
        if p.get("special"):
            values = with_specials(values, rng, np.nan, np.inf, -np.inf, 1e40, 1e-50, -0.0)
        x = Arr(values, layout=p["layout"])
    return Example(f"{label(p)}, to {np.dtype(target).name}", [x, np.dtype(target)], params=p)


def _draw_cast(d: Draw) -> Params:
    return {"shape": d.shape(), "to": d.choice(("index", "float from index", "other float"))}


_CAST_EDGES = tuple(
    {**e, "to": t} for e in EDGES for t in ("index", "float from index", "other float")
)


def _cost(n_in: int) -> Any:
    return lambda args: ((n_in + 1) * args[0].nbytes, args[0].size)


WHERE = OpUnit(
    "where", "primitive", "select", SelectMethods.where, function=where,
    nan="cond NaN picks a; NaN values pass through", vjp=_where_vjp, differentiable=(1, 2),
    tolerance=EXACT_TOLERANCES, cost=_cost(3),
    samples=Samples(_build_where, EDGES, _draw_shape, bench={"shape": (1024, 1024)}),
    errors=(
        error("where_shapes", "where", lambda t: where(t.f(2, 3), t.f(2, 3), t.f(3, 2))),
        error("where_mixed_devices", "where",
              lambda t: where(t.f(2), t.f(2), t.other_device(2))),
    ),
)  # fmt: skip
COMPARE = OpUnit(
    "compare", "primitive", "select", SelectMethods.compare, function=compare,
    nan="IEEE: false with NaN except ne", tolerance=EXACT_TOLERANCES,
    samples=Samples(
        _build_compare, tuple({**e, "cmp": c} for e in EDGES for c in ("eq", "lt", "ge", "ne")),
        _draw_compare, bench={"shape": (1024, 1024), "cmp": "lt"},
    ),
    cost=_cost(2),
    errors=(
        error("compare_unknown_op", "compare", lambda t: compare(t.f(2), t.f(2), "<")),
        error("compare_shapes", "compare", lambda t: compare(t.f(2, 3), t.f(3, 2), "lt")),
    ),
)  # fmt: skip
CAST = OpUnit(
    "cast", "primitive", "select", SelectMethods.cast, function=cast,
    nan="float->int: NaN -> 0, +-inf and out-of-range saturate", tolerance=EXACT_TOLERANCES,
    samples=Samples(_build_cast, _CAST_EDGES, _draw_cast, needs_index=True,
                    bench={"shape": (1024, 1024), "to": "index"}), cost=_cost(1),
    errors=(
        error("cast_to_unsupported", "cast", lambda t: cast(t.f(2), t.unsupported_dtype()),
              "unsupported"),
        error("cast_to_bool", "cast", lambda t: cast(t.f(2), np.bool_)),
    ),
)  # fmt: skip

register(WHERE, COMPARE, CAST)
