"""Materialised scaled dot-product attention and its backward.

q, k, v are ``[B, H, T, D]`` (D >= 1; B, H or T may be 0: empty results), one float dtype.
``attention(q, k, v, scale, causal) -> (out[B,H,T,D], probs[B,H,T,T])`` with
``probs = softmax(scale * q kᵀ)`` row-wise, key ``j > i`` masked when causal (masked
probabilities are exactly 0); scores of any finite magnitude (1e3, past ``exp``'s
overflow) give finite results. ``attention_backward(dout, q, k, v, probs, scale)`` uses
``dV = Pᵀ dO``, ``dP = dO Vᵀ``, ``dS = P * (dP - rowsum(dP * P))``, ``dQ = scale dS K``,
``dK = scale dSᵀ Q``. Kernels mask by index, never by writing ``-inf`` into scores.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register
from ..primitive.binary import mul_scalar
from ..primitive.matmul import matmul
from ..primitive.memory import full_like, upload
from ..primitive.select import where
from ..samples import (
    SMALL_SIZES,
    Arr,
    Ctx,
    Draw,
    Example,
    Params,
    Samples,
    edges,
    error,
    label,
    normal,
    rng_of,
)
from .softmax import np_softmax, softmax, softmax_backward


class AttentionMethods(Protocol):
    def attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        """``(out[B,H,T,D], probs[B,H,T,T])``; masked probabilities are exactly 0."""
        ...

    def attention_backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dq, dk, dv)`` from the saved probabilities (the mask is in them)."""
        ...


def check_qkv(op: str, q: Tensor, k: Tensor, v: Tensor) -> None:
    for t, what in ((q, "q"), (k, "k"), (v, "v")):
        checks.rank(op, t, 4, f"{what} [B, H, T, D]")
    if not (q.shape == k.shape == v.shape):
        raise ShapeError(
            f"[{op}] q, k, v must share shape [B, H, T, D]; got {q.shape}, {k.shape}, {v.shape}"
        )
    if q.shape[-1] == 0:
        raise ShapeError(f"[{op}] head dim D must be >= 1; got q {q.shape}")


def attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool = True
) -> tuple[Tensor, Tensor]:
    backend = checks.float_operands("attention", q, k, v)
    check_qkv("attention", q, k, v)
    s = checks.number("attention", scale, "scale")
    b, h, t, _ = q.shape
    expect = (Out(q.shape, q.dtype), Out((b, h, t, t), q.dtype))
    causal = checks.flag("attention", causal, "causal")
    return dispatch(ATTENTION, backend, (q, k, v, s, causal), expect)


def attention_backward(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    op = "attention_backward"
    backend = checks.float_operands(op, dout, q, k, v, probs)
    check_qkv(op, q, k, v)
    checks.shape_is(op, dout, q.shape, "dout")
    b, h, t, _ = q.shape
    checks.shape_is(op, probs, (b, h, t, t), "probs")
    s = checks.number(op, scale, "scale")
    grad = Out(q.shape, q.dtype)
    return dispatch(ATTENTION_BACKWARD, backend, (dout, q, k, v, probs, s), (grad, grad, grad))


# -- composites ---------------------------------------------------------------------------------
def scores(q: Tensor, k: Tensor, scale: float, causal: bool) -> Tensor:
    """``scale * q kᵀ`` with masked entries ``-inf`` (composites only: primitives are IEEE)."""
    s = mul_scalar(matmul(q, k, transpose_b=True), scale)
    if causal and s.size:
        t = q.shape[-2]
        masked = np.triu(np.ones((t, t), dtype=s.dtype), 1)
        mask = upload(s.backend, masked).broadcast_to(s.shape)
        s = where(mask, full_like(s, -math.inf, (1,) * s.ndim).broadcast_to(s.shape), s)
    return s


def attention_composite(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
) -> tuple[Tensor, Tensor]:
    probs = softmax(scores(q, k, scale, causal))
    return matmul(probs, v), probs


def attention_backward_composite(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    dv = matmul(probs, dout, transpose_a=True)
    ds = softmax_backward(matmul(dout, v, transpose_b=True), probs)
    dq = mul_scalar(matmul(ds, k), scale)
    dk = mul_scalar(matmul(ds, q, transpose_a=True), scale)
    return dq, dk, dv


def _attention_vjp(g: Tensor, args: Any, outs: Any, needs: Any) -> tuple[Tensor, ...]:
    q, k, v, scale, _ = args
    return attention_backward(g, q, k, v, outs[1], scale)


# -- conformance samples (shared with flash attention) ---------------------------------------------
def _e(lbl: str, b: int, h: int, t: int, d: int, causal: bool, **kw: Any) -> Params:
    return {"label": lbl, "b": b, "h": h, "t": t, "d": d, "causal": causal, **kw}


#: Lengths that span one, two and several tiles of any size from 16 to 128, both masks.
_LENGTHS = (2, 31, 65, 129, 200)
EDGES = edges(
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
)


BENCH = _e("bench", 1, 4, 256, 64, True)


def draw(d: Draw) -> Params:
    return {
        "b": d.choice(SMALL_SIZES), "h": d.choice(SMALL_SIZES),
        "d": d.choice((1, 3, 8, 16, 33)), "t": d.choice((1, 2, 3, 5, 17, 33, 64, 65, 100)),
        "causal": d.boolean(), "layout": d.choice(("dense", "dense", "permuted", "sliced")),
    }  # fmt: skip


def np_scores(q: np.ndarray, k: np.ndarray, scale: float, causal: bool) -> np.ndarray:
    s = scale * q @ np.swapaxes(k, -1, -2)
    if causal:
        t = s.shape[-1]
        s = np.where(np.triu(np.ones((t, t), dtype=bool), 1), -np.inf, s)
    return s


def qkv(p: Params) -> tuple[np.ndarray, ...]:
    rng = rng_of(p)
    shape = (p["b"], p["h"], p["t"], p["d"])
    q, k, v = (normal(rng, shape) for _ in range(3))
    if p.get("large"):  # |scores| ~ 300: exp would overflow without the max subtraction
        boost = 6.0 * np.sqrt(np.sqrt(p["d"]))
        q, k = q * boost, k * boost
    return q, k, v, normal(rng, shape)


def score_max(q: np.ndarray, k: np.ndarray) -> float:
    """The largest |score| of an example (0 when empty), recorded in its params."""
    if not q.size:
        return 0.0
    return float(np.abs(q @ np.swapaxes(k, -1, -2)).max() / np.sqrt(q.shape[-1]))


def score_scale(ex: Example) -> float:
    """Scores carry ulps of their own magnitude into every output: atol per unit of it."""
    return float(max(1.0, ex.params.get("score_max", 0.0) / 16.0))


def _samples(backward: bool) -> Samples:
    def build(p: Params, ctx: Ctx) -> Example:
        q, k, v, do = qkv(p)
        p = {**p, "score_max": score_max(q, k)}
        scale = 1.0 / math.sqrt(p["d"])
        lay = p["layout"]
        args = [Arr(q, layout=lay), Arr(k, layout=lay), Arr(v, layout=lay)]
        if not backward:
            return Example(label(p), [*args, scale], {"causal": p["causal"]}, params=p)
        qr, kr = (a.astype(ctx.dtype).astype(np.float64) for a in (q, k))
        probs = np_softmax(np_scores(qr, kr, scale, p["causal"]))
        return Example(label(p), [Arr(do, layout=lay), *args, Arr(probs), scale], params=p)

    return Samples(build, EDGES, draw, bench=BENCH)


def cost(args: list[Any]) -> tuple[int, int]:
    q = next(a for a in args if isinstance(a, Tensor) and a.ndim == 4)
    b, h, t, d = q.shape
    return (4 * q.nbytes + b * h * t * t * q.dtype.itemsize, 4 * b * h * t * t * d)


_TOL = Tolerances(
    Tolerance(1e-4, 1e-4),
    Tolerance(1e-10, 1e-10),
    scale=score_scale,
    why="two accumulating matmuls around a softmax; scores carry their ulps",
)
_TOL_B = Tolerances(Tolerance(2e-4, 2e-4), Tolerance(1e-10, 1e-10), scale=score_scale,
                    why="four accumulating matmuls and a row sum")  # fmt: skip

ATTENTION = OpUnit(
    "attention", "fused", "attention", AttentionMethods.attention, function=attention,
    outputs=("out", "probs"), composite=attention_composite, vjp=_attention_vjp,
    differentiable=(0, 1, 2), tolerance=_TOL, samples=_samples(False), cost=cost,
    errors=(
        error("attention_qkv_shapes", "attention",
              lambda t: attention(t.f(1, 1, 4, 2), t.f(1, 1, 5, 2), t.f(1, 1, 4, 2), 1.0)),
        error("attention_rank", "attention",
              lambda t: attention(t.f(1, 4, 2), t.f(1, 4, 2), t.f(1, 4, 2), 1.0)),
        error("attention_zero_head_dim", "attention",
              lambda t: attention(t.f(1, 1, 4, 0), t.f(1, 1, 4, 0), t.f(1, 1, 4, 0), 1.0)),
        error("attention_scale_tensor", "attention",
              lambda t: attention(t.f(1, 1, 2, 2), t.f(1, 1, 2, 2), t.f(1, 1, 2, 2), t.f(1))),
    ),
)  # fmt: skip
ATTENTION_BACKWARD = OpUnit(
    "attention_backward", "fused", "attention", AttentionMethods.attention_backward,
    function=attention_backward, outputs=("dq", "dk", "dv"),
    composite=attention_backward_composite, tolerance=_TOL_B, samples=_samples(True), cost=cost,
    errors=(error("attention_backward_probs_shape", "attention_backward",
                  lambda t: attention_backward(*(t.f(1, 1, 3, 2),) * 4, t.f(1, 1, 3, 2), 1.0)),),
)  # fmt: skip

register(ATTENTION, ATTENTION_BACKWARD)
