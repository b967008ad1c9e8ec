"""Conformance data of ``primitive/select.py``: masks with NaN and -0.0 conditions, ties
on a coarse grid, casts that truncate and saturate."""

from __future__ import annotations

import numpy as np

from ...samples import (
    Arr,
    Ctx,
    Draw,
    Example,
    Params,
    Samples,
    SampleSet,
    edges,
    error,
    grid,
    label,
    normal,
    rng_of,
    with_specials,
)
from ..select import COMPARE_OPS, cast, compare, where

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


SAMPLES = {
    "where": SampleSet(
        Samples(_build_where, EDGES, _draw_shape, bench={"shape": (1024, 1024)}),
        (
            error("where_shapes", "where", lambda t: where(t.f(2, 3), t.f(2, 3), t.f(3, 2))),
            error("where_mixed_devices", "where",
                  lambda t: where(t.f(2), t.f(2), t.other_device(2))),
        ),
    ),
    "compare": SampleSet(
        Samples(
            _build_compare, tuple({**e, "cmp": c} for e in EDGES for c in ("eq", "lt", "ge", "ne")),
            _draw_compare, bench={"shape": (1024, 1024), "cmp": "lt"},
        ),
        (
            error("compare_unknown_op", "compare", lambda t: compare(t.f(2), t.f(2), "<")),
            error("compare_shapes", "compare", lambda t: compare(t.f(2, 3), t.f(3, 2), "lt")),
        ),
    ),
    "cast": SampleSet(
        Samples(_build_cast, _CAST_EDGES, _draw_cast, needs_index=True,
                bench={"shape": (1024, 1024), "to": "index"}),
        (
            error("cast_to_unsupported", "cast", lambda t: cast(t.f(2), t.unsupported_dtype()),
                  "unsupported"),
            error("cast_to_bool", "cast", lambda t: cast(t.f(2), np.bool_)),
        ),
    ),
}  # fmt: skip
