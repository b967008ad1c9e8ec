"""Conformance data of ``fused/rms_norm.py``: rows and columns past 64, 256 and 1024 (the
chunk, team and group sizes kernels use), long rows, width 1, zero rows, a zero row (rstd =
1/sqrt(eps)), an eps that dominates small rows, large magnitudes, NaN rows, every layout."""

from __future__ import annotations

import numpy as np

from ... import samples as smp
from ..rms_norm import rms_norm, rms_norm_backward


def _inputs(p: smp.Params) -> tuple[np.ndarray, np.ndarray]:
    rng = smp.rng_of(p)
    shape = p["shape"]
    x = smp.normal(rng, shape, p.get("scale", 1.0))
    if p.get("zero_row") and x.size:
        x.reshape(-1, shape[-1])[0] = 0.0
    if p.get("nan_row") and x.size:
        x.reshape(-1, shape[-1])[0, 0] = np.nan
    gamma = 1.0 + 0.5 * smp.normal(rng, shape[-1:])
    return x, gamma


EDGES = smp.row_edges(
    {"label": "eps 0.5 dominates small rows", "shape": (6, 16), "scale": 0.05, "eps": 0.5},
    {"label": "magnitudes 1e3", "shape": (4, 100), "scale": 1e3, "eps": 1e-3},
    {"label": "a zero row (rstd = 1/sqrt(eps))", "shape": (3, 7), "zero_row": True},
    {"label": "width 1", "shape": (5, 1)},
    {"label": "zero rows", "shape": (0, 6)},
    {"label": "a NaN makes its row NaN", "shape": (3, 8), "nan_row": True},
)


def _eps(p: smp.Params) -> float:
    return float(p.get("eps", 1e-6))


def _draw(d: smp.Draw) -> smp.Params:
    shape = d.shape()
    return {"shape": shape[:-1] + (max(shape[-1], 1),), "eps": d.choice((1e-6, 1e-5, 0.1))}


def _build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    x, gamma = _inputs(p)
    args = [smp.Arr(x, layout=p["layout"]), smp.Arr(gamma), _eps(p)]
    return smp.Example(smp.label(p), args, params=p)


def _build_backward(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    x_raw, gamma = _inputs(p)
    lay = p["layout"]
    x = smp.Arr(x_raw, layout=lay)  # a broadcast layout changes the values: use x.value
    xr = x.value.astype(ctx.dtype).astype(np.float64)  # the statistic of what the op sees
    with np.errstate(invalid="ignore"):
        r = 1.0 / np.sqrt((xr * xr).mean(axis=-1) + _eps(p))
    dy = smp.normal(np.random.default_rng(p["seed"] + 1), p["shape"])
    return smp.Example(
        smp.label(p), [smp.Arr(dy, layout=lay), x, smp.Arr(gamma), smp.Arr(r, "stat")], params=p
    )


SAMPLES = {
    "rms_norm": smp.SampleSet(
        samples=smp.Samples(_build, EDGES, _draw, bench={"shape": (1024, 1024)}),
        errors=(
            smp.error("rms_norm_gamma_shape", "rms_norm",
                      lambda t: rms_norm(t.f(2, 4), t.f(3))),
            smp.error("rms_norm_empty_features", "rms_norm",
                      lambda t: rms_norm(t.f(2, 0), t.f(0))),
            smp.error("rms_norm_eps", "rms_norm",
                      lambda t: rms_norm(t.f(2, 4), t.f(4), 0.0)),
            smp.error("rms_norm_index_dtype", "rms_norm",
                      lambda t: rms_norm(t.i(2, 4), t.f(4)), "index"),
            smp.error("rms_norm_mixed_devices", "rms_norm",
                      lambda t: rms_norm(t.f(2, 4), t.other_device(4))),
        ),
    ),
    "rms_norm_backward": smp.SampleSet(
        samples=smp.Samples(_build_backward, EDGES, _draw, bench={"shape": (1024, 1024)}),
        errors=(
            smp.error("rms_norm_backward_rstd_shape", "rms_norm_backward",
                      lambda t: rms_norm_backward(t.f(2, 4), t.f(2, 4), t.f(4), t.f(3))),
            smp.error("rms_norm_backward_dy_shape", "rms_norm_backward",
                      lambda t: rms_norm_backward(t.f(2, 5), t.f(2, 4), t.f(4), t.f(2))),
        ),
    ),
}  # fmt: skip
