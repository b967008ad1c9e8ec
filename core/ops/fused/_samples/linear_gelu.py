"""Conformance data of ``fused/linear_gelu.py``: linear's shapes and layouts (K = 0, M = 0,
the GPT fc shape, past a 64-tile, many rows, x seen transposed, offset and sliced), both
GELU forms, pre-activations up to 1e4 (no overflow in gelu or gelu'), NaN and inf."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import samples as smp
from ..gelu import APPROXIMATIONS
from ..linear_gelu import linear_gelu, linear_gelu_backward


def _e(lbl: str, m: int, k: int, n: int, approximate: str = "tanh", **kw: Any) -> smp.Params:
    return {"label": lbl, "m": m, "k": k, "n": n, "approximate": approximate, **kw}


EDGES = smp.edges(
    _e("1x1x1", 1, 1, 1),
    _e("odd sizes", 33, 67, 5),
    _e("odd sizes, erf form", 33, 67, 5, "none"),
    _e("GPT fc shape", 64, 32, 128),
    _e("past a 64-tile", 130, 70, 129),
    _e("K = 0 (h = bias)", 3, 0, 4),
    _e("M = 0", 0, 5, 4),
    _e("many rows (column sums)", 4097, 3, 2),
    _e("x transposed", 9, 17, 3, layout="transposed"),
    _e("x offset x[1:]", 6, 9, 5, layout="offset"),
    _e("x rows x[:, :k]", 7, 6, 11, layout="rows"),
    _e("large |h| (up to 1e4)", 5, 3, 40, large=True),
    _e("large |h|, erf form", 5, 3, 40, "none", large=True),
    _e("NaN and inf in x", 6, 5, 4, special=True),
) + smp.past_boundaries_mkn(lambda m, k, n: _e(f"{m}x{k} @ {k}x{n}", m, k, n))


def _draw(d: smp.Draw) -> smp.Params:
    return {"m": d.choice(smp.SIZES), "k": d.choice(smp.SIZES), "n": d.choice(smp.SIZES),
            "approximate": d.choice(APPROXIMATIONS)}  # fmt: skip


def _samples(backward: bool) -> smp.Samples:
    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        rng = smp.rng_of(p)
        m, k, n = p["m"], p["k"], p["n"]
        x = smp.normal(rng, (m, k))
        if p.get("special"):
            x = smp.with_specials(x, rng, np.nan, np.inf)
        w, b = smp.normal(rng, (k, n)), smp.normal(rng, (n,))
        if p.get("large"):  # a bias from -1e4 to 1e4 puts h far out on both tails
            b = np.sign(b) * np.exp(rng.uniform(0.0, np.log(1e4), (n,)))
        xa, wa = smp.Arr(x, layout=p["layout"]), smp.Arr(w)
        kwargs = {"approximate": p["approximate"]}
        if backward:
            with np.errstate(all="ignore"):  # the forward's h (NaN and inf rows included)
                h = (x.astype(np.float64) @ w + b) if k else np.broadcast_to(b, (m, n)).copy()
            dy = smp.Arr(smp.normal(rng, (m, n)), layout=p["layout"])
            return smp.Example(smp.label(p), [dy, xa, wa, smp.Arr(h)], kwargs, params=p)
        return smp.Example(smp.label(p), [xa, wa, smp.Arr(b)], kwargs, params=p)

    bench = _e("bench", 1024, 128, 512)
    return smp.Samples(build, EDGES, _draw, layouts=("dense", "transposed", "offset"), bench=bench)


def _fwd(t: Any, xs: tuple[int, ...], ws: tuple[int, ...], bs: tuple[int, ...]) -> Any:
    return linear_gelu(t.f(*xs), t.f(*ws), t.f(*bs))


SAMPLES = {
    "linear_gelu": smp.SampleSet(
        samples=_samples(False),
        errors=(
            smp.error("linear_gelu_inner_dims", "linear_gelu",
                      lambda t: _fwd(t, (2, 3), (4, 5), (5,))),
            smp.error("linear_gelu_bias_shape", "linear_gelu",
                      lambda t: _fwd(t, (2, 3), (3, 5), (4,))),
            smp.error("linear_gelu_rank", "linear_gelu",
                      lambda t: _fwd(t, (2, 2, 3), (3, 5), (5,))),
            smp.error("linear_gelu_bad_approximate", "linear_gelu",
                      lambda t: linear_gelu(t.f(2, 3), t.f(3, 5), t.f(5), "exact")),
            smp.error("linear_gelu_index_dtype", "linear_gelu",
                      lambda t: linear_gelu(t.i(2, 3), t.f(3, 5), t.f(5)), "index"),
        ),
    ),
    "linear_gelu_backward": smp.SampleSet(
        samples=_samples(True),
        errors=(
            smp.error("linear_gelu_backward_dy_shape", "linear_gelu_backward",
                      lambda t: linear_gelu_backward(t.f(2, 4), t.f(2, 3), t.f(3, 5), t.f(2, 5))),
            smp.error("linear_gelu_backward_h_shape", "linear_gelu_backward",
                      lambda t: linear_gelu_backward(t.f(2, 5), t.f(2, 3), t.f(3, 5), t.f(5, 2))),
            smp.error("linear_gelu_backward_mixed_devices", "linear_gelu_backward",
                      lambda t: linear_gelu_backward(t.f(2, 5), t.f(2, 3), t.f(3, 5),
                                                 t.other_device(2, 5))),
        ),
    ),
}  # fmt: skip
