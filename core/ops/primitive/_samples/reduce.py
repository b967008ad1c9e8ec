"""Conformance data of ``primitive/reduce.py``: long rows and long leading axes (past any
tile), every axis subset, empty axes, -inf rows, NaN, and ties for argmax."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import samples as smp
from ..reduce import argmax, max, sum


def _draw_reduce(d: smp.Draw) -> smp.Params:
    shape = d.shape(1, 4)
    return {
        "shape": shape,
        "axes": d.subset(range(len(shape))),
        "keepdims": d.boolean(),
        "special": d.boolean() and d.boolean(),
    }


def _reduce_samples(op: str) -> smp.Samples:
    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        rng = smp.rng_of(p)
        x = smp.normal(rng, p["shape"])
        if p.get("neg_inf"):
            x[..., ::3] = -np.inf
        if p.get("special"):
            x = smp.with_specials(x, rng, np.nan, np.inf, -np.inf)
        args = [smp.Arr(x, layout=p["layout"]), p["axes"]]
        return smp.Example(smp.label(p), args, {"keepdims": p["keepdims"]}, params=p)

    e = smp.edges(
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
    e += smp.past_boundaries(
        lambda r, c: {"label": f"{r} rows of {c}", "shape": (r, c), "axes": (1,), "keepdims": False}
    ) + smp.past_boundaries(
        lambda r, c: {"label": f"{r} rows of {c}, down the rows", "shape": (r, c), "axes": (0,),
                      "keepdims": True}
    )  # fmt: skip
    if op == "sum":
        e += smp.edges({"label": "empty axis", "shape": (3, 0), "axes": (1,), "keepdims": False})
    bench = {"shape": (1024, 1024), "axes": (1,), "keepdims": False}
    return smp.Samples(build, e, _draw_reduce, bench=bench)


def _build_argmax(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    rng = smp.rng_of(p)
    x = smp.grid(rng, p["shape"], 2) if p.get("ties") else smp.normal(rng, p["shape"])
    if p.get("special"):
        x = smp.with_specials(x, rng, np.nan, np.inf, -np.inf)
    return smp.Example(smp.label(p), [smp.Arr(x, layout=p["layout"])], params=p)


def _draw_argmax(d: smp.Draw) -> smp.Params:
    return {"shape": d.shape(), "ties": d.boolean()}


_ARGMAX_EDGES = smp.edges(
    {"label": "ties (first maximum wins)", "shape": (6, 9), "ties": True},
    {"label": "long row", "shape": (2, 4097)},
    {"label": "width 1", "shape": (5, 1)},
    {"label": "transposed", "shape": (7, 33), "ties": True, "layout": "transposed"},
    {"label": "offset x[1:]", "shape": (5, 8), "layout": "offset"},
    {"label": "NaN (first NaN wins) and +-inf", "shape": (8, 13), "special": True},
) + smp.past_boundaries(lambda r, c: {"label": f"{r} rows of {c}", "shape": (r, c), "ties": True})


def _reduce_errors(op: str, fn: Any) -> tuple[smp.ErrorSample, ...]:
    return (
        smp.error(f"{op}_axis_out_of_range", op, lambda t: fn(t.f(2, 3), 2)),
        smp.error(f"{op}_repeated_axis", op, lambda t: fn(t.f(2, 3), (1, -1))),
        smp.error(f"{op}_index_dtype", op, lambda t: fn(t.i(4)), "index"),
    )


SAMPLES = {
    "sum": smp.SampleSet(_reduce_samples("sum"), _reduce_errors("sum", sum)),
    "max": smp.SampleSet(_reduce_samples("max"), (
        *_reduce_errors("max", max),
        smp.error("max_empty_axis", "max", lambda t: max(t.f(3, 0), 1)),
    )),
    "argmax": smp.SampleSet(
        smp.Samples(_build_argmax, _ARGMAX_EDGES, _draw_argmax, bench={"shape": (1024, 1024)}),
        (smp.error("argmax_empty_row", "argmax", lambda t: argmax(t.f(3, 0))),
         smp.error("argmax_0d", "argmax", lambda t: argmax(t.f()))),
    ),
}  # fmt: skip
