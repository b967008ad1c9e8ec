"""Conformance data of ``fused/add_layer_norm.py``: layer_norm's edges (long rows, width 1,
zero rows, a far mean, NaN, every layout) on the sum of two operands, plus sums that
cancel (x = -r: a zero-variance row), an Inf in r, and a backward whose residual gradient
``ds`` is a view of its own layout."""

from __future__ import annotations

import numpy as np

from ... import samples as smp
from ..add_layer_norm import add_layer_norm, add_layer_norm_backward


def _inputs(p: smp.Params) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = smp.rng_of(p)
    shape = p["shape"]
    x = smp.normal(rng, shape) + p.get("offset", 0.0)
    r = 0.5 * smp.normal(rng, shape)
    if p.get("cancel"):
        r = -x
    if p.get("nan_row") and x.size:
        x.reshape(-1, shape[-1])[0, 0] = np.nan
    if p.get("inf_row") and r.size:
        r.reshape(-1, shape[-1])[-1, -1] = np.inf
    gamma = 1.0 + 0.1 * smp.normal(rng, shape[-1:])
    beta = 0.1 * smp.normal(rng, shape[-1:])
    return x, r, gamma, beta


EDGES = smp.row_edges(
    {"label": "model rows (B*T, C)", "shape": (64, 128)},
    {"label": "mean 100, spread 1 (needs a stable variance)", "shape": (4, 64), "offset": 100.0},
    {"label": "x = -r (zero variance)", "shape": (3, 16), "cancel": True},
    {"label": "width 1 (zero variance)", "shape": (5, 1)},
    {"label": "zero rows", "shape": (0, 6)},
    {"label": "a NaN makes its row NaN", "shape": (3, 8), "nan_row": True},
    {"label": "an Inf in r makes its row NaN", "shape": (3, 8), "inf_row": True},
    {"label": "eps 0.1 (not the default)", "shape": (6, 5), "eps": 0.1},
)
#: The backward reads saved statistics, so NaN and Inf rows add nothing there.
BACKWARD_EDGES = tuple(e for e in EDGES if not (e.get("nan_row") or e.get("inf_row")))


def _draw(d: smp.Draw) -> smp.Params:
    shape = d.shape()
    return {"shape": shape[:-1] + (max(shape[-1], 1),), "eps": d.choice((1e-5, 1e-3))}


def _build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    x, r, gamma, beta = _inputs(p)
    lay = p["layout"]
    args = [
        smp.Arr(x, layout=lay),
        smp.Arr(r, layout=lay),
        smp.Arr(gamma),
        smp.Arr(beta),
        p.get("eps", 1e-5),
    ]
    return smp.Example(smp.label(p), args, params=p)


def _build_backward(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    x_raw, r_raw, gamma, _ = _inputs(p)
    lay = p["layout"]
    s = smp.Arr(x_raw + r_raw, layout=lay)  # a broadcast layout changes the values: use s.value
    sr = s.value.astype(ctx.dtype).astype(np.float64)  # statistics of what the op sees
    with np.errstate(invalid="ignore"):
        mu = sr.mean(axis=-1)
        rs = 1.0 / np.sqrt(((sr - mu[..., None]) ** 2).mean(axis=-1) + p.get("eps", 1e-5))
    rng = np.random.default_rng(p["seed"] + 1)
    dy, ds = smp.normal(rng, p["shape"]), smp.normal(rng, p["shape"])
    args = [
        smp.Arr(dy, layout=lay),
        smp.Arr(ds, layout=lay),
        s,
        smp.Arr(gamma),
        smp.Arr(mu, "stat"),
        smp.Arr(rs, "stat"),
    ]
    return smp.Example(smp.label(p), args, params=p)


SAMPLES = {
    "add_layer_norm": smp.SampleSet(
        samples=smp.Samples(_build, EDGES, _draw, bench={"shape": (1024, 1024)}),
        errors=(
            smp.error("add_layer_norm_r_shape", "add_layer_norm",
                      lambda t: add_layer_norm(t.f(2, 4), t.f(2, 5), t.f(4), t.f(4))),
            smp.error("add_layer_norm_gamma_shape", "add_layer_norm",
                      lambda t: add_layer_norm(t.f(2, 4), t.f(2, 4), t.f(3), t.f(4))),
            smp.error("add_layer_norm_empty_features", "add_layer_norm",
                      lambda t: add_layer_norm(t.f(2, 0), t.f(2, 0), t.f(0), t.f(0))),
            smp.error("add_layer_norm_eps", "add_layer_norm",
                      lambda t: add_layer_norm(t.f(2, 4), t.f(2, 4), t.f(4), t.f(4), 0.0)),
            smp.error("add_layer_norm_int_r", "add_layer_norm",
                      lambda t: add_layer_norm(t.f(2, 4), t.i(2, 4), t.f(4), t.f(4)), "index"),
            smp.error("add_layer_norm_mixed_dtypes", "add_layer_norm",
                      lambda t: add_layer_norm(t.f(2, 4), t.other_float(2, 4), t.f(4), t.f(4)),
                  "other_float"),
            smp.error("add_layer_norm_mixed_devices", "add_layer_norm",
                      lambda t: add_layer_norm(t.f(2, 4), t.other_device(2, 4), t.f(4), t.f(4))),
        ),
    ),
    "add_layer_norm_backward": smp.SampleSet(
        samples=smp.Samples(_build_backward, BACKWARD_EDGES, _draw, bench={"shape": (1024, 1024)}),
        errors=(
            smp.error("add_layer_norm_backward_ds_shape", "add_layer_norm_backward",
                      lambda t: add_layer_norm_backward(t.f(2, 4), t.f(4, 2), t.f(2, 4), t.f(4),
                                                    t.f(2), t.f(2))),
            smp.error("add_layer_norm_backward_stats_shape", "add_layer_norm_backward",
                      lambda t: add_layer_norm_backward(t.f(2, 4), t.f(2, 4), t.f(2, 4), t.f(4),
                                                    t.f(3), t.f(2))),
        ),
    ),
}  # fmt: skip
