"""Conformance data of ``fused/softmax.py``: long rows, width 1, empty rows and axes,
logits past exp overflow, -inf entries, all -inf and NaN rows, every layout; the host
softmax the attention samples share."""

from __future__ import annotations

import numpy as np

from ... import samples as smp
from ..softmax import softmax, softmax_backward


def softmax_input(p: smp.Params) -> np.ndarray:
    rng = smp.rng_of(p)
    x = smp.normal(rng, p["shape"], 3.0)
    if p.get("large"):  # far past float32's exp overflow (88.7): needs the max subtraction
        x = rng.uniform(-1e4, 1e4, p["shape"])
    if p.get("neg_inf") and x.shape[-1] > 1:
        x[..., 1::2] = -np.inf  # every row keeps its first entry finite
    if p.get("all_inf_row"):
        x.reshape(-1, x.shape[-1])[0] = -np.inf  # softmax of an all -inf row is NaN
    if p.get("nan_row"):
        x.reshape(-1, x.shape[-1])[1, 2] = np.nan
    return x


EDGES = smp.edges(
    {"label": "long row (4097)", "shape": (2, 4097)},
    {"label": "size-1 axes", "shape": (1, 1, 1)},
    {"label": "T=1", "shape": (1, 1, 33)},
    {"label": "odd sizes", "shape": (3, 5, 67)},
    {"label": "transposed", "shape": (9, 33), "layout": "transposed"},
    {"label": "broadcast", "shape": (4, 17), "layout": "broadcast"},
    {"label": "sliced", "shape": (3, 65), "layout": "sliced"},
    {"label": "offset x[1:]", "shape": (4, 9), "layout": "offset"},
    {"label": "rows x[:, :k]", "shape": (5, 12), "layout": "rows"},
    {"label": "logits +-1e4 (past exp overflow)", "shape": (4, 100), "large": True},
    {"label": "rows with -inf", "shape": (5, 33), "neg_inf": True},
    {"label": "width 1", "shape": (6, 1)},
    {"label": "empty rows", "shape": (0, 5)},
    {"label": "empty last axis", "shape": (3, 0)},
    {"label": "a NaN makes its row NaN", "shape": (3, 6), "nan_row": True},
) + smp.past_boundaries(lambda r, c: {"label": f"{r} rows of {c}", "shape": (r, c)})


def _draw(d: smp.Draw) -> smp.Params:
    return {"shape": d.shape(), "large": d.boolean() and d.boolean()}


def _build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    return smp.Example(smp.label(p), [smp.Arr(softmax_input(p), layout=p["layout"])], params=p)


def np_softmax(x: np.ndarray) -> np.ndarray:
    """Host float64 softmax, for the saved outputs backward samples need."""
    with np.errstate(invalid="ignore"):
        if x.shape[-1] == 0:
            return x.copy()
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _build_backward(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    y = np_softmax(softmax_input(p).astype(ctx.dtype).astype(np.float64))
    dy = smp.normal(np.random.default_rng(p["seed"] + 1), p["shape"])
    return smp.Example(
        smp.label(p), [smp.Arr(dy, layout=p["layout"]), smp.Arr(y, layout=p["layout"])], params=p
    )


SAMPLES = {
    "softmax": smp.SampleSet(
        samples=smp.Samples(_build, EDGES + smp.edges(
            {"label": "all -inf row gives NaN", "shape": (3, 7), "all_inf_row": True}), _draw,
            bench={"shape": (1024, 1024)}),
        errors=(smp.error("softmax_0d", "softmax", lambda t: softmax(t.f())),
                smp.error("softmax_index_dtype", "softmax", lambda t: softmax(t.i(3)), "index")),
    ),
    "softmax_backward": smp.SampleSet(
        samples=smp.Samples(_build_backward, EDGES, _draw, bench={"shape": (1024, 1024)}),
        errors=(smp.error("softmax_backward_shapes", "softmax_backward",
                          lambda t: softmax_backward(t.f(2, 3), t.f(2, 4))),),
    ),
}  # fmt: skip
