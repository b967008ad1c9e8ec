"""Conformance data of ``fused/gelu.py``: both approximations on long rows, odd sizes,
every layout, |x| up to 1e4, NaN and the infinities (gelu(+inf) = +inf, gelu(-inf) =
NaN, the derivative NaN at both)."""

from __future__ import annotations

import numpy as np

from ... import samples as smp
from ..gelu import APPROXIMATIONS, gelu, gelu_backward

ROW_EDGES = smp.row_edges(
    {"label": "empty", "shape": (0, 7)},
    {"label": "0-d", "shape": ()},  # the cpu reference's exact form once failed here
    {"label": "large |x| (up to 1e4)", "shape": (3, 40), "large": True},
    {"label": "NaN and +-inf", "shape": (3, 21), "special": True},
)


def _samples(backward: bool) -> smp.Samples:
    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        rng = smp.rng_of(p)
        x = smp.normal(rng, p["shape"], 2.0)
        if p.get("large"):
            x = np.sign(x) * np.exp(rng.uniform(0.0, np.log(1e4), p["shape"]))
        if p.get("special"):
            x = smp.with_specials(x, rng, np.nan, np.inf, -np.inf)
        args = [smp.Arr(x, layout=p["layout"])]
        if backward:
            args.insert(0, smp.Arr(smp.normal(rng, p["shape"]), layout=p["layout"]))
        return smp.Example(smp.label(p), args, {"approximate": p["approximate"]}, params=p)

    def draw(d: smp.Draw) -> smp.Params:
        return {"shape": d.shape(), "approximate": d.choice(APPROXIMATIONS)}

    e = tuple({**edge, "approximate": a} for edge in ROW_EDGES for a in APPROXIMATIONS)
    return smp.Samples(build, e, draw, bench={"shape": (1024, 1024), "approximate": "tanh"})


SAMPLES = {
    "gelu": smp.SampleSet(
        samples=_samples(False),
        errors=(smp.error("gelu_bad_approximate", "gelu", lambda t: gelu(t.f(3), "exact")),
                smp.error("gelu_index_dtype", "gelu", lambda t: gelu(t.i(3)), "index")),
    ),
    "gelu_backward": smp.SampleSet(
        samples=_samples(True),
        errors=(smp.error("gelu_backward_shapes", "gelu_backward",
                          lambda t: gelu_backward(t.f(2, 3), t.f(3, 2))),
                smp.error("gelu_backward_mixed_devices", "gelu_backward",
                          lambda t: gelu_backward(t.f(3), t.other_device(3)))),
    ),
}  # fmt: skip
