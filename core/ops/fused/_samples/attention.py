"""Conformance data of ``fused/attention.py``, shared with flash attention: lengths that
span one, two and several tiles with and without the causal mask, D = 1 and odd head dims,
scores past exp overflow, T = 0 and B = 0, heads permuted from [B, T, H, D] and other
views; the host scores and inputs the attention_qkv samples reuse."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import samples as smp
from ..attention import attention, attention_backward
from .softmax import np_softmax


def _e(lbl: str, b: int, h: int, t: int, d: int, causal: bool, **kw: Any) -> smp.Params:
    return {"label": lbl, "b": b, "h": h, "t": t, "d": d, "causal": causal, **kw}


#: Lengths that span one, two and several tiles of any size from 16 to 128, both masks.
_LENGTHS = (2, 31, 65, 129, 200)
EDGES = smp.edges(
    _e("T=1", 1, 2, 1, 8, True),
    _e("T=1, not causal", 2, 1, 1, 3, False),
    *(_e(f"T={t}, D=5", 1, 1, t, 5, c) for t in _LENGTHS for c in (True, False)),
    _e("D=1", 2, 1, 9, 1, True),
    _e("D=33", 1, 2, 17, 33, False),
    _e("scores ~300 (past exp overflow)", 1, 2, 40, 8, True, large=True),
    _e("scores ~300, not causal", 1, 1, 70, 7, False, large=True),
    _e("T=0", 1, 2, 0, 4, True),
    _e("B=0", 0, 2, 5, 4, False),
    _e("heads permuted from [B,T,H,D]", 2, 3, 13, 4, True, layout="permuted"),
    _e("transposed", 1, 2, 6, 6, True, layout="transposed"),
    _e("offset x[1:]", 1, 2, 9, 3, False, layout="offset"),
    _e("rows x[..., :D]", 1, 1, 11, 6, True, layout="rows"),
    # a scale that is not 1/sqrt(D): a kernel that derives its own from D fails here
    _e("scale 0.3, not 1/sqrt(D)", 1, 2, 33, 8, True, scale=0.3),
    _e("scale 2, not causal", 2, 1, 17, 4, False, scale=2.0),
    # one past the 256 and 1024 boundaries (65 is in _LENGTHS)
    _e("T=257", 1, 1, 257, 3, True, boundary=True),
    _e("T=1025, not causal", 1, 1, 1025, 2, False, scale=0.25, boundary=True),
)


BENCH = _e("bench", 1, 4, 256, 64, True)


def draw(d: smp.Draw) -> smp.Params:
    return {
        "b": d.choice(smp.SMALL_SIZES), "h": d.choice(smp.SMALL_SIZES),
        "d": d.choice((1, 3, 8, 16, 33)), "t": d.choice((1, 2, 3, 5, 17, 33, 64, 65, 100)),
        "causal": d.boolean(), "layout": d.choice(("dense", "dense", "permuted", "sliced")),
    }  # fmt: skip


def np_scores(q: np.ndarray, k: np.ndarray, scale: float, causal: bool) -> np.ndarray:
    s = scale * q @ np.swapaxes(k, -1, -2)
    if causal:
        t = s.shape[-1]
        s = np.where(np.triu(np.ones((t, t), dtype=bool), 1), -np.inf, s)
    return s


def qkv(p: smp.Params) -> tuple[np.ndarray, ...]:
    rng = smp.rng_of(p)
    shape = (p["b"], p["h"], p["t"], p["d"])
    q, k, v = (smp.normal(rng, shape) for _ in range(3))
    if p.get("large"):  # |scores| ~ 300: exp would overflow without the max subtraction
        boost = 6.0 * np.sqrt(np.sqrt(p["d"]))
        q, k = q * boost, k * boost
    return q, k, v, smp.normal(rng, shape)


def score_max(q: np.ndarray, k: np.ndarray, scale: float) -> float:
    """The largest |score| of an example (0 when empty), recorded in its params."""
    if not q.size:
        return 0.0
    return float(np.abs(q @ np.swapaxes(k, -1, -2)).max() * scale)


#: Builds a backward example from its params (score bound recorded), the context, the host
#: (q, k, v, dO), q, k, v as arguments in the example's layout, and the scale.
BackwardExample = Callable[
    [smp.Params, smp.Ctx, tuple[np.ndarray, ...], list[smp.Arr], float], smp.Example
]


def attention_samples(backward: BackwardExample | None = None) -> smp.Samples:
    """attention's edges, draws and bench for an op called ``(q, k, v, scale, causal=)``
    (attention, flash_attention), or with ``backward`` for its backward: both build the same
    inputs, so the forward and backward of both ops see the same examples."""

    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        q, k, v, do = qkv(p)
        scale = float(p.get("scale", 1.0 / math.sqrt(p["d"])))
        p = {**p, "score_max": score_max(q, k, scale)}
        lay = p["layout"]
        args = [smp.Arr(q, layout=lay), smp.Arr(k, layout=lay), smp.Arr(v, layout=lay)]
        if backward is None:
            return smp.Example(smp.label(p), [*args, scale], {"causal": p["causal"]}, params=p)
        return backward(p, ctx, (q, k, v, do), args, scale)

    return smp.Samples(build, EDGES, draw, bench=BENCH)


def _backward(
    p: smp.Params, ctx: smp.Ctx, host: tuple[np.ndarray, ...], args: list[smp.Arr], scale: float
) -> smp.Example:
    q, k, _, do = host
    qr, kr = (a.astype(ctx.dtype).astype(np.float64) for a in (q, k))
    probs = np_softmax(np_scores(qr, kr, scale, p["causal"]))
    return smp.Example(
        smp.label(p), [smp.Arr(do, layout=p["layout"]), *args, smp.Arr(probs), scale], params=p
    )


SAMPLES = {
    "attention": smp.SampleSet(
        samples=attention_samples(),
        errors=(
            smp.error("attention_qkv_shapes", "attention",
                      lambda t: attention(t.f(1, 1, 4, 2), t.f(1, 1, 5, 2), t.f(1, 1, 4, 2), 1.0)),
            smp.error("attention_rank", "attention",
                      lambda t: attention(t.f(1, 4, 2), t.f(1, 4, 2), t.f(1, 4, 2), 1.0)),
            smp.error("attention_zero_head_dim", "attention",
                      lambda t: attention(t.f(1, 1, 4, 0), t.f(1, 1, 4, 0), t.f(1, 1, 4, 0), 1.0)),
            smp.error("attention_scale_tensor", "attention",
                      lambda t: attention(t.f(1, 1, 2, 2), t.f(1, 1, 2, 2), t.f(1, 1, 2, 2),
                                          t.f(1))),
        ),
    ),
    "attention_backward": smp.SampleSet(
        samples=attention_samples(_backward),
        errors=(smp.error("attention_backward_probs_shape", "attention_backward",
                          lambda t: attention_backward(*(t.f(1, 1, 3, 2),) * 4, t.f(1, 1, 3, 2),
                                                   1.0)),),
    ),
}  # fmt: skip
