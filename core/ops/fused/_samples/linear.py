"""Conformance data of ``fused/linear.py``: K = 0 (y = bias), M = 0, the GPT qkv shape, sizes
past a 64-tile, many rows (long column sums), x seen transposed, offset and sliced, NaN and
inf."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import samples as smp
from ..linear import linear, linear_backward


def _e(lbl: str, m: int, k: int, n: int, **kw: Any) -> smp.Params:
    return {"label": lbl, "m": m, "k": k, "n": n, **kw}


EDGES = smp.edges(
    _e("1x1x1", 1, 1, 1),
    _e("odd sizes", 33, 67, 5),
    _e("GPT qkv shape", 64, 32, 96),
    _e("past a 64-tile", 130, 70, 129),
    _e("K = 0 (y = bias)", 3, 0, 4),
    _e("M = 0", 0, 5, 4),
    _e("many rows (column sums)", 4097, 3, 2),
    _e("x transposed", 9, 17, 3, layout="transposed"),
    _e("x offset x[1:]", 6, 9, 5, layout="offset"),
    _e("x rows x[:, :k]", 7, 6, 11, layout="rows"),
    _e("NaN and inf in x", 6, 5, 4, special=True),
) + smp.past_boundaries_mkn(lambda m, k, n: _e(f"{m}x{k} @ {k}x{n}", m, k, n))


def _draw(d: smp.Draw) -> smp.Params:
    return {"m": d.choice(smp.SIZES), "k": d.choice(smp.SIZES), "n": d.choice(smp.SIZES)}


def _samples(backward: bool) -> smp.Samples:
    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        rng = smp.rng_of(p)
        x = smp.normal(rng, (p["m"], p["k"]))
        if p.get("special"):
            x = smp.with_specials(x, rng, np.nan, np.inf)
        w, b = smp.normal(rng, (p["k"], p["n"])), smp.normal(rng, (p["n"],))
        xa, wa = smp.Arr(x, layout=p["layout"]), smp.Arr(w, layout=p.get("layout_w", "dense"))
        if backward:
            dy = smp.Arr(smp.normal(rng, (p["m"], p["n"])), layout=p["layout"])
            return smp.Example(smp.label(p), [dy, xa, wa], params=p)
        return smp.Example(smp.label(p), [xa, wa, smp.Arr(b)], params=p)

    bench = _e("bench", 1024, 512, 512)
    return smp.Samples(build, EDGES, _draw, layouts=("dense", "transposed", "offset"), bench=bench)


SAMPLES = {
    "linear": smp.SampleSet(
        samples=_samples(False),
        errors=(
            smp.error("linear_inner_dims", "linear",
                      lambda t: linear(t.f(2, 3), t.f(4, 5), t.f(5))),
            smp.error("linear_bias_shape", "linear",
                      lambda t: linear(t.f(2, 3), t.f(3, 5), t.f(4))),
            smp.error("linear_rank", "linear", lambda t: linear(t.f(2, 2, 3), t.f(3, 5), t.f(5))),
        ),
    ),
    "linear_backward": smp.SampleSet(
        samples=_samples(True),
        errors=(smp.error("linear_backward_dy_shape", "linear_backward",
                          lambda t: linear_backward(t.f(2, 4), t.f(2, 3), t.f(3, 5))),),
    ),
}  # fmt: skip
