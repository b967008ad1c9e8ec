"""Conformance data of ``fused/attention_qkv.py``: both modes (probs and lse) over lengths
that span several tiles with one to three heads, head blocks wide enough for tiled
products, scores past exp overflow, T = 0 and B = 0, and a projection seen through every
view (a column slice of a wider buffer, offset, strided, transposed, repeated over B)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ... import samples as smp
from ..attention_qkv import attention_qkv, attention_qkv_backward
from .attention import np_scores, score_max
from .attention import qkv as per_head_inputs
from .cross_entropy import np_lse
from .softmax import np_softmax


def _e(
    lbl: str, b: int, h: int, t: int, d: int, causal: bool, flash: bool, **kw: Any
) -> smp.Params:
    return {"label": lbl, "b": b, "h": h, "t": t, "d": d, "causal": causal, "flash": flash, **kw}


def _name(t: int, h: int, causal: bool, flash: bool) -> str:
    return f"T={t}, {h} head{'s' * (h > 1)}, D=5{'' if causal else ', not causal'}" + (
        ", flash" if flash else ""
    )


#: Lengths spanning one, two and several tiles of any size from 16 to 128; heads 1 to 3.
_LENGTHS = (2, 31, 65, 129, 200)
EDGES = smp.edges(
    _e("T=1", 1, 2, 1, 8, True, False),
    _e("T=1, not causal, flash", 2, 1, 1, 3, False, True),
    *(
        _e(_name(t, 1 + (i + j) % 3, c, f), 1, 1 + (i + j) % 3, t, 5, c, f)
        for i, t in enumerate(_LENGTHS)
        for j, (c, f) in enumerate(((True, False), (False, False), (True, True), (False, True)))
    ),
    _e("D=1, 3 heads", 2, 3, 9, 1, True, False),
    # head blocks wide enough for tiled products (kernel backends read and write them in place)
    _e("D=16, 3 heads, T=65", 2, 3, 65, 16, True, False),
    _e("D=72, 2 heads, T=129, not causal", 1, 2, 129, 72, False, False),
    _e("D=33, flash", 1, 2, 17, 33, False, True),
    _e("scores ~300 (past exp overflow)", 1, 2, 40, 7, True, False, large=True),
    _e("scores ~300, flash, not causal", 1, 3, 70, 7, False, True, large=True),
    _e("T=0", 1, 2, 0, 4, True, False),
    _e("T=0, flash", 2, 2, 0, 3, True, True),
    _e("B=0", 0, 2, 5, 4, False, False),
    _e("B=0, flash", 0, 3, 5, 3, True, True),
    _e("qkv a column slice of a wider buffer", 2, 3, 13, 3, True, False, layout="rows"),
    _e("qkv rows padded, flash", 2, 2, 33, 5, True, True, layout="rows"),
    _e("qkv offset x[1:]", 1, 2, 9, 3, False, False, layout="offset"),
    _e("qkv offset, flash", 2, 3, 10, 3, True, True, layout="offset"),
    _e("qkv last axis strided", 1, 2, 11, 6, True, False, layout="sliced"),
    _e("qkv [B, 3C, T] transposed, flash", 2, 2, 7, 3, True, True, layout="transposed"),
    _e("qkv repeated over B (stride 0)", 3, 2, 6, 5, False, True, layout="broadcast"),
    # a scale that is not 1/sqrt(D): a kernel that derives its own from D fails here
    _e("scale 0.3, not 1/sqrt(D)", 1, 2, 33, 8, True, False, scale=0.3),
    _e("scale 2, flash, not causal", 2, 1, 17, 4, False, True, scale=2.0),
    # one past the 256 and 1024 boundaries (65 is in _LENGTHS)
    _e("T=257", 1, 1, 257, 3, True, False, boundary=True),
    _e("T=257, flash", 1, 1, 257, 3, True, True, boundary=True),
    _e("T=1025, flash, not causal", 1, 1, 1025, 2, False, True, scale=0.25, boundary=True),
)

BENCH = _e("bench", 1, 4, 256, 64, True, False)


def _draw(d: smp.Draw) -> smp.Params:
    return {
        "b": d.choice((1, 2, 3)), "h": d.choice((1, 2, 3, 4)), "d": d.choice((1, 3, 8, 16, 33)),
        "t": d.choice((1, 2, 3, 5, 17, 33, 64, 65, 100)), "causal": d.boolean(),
        "flash": d.boolean(),
        "layout": d.choice(("dense", "dense", "rows", "offset", "sliced", "transposed")),
    }  # fmt: skip


def np_merge_heads(x: np.ndarray) -> np.ndarray:
    """Host ``[B, H, T, D]`` -> ``[B, T, H * D]``."""
    b, h, t, d = x.shape
    return np.ascontiguousarray(np.swapaxes(x, 1, 2)).reshape(b, t, h * d)


def _samples(backward: bool) -> smp.Samples:
    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        q, k, v, do = per_head_inputs(p)  # [B, H, T, D] each; "large" boosts q and k
        lay = p["layout"]
        fused = smp.Arr(np.concatenate([np_merge_heads(a) for a in (q, k, v)], axis=-1), layout=lay)
        c, h = p["h"] * p["d"], p["h"]
        shape = (p["b"], p["t"], h, p["d"])
        # the values the backend will see (a broadcast layout repeats the first batch row)
        qh, kh, vh = (
            np.swapaxes(fused.value[..., i * c : (i + 1) * c].reshape(shape), 1, 2)
            for i in range(3)
        )
        scale = float(p.get("scale", 1.0 / math.sqrt(p["d"])))
        p = {**p, "score_max": score_max(qh, kh, scale)}
        kwargs = {"causal": p["causal"], "flash": p["flash"]}
        if not backward:
            return smp.Example(smp.label(p), [fused, h, scale], kwargs, params=p)
        qr, kr, vr = (a.astype(ctx.dtype).astype(np.float64) for a in (qh, kh, vh))
        s = np_scores(qr, kr, scale, p["causal"])
        probs = np_softmax(s)
        stat = np_lse(s) if p["flash"] else probs
        out_lay = "dense" if lay == "broadcast" else lay  # out must stay the forward's
        out = smp.Arr(np_merge_heads(probs @ vr), layout=out_lay)
        args = [
            smp.Arr(np_merge_heads(do), layout=lay),
            fused,
            out,
            smp.Arr(stat, "stat" if p["flash"] else "float"),
            h,
            scale,
        ]
        return smp.Example(smp.label(p), args, kwargs, params=p)

    return smp.Samples(build, EDGES, _draw, bench=BENCH)


SAMPLES = {
    "attention_qkv": smp.SampleSet(
        samples=_samples(False),
        errors=(
            smp.error("attention_qkv_rank", "attention_qkv",
                      lambda t: attention_qkv(t.f(1, 2, 4, 6), 2, 1.0)),
            smp.error("attention_qkv_width", "attention_qkv",
                      lambda t: attention_qkv(t.f(1, 4, 10), 2, 1.0)),
            smp.error("attention_qkv_zero_width", "attention_qkv",
                      lambda t: attention_qkv(t.f(1, 4, 0), 1, 1.0)),
            smp.error("attention_qkv_zero_heads", "attention_qkv",
                      lambda t: attention_qkv(t.f(1, 4, 6), 0, 1.0)),
            smp.error("attention_qkv_heads_float", "attention_qkv",
                      lambda t: attention_qkv(t.f(1, 4, 6), 2.0, 1.0)),  # type: ignore[arg-type]
            smp.error("attention_qkv_scale_tensor", "attention_qkv",
                      lambda t: attention_qkv(t.f(1, 4, 6), 1, t.f(1))),
        ),
    ),
    "attention_qkv_backward": smp.SampleSet(
        samples=_samples(True),
        errors=(
            smp.error("attention_qkv_bwd_dout", "attention_qkv_backward",
                      lambda t: attention_qkv_backward(t.f(1, 3, 6), t.f(1, 3, 6), t.f(1, 3, 2),
                                                   t.f(1, 1, 3, 3), 1, 1.0)),
            smp.error("attention_qkv_bwd_lse", "attention_qkv_backward",
                      lambda t: attention_qkv_backward(t.f(1, 3, 2), t.f(1, 3, 6), t.f(1, 3, 2),
                                                   t.f(1, 1, 3, 3), 1, 1.0, True, True)),
        ),
    ),
}  # fmt: skip
