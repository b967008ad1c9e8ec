"""Conformance data of ``fused/flash_attention.py``: attention's edges (lengths past one
and several tiles, where forgetting to rescale the running sum shows), with the host
output and log-sum-exp its backward samples need."""

from __future__ import annotations

import numpy as np

from ... import samples as smp
from ..flash_attention import flash_attention, flash_attention_backward
from .attention import attention_samples, np_scores
from .cross_entropy import np_lse
from .softmax import np_softmax


def _backward(
    p: smp.Params, ctx: smp.Ctx, host: tuple[np.ndarray, ...], args: list[smp.Arr], scale: float
) -> smp.Example:
    """The backward also takes the forward's out and lse: host values from the inputs as
    the backend sees them (rounded to the dtype), so only the backward is under test."""
    q, k, v, do = host
    qr, kr, vr = (a.astype(ctx.dtype).astype(np.float64) for a in (q, k, v))
    s = np_scores(qr, kr, scale, p["causal"])
    out, lse = np_softmax(s) @ vr, np_lse(s)
    grads = [smp.Arr(do, layout=p["layout"]), *args, smp.Arr(out), smp.Arr(lse, "stat"), scale]
    return smp.Example(smp.label(p), grads, {"causal": p["causal"]}, params=p)


SAMPLES = {
    "flash_attention": smp.SampleSet(
        samples=attention_samples(),
        errors=(
            smp.error("flash_attention_qkv_shapes", "flash_attention",
                      lambda t: flash_attention(t.f(1, 1, 4, 2), t.f(1, 1, 4, 3), t.f(1, 1, 4, 2),
                                            1.0)),
            smp.error("flash_attention_zero_head_dim", "flash_attention",
                      lambda t: flash_attention(t.f(1, 1, 4, 0), t.f(1, 1, 4, 0), t.f(1, 1, 4, 0),
                                            1.0)),
        ),
    ),
    "flash_attention_backward": smp.SampleSet(
        samples=attention_samples(_backward),
        errors=(smp.error("flash_backward_lse_shape", "flash_attention_backward",
                          lambda t: flash_attention_backward(*(t.f(1, 1, 3, 2),) * 5, t.f(1, 3),
                                                         1.0)),),
    ),
}  # fmt: skip
