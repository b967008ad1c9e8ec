"""Conformance data of ``primitive/select.py``: masks with NaN and -0.0 conditions, ties
on a coarse grid, casts that truncate and saturate."""

from __future__ import annotations

import numpy as np

from ....dtypes import LOW_PRECISION
from ... import samples as smp
from ..select import COMPARE_OPS, cast, compare, where

EDGES = smp.edges(
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


def _build_where(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    rng, s = smp.rng_of(p), p["shape"]
    cond = (rng.random(s) < 0.5).astype(np.float64)
    a, b = smp.normal(rng, s), smp.normal(rng, s)
    if p.get("special"):  # NaN cond picks a, -0.0 picks b; NaN values pass through
        cond = smp.with_specials(cond, rng, np.nan, -0.0, 1.0, 0.0)
        a, b = smp.with_specials(a, rng, *_SPECIALS), smp.with_specials(b, rng, *_SPECIALS)
    args = [smp.Arr(cond, "mask", p["layout"]), smp.Arr(a), smp.Arr(b, layout=p["layout"])]
    return smp.Example(smp.label(p), args, params=p)


def _build_compare(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    rng, s = smp.rng_of(p), p["shape"]
    a, b = smp.grid(rng, s), smp.grid(rng, s)
    if p.get("special"):
        a, b = smp.with_specials(a, rng, *_SPECIALS), smp.with_specials(b, rng, *_SPECIALS)
    return smp.Example(
        smp.label(p), [smp.Arr(a, layout=p["layout"]), smp.Arr(b), p["cmp"]], params=p
    )


def _draw_compare(d: smp.Draw) -> smp.Params:
    return {"shape": d.shape(), "cmp": d.choice(COMPARE_OPS)}


def _draw_shape(d: smp.Draw) -> smp.Params:
    return {"shape": d.shape()}


def _build_cast(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    rng, s, to = smp.rng_of(p), p["shape"], p["to"]
    others = [d for d in ctx.float_dtypes if d != ctx.dtype]
    if to == "other float" and not others:
        to = "index"
    if ctx.dtype in LOW_PRECISION and others:  # no cast between an index dtype and half
        to = "other float"
    if to == "index":  # truncation toward zero, negatives included; specials saturate
        target = ctx.index_dtype(p["seed"])
        values = rng.uniform(-1000, 1000, s)
        if p.get("special"):
            values = smp.with_specials(values, rng, np.nan, np.inf, -np.inf, 3e9, -3e9, 1e19, -0.7)
        x = smp.Arr(values, layout=p["layout"])
    elif to == "float from index":
        target = ctx.dtype
        x = smp.Arr(rng.integers(-1000, 1000, s), "index", p["layout"], ctx.index_dtype(p["seed"]))
    else:
        target = others[p["seed"] % len(others)]  # every pair, over the seeds
        values = smp.normal(rng, s)
        if p.get("special"):
            values = smp.with_specials(values, rng, np.nan, np.inf, -np.inf, 1e40, 1e-50, -0.0,
                                       *_ROUNDING_TRAPS)  # fmt: skip
        x = smp.Arr(values, layout=p["layout"])
    return smp.Example(
        f"{smp.label(p)}, to {np.dtype(target).name}", [x, np.dtype(target)], params=p
    )


#: Values where a conversion to float16 or bfloat16 shows how it rounds: ties to even
#: (1 + 2^-11 and 1 + 3 * 2^-11 in float16; 1 + 2^-8 in bfloat16), the float16 overflow
#: boundary (65504 + 16 rounds to inf, just below it to 65504), float16 subnormals and the
#: tie below the smallest one (2^-25 rounds to 0), and values a float64 -> bfloat16 or
#: float16 conversion that goes through float32 rounds twice (1 + 2^-8 + 2^-30 is
#: above the bfloat16 tie; in float32 it becomes the tie itself and then rounds down).
_ROUNDING_TRAPS = (
    1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, -(1 + 3 * 2**-8), 65520.0, 65519.0, -65520.0,
    2**-25, 3 * 2**-26, 2**-20, -(2**-24), 1 + 2**-8 + 2**-30, 1 + 2**-11 + 2**-40,
    3.3895313892515355e38, 2**-130,
)  # fmt: skip


def _draw_cast(d: smp.Draw) -> smp.Params:
    return {"shape": d.shape(), "to": d.choice(("index", "float from index", "other float"))}


_CAST_EDGES = tuple(
    {**e, "to": t} for e in EDGES for t in ("index", "float from index", "other float")
)


SAMPLES = {
    "where": smp.SampleSet(
        smp.Samples(_build_where, EDGES, _draw_shape, bench={"shape": (1024, 1024)}),
        (
            smp.error("where_shapes", "where", lambda t: where(t.f(2, 3), t.f(2, 3), t.f(3, 2))),
            smp.error("where_mixed_devices", "where",
                      lambda t: where(t.f(2), t.f(2), t.other_device(2))),
        ),
    ),
    "compare": smp.SampleSet(
        smp.Samples(
            _build_compare, tuple({**e, "cmp": c} for e in EDGES for c in COMPARE_OPS),
            _draw_compare, bench={"shape": (1024, 1024), "cmp": "lt"},
        ),
        (
            smp.error("compare_unknown_op", "compare", lambda t: compare(t.f(2), t.f(2), "<")),
            smp.error("compare_shapes", "compare", lambda t: compare(t.f(2, 3), t.f(3, 2), "lt")),
        ),
    ),
    "cast": smp.SampleSet(
        smp.Samples(_build_cast, _CAST_EDGES, _draw_cast, needs_index=True,
                    bench={"shape": (1024, 1024), "to": "index"}),
        (
            smp.error("cast_to_unsupported", "cast", lambda t: cast(t.f(2), t.unsupported_dtype()),
                      "unsupported"),
            smp.error("cast_to_bool", "cast", lambda t: cast(t.f(2), np.bool_)),
        ),
    ),
}  # fmt: skip
