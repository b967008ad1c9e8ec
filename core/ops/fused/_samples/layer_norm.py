"""Conformance data of ``fused/layer_norm.py``: long rows, width 1 (zero variance), zero
rows, means far from zero (a stable variance), NaN rows, every layout."""

from __future__ import annotations

import numpy as np

from ... import samples as smp
from ..layer_norm import layer_norm, layer_norm_backward


def _inputs(p: smp.Params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = smp.rng_of(p)
    shape = p["shape"]
    x = smp.normal(rng, shape) + p.get("offset", 0.0)
    if p.get("nan_row") and x.size:
        x.reshape(-1, shape[-1])[0, 0] = np.nan
    gamma = 1.0 + 0.1 * smp.normal(rng, shape[-1:])
    beta = 0.1 * smp.normal(rng, shape[-1:])
    return x, gamma, beta


EDGES = smp.row_edges(
    {"label": "mean offset 10", "shape": (4, 257), "offset": 10.0},
    {"label": "mean 100, spread 1 (needs a stable variance)", "shape": (4, 64), "offset": 100.0},
    {"label": "width 1 (zero variance)", "shape": (5, 1)},
    {"label": "zero rows", "shape": (0, 6)},
    {"label": "a NaN makes its row NaN", "shape": (3, 8), "nan_row": True},
    {"label": "eps 0.1 (not the default)", "shape": (6, 5), "eps": 0.1},
)


def _draw(d: smp.Draw) -> smp.Params:
    shape = d.shape()
    return {"shape": shape[:-1] + (max(shape[-1], 1),), "eps": d.choice((1e-5, 1e-3))}


def _build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    x, gamma, beta = _inputs(p)
    args = [smp.Arr(x, layout=p["layout"]), smp.Arr(gamma), smp.Arr(beta), p.get("eps", 1e-5)]
    return smp.Example(smp.label(p), args, params=p)


def _build_backward(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    x_raw, gamma, _ = _inputs(p)
    lay = p["layout"]
    x = smp.Arr(x_raw, layout=lay)  # a broadcast layout changes the values: use x.value
    xr = x.value.astype(ctx.dtype).astype(np.float64)  # statistics of what the op sees
    with np.errstate(invalid="ignore"):
        mu = xr.mean(axis=-1)
        r = 1.0 / np.sqrt(((xr - mu[..., None]) ** 2).mean(axis=-1) + p.get("eps", 1e-5))
    dy = smp.normal(np.random.default_rng(p["seed"] + 1), p["shape"])
    return smp.Example(
        smp.label(p),
        [smp.Arr(dy, layout=lay), x, smp.Arr(gamma), smp.Arr(mu, "stat"), smp.Arr(r, "stat")],
        params=p,
    )


SAMPLES = {
    "layer_norm": smp.SampleSet(
        samples=smp.Samples(_build, EDGES, _draw, bench={"shape": (1024, 1024)}),
        errors=(
            smp.error("layer_norm_gamma_shape", "layer_norm",
                      lambda t: layer_norm(t.f(2, 4), t.f(3), t.f(4))),
            smp.error("layer_norm_empty_features", "layer_norm",
                      lambda t: layer_norm(t.f(2, 0), t.f(0), t.f(0))),
            smp.error("layer_norm_eps", "layer_norm",
                      lambda t: layer_norm(t.f(2, 4), t.f(4), t.f(4), 0.0)),
            smp.error("layer_norm_mixed_devices", "layer_norm",
                      lambda t: layer_norm(t.f(2, 4), t.other_device(4), t.f(4))),
        ),
    ),
    "layer_norm_backward": smp.SampleSet(
        samples=smp.Samples(_build_backward, EDGES, _draw, bench={"shape": (1024, 1024)}),
        errors=(smp.error("layer_norm_backward_stats_shape", "layer_norm_backward",
                          lambda t: layer_norm_backward(t.f(2, 4), t.f(2, 4), t.f(4), t.f(3),
                                                    t.f(2))),),
    ),
}  # fmt: skip
