"""Conformance data of ``primitive/layout.py``: width-1 and odd widths, one piece, rank 1,
strided and offset pieces, and the mismatched pieces that must raise."""

from __future__ import annotations

from ... import samples as smp
from ..layout import concatenate_last_axis, split_last_axis


def _build_concat(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    rng = smp.rng_of(p)
    pieces = [smp.Arr(smp.normal(rng, p["lead"] + (w,)), layout=p["layout"]) for w in p["widths"]]
    return smp.Example(smp.label(p), [pieces], params=p)


def _draw_concat(d: smp.Draw) -> smp.Params:
    return {"lead": d.shape(0, 2), "widths": [d.choice(smp.SIZES) for _ in range(d.integer(1, 4))]}


_CONCAT_EDGES = smp.edges(
    {"label": "width-1 pieces", "lead": (3,), "widths": [1, 1, 1]},
    {"label": "odd widths, transposed", "lead": (5,), "widths": [7, 33, 2], "layout": "transposed"},
    {"label": "one piece", "lead": (2, 3), "widths": [65]},
    {"label": "offset pieces", "lead": (4,), "widths": [3, 5], "layout": "offset"},
    {"label": "rank 1", "lead": (), "widths": [4, 9]},
)


def _build_split(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    x = smp.normal(smp.rng_of(p), p["lead"] + (sum(p["sizes"]),))
    return smp.Example(smp.label(p), [smp.Arr(x, layout=p["layout"]), list(p["sizes"])], params=p)


def _draw_split(d: smp.Draw) -> smp.Params:
    return {"lead": d.shape(0, 2), "sizes": [d.choice(smp.SIZES) for _ in range(d.integer(1, 4))]}


_SPLIT_EDGES = smp.edges(
    {"label": "width-1 pieces", "lead": (3,), "sizes": [1, 1, 1]},
    {"label": "odd widths, sliced", "lead": (5,), "sizes": [7, 33, 2], "layout": "sliced"},
    {"label": "one piece", "lead": (2, 3), "sizes": [65]},
    {"label": "offset", "lead": (4,), "sizes": [3, 5], "layout": "offset"},
)


SAMPLES = {
    "concatenate_last_axis": smp.SampleSet(
        smp.Samples(_build_concat, _CONCAT_EDGES, _draw_concat,
                    bench={"lead": (512,), "widths": [512, 512]}),
        (
            smp.error("concatenate_leading", "concatenate_last_axis",
                      lambda t: concatenate_last_axis([t.f(2, 3), t.f(3, 3)])),
            smp.error("concatenate_empty_list", "concatenate_last_axis",
                      lambda t: concatenate_last_axis([])),
            smp.error("concatenate_mixed_devices", "concatenate_last_axis",
                      lambda t: concatenate_last_axis([t.f(2, 3), t.other_device(2, 3)])),
        ),
    ),
    "split_last_axis": smp.SampleSet(
        smp.Samples(_build_split, _SPLIT_EDGES, _draw_split,
                    bench={"lead": (512,), "sizes": [512, 512]}),
        (
            smp.error("split_sizes", "split_last_axis",
                      lambda t: split_last_axis(t.f(2, 5), [2, 2])),
            smp.error("split_zero_width", "split_last_axis",
                      lambda t: split_last_axis(t.f(2, 5), [5, 0])),
        ),
    ),
}  # fmt: skip
