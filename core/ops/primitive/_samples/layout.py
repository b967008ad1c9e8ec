"""Conformance data of ``primitive/layout.py``: width-1 and odd widths, one piece, rank 1,
strided and offset pieces, and the mismatched pieces that must raise."""

from __future__ import annotations

from ...samples import (
    SIZES,
    Arr,
    Ctx,
    Draw,
    Example,
    Params,
    Samples,
    SampleSet,
    edges,
    error,
    label,
    normal,
    rng_of,
)
from ..layout import concatenate_last_axis, split_last_axis


def _build_concat(p: Params, ctx: Ctx) -> Example:
    rng = rng_of(p)
    pieces = [Arr(normal(rng, p["lead"] + (w,)), layout=p["layout"]) for w in p["widths"]]
    return Example(label(p), [pieces], params=p)


def _draw_concat(d: Draw) -> Params:
    return {"lead": d.shape(0, 2), "widths": [d.choice(SIZES) for _ in range(d.integer(1, 4))]}


_CONCAT_EDGES = edges(
    {"label": "width-1 pieces", "lead": (3,), "widths": [1, 1, 1]},
    {"label": "odd widths, transposed", "lead": (5,), "widths": [7, 33, 2], "layout": "transposed"},
    {"label": "one piece", "lead": (2, 3), "widths": [65]},
    {"label": "offset pieces", "lead": (4,), "widths": [3, 5], "layout": "offset"},
    {"label": "rank 1", "lead": (), "widths": [4, 9]},
)


def _build_split(p: Params, ctx: Ctx) -> Example:
    x = normal(rng_of(p), p["lead"] + (sum(p["sizes"]),))
    return Example(label(p), [Arr(x, layout=p["layout"]), list(p["sizes"])], params=p)


def _draw_split(d: Draw) -> Params:
    return {"lead": d.shape(0, 2), "sizes": [d.choice(SIZES) for _ in range(d.integer(1, 4))]}


_SPLIT_EDGES = edges(
    {"label": "width-1 pieces", "lead": (3,), "sizes": [1, 1, 1]},
    {"label": "odd widths, sliced", "lead": (5,), "sizes": [7, 33, 2], "layout": "sliced"},
    {"label": "one piece", "lead": (2, 3), "sizes": [65]},
    {"label": "offset", "lead": (4,), "sizes": [3, 5], "layout": "offset"},
)


SAMPLES = {
    "concatenate_last_axis": SampleSet(
        Samples(_build_concat, _CONCAT_EDGES, _draw_concat,
                bench={"lead": (512,), "widths": [512, 512]}),
        (
            error("concatenate_leading", "concatenate_last_axis",
                  lambda t: concatenate_last_axis([t.f(2, 3), t.f(3, 3)])),
            error("concatenate_empty_list", "concatenate_last_axis",
                  lambda t: concatenate_last_axis([])),
            error("concatenate_mixed_devices", "concatenate_last_axis",
                  lambda t: concatenate_last_axis([t.f(2, 3), t.other_device(2, 3)])),
        ),
    ),
    "split_last_axis": SampleSet(
        Samples(_build_split, _SPLIT_EDGES, _draw_split,
                bench={"lead": (512,), "sizes": [512, 512]}),
        (
            error("split_sizes", "split_last_axis", lambda t: split_last_axis(t.f(2, 5), [2, 2])),
            error("split_zero_width", "split_last_axis",
                  lambda t: split_last_axis(t.f(2, 5), [5, 0])),
        ),
    ),
}  # fmt: skip
