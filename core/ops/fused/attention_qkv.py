"""Attention read straight from a fused q, k, v projection, written in the layout it feeds.

``attention_qkv(qkv[B, T, 3C], heads, scale, causal, flash) -> (out[B, T, C], stat)``:
q, k and v are the column blocks ``[0, C)``, ``[C, 2C)`` and ``[2C, 3C)`` of ``qkv``'s last
axis, and head ``h`` of each block is its ``D = C / heads`` contiguous columns from ``h D``
(nanoGPT's layout: what ``riftco.nn``'s one ``(C, 3C)`` projection makes). Row ``t`` of head
``h``'s output lands in ``out[b, t, h D : (h + 1) D]``, the rows the output projection
reads. ``stat`` is what the per-head op saves: ``probs[B, H, T, T]`` (``flash`` false, as
``attention``) or ``lse[B, H, T]`` (``flash`` true, as ``flash_attention``); scores, causal
masking by index, NaN and empty-shape behaviour are theirs. ``attention_qkv_backward(dout,
qkv, out, stat, heads, scale, causal, flash) -> dqkv[B, T, 3C]`` puts dq | dk | dv in the
same blocks.

Why one op: splitting q | k | v, permuting heads to ``[B, H, T, D]`` and merging them back
costs a copy each way on every backend (and a concatenation in backward); a kernel that
reads and writes through strides needs none of them. The composite is exactly those views
and copies around ``attention`` / ``flash_attention``.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from ...errors import DTypeError, ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register
from ..primitive.layout import concatenate_last_axis
from ..samples import Arr, Ctx, Draw, Example, Params, Samples, edges, error, label
from .attention import attention, attention_backward, np_scores, score_max, score_scale
from .attention import qkv as per_head_inputs
from .cross_entropy import np_lse
from .flash_attention import flash_attention, flash_attention_backward
from .softmax import np_softmax


class AttentionQKVMethods(Protocol):
    def attention_qkv(
        self, qkv: Tensor, heads: int, scale: float, causal: bool, flash: bool
    ) -> tuple[Tensor, Tensor]:
        """``(out[B, T, C], probs[B, H, T, T] or lse[B, H, T] when flash)`` from
        ``qkv[B, T, 3C]``, C = heads * D.

        q | k | v are the column blocks of width C of the last axis; head h of each block
        is its D columns from h * D, and head h's output row t is ``out[b, t, h*D:(h+1)*D]``.
        Per head exactly ``attention`` (flash false: probs, masked entries exactly 0) or
        ``flash_attention`` (flash true: the natural-log row log-sum-exp): scores
        ``scale * q kᵀ``, causal masking by index (key j > query i), NaN propagates, B or
        T = 0 gives empty results. Outputs in ``qkv``'s dtype."""
        ...

    def attention_qkv_backward(
        self,
        dout: Tensor,
        qkv: Tensor,
        out: Tensor,
        stat: Tensor,
        heads: int,
        scale: float,
        causal: bool,
        flash: bool,
    ) -> Tensor:
        """``dqkv[B, T, 3C]`` for the output gradient ``dout[B, T, C]``: dq | dk | dv in
        qkv's blocks and head columns.

        ``out`` and ``stat`` are :meth:`attention_qkv`'s outputs (probs: the mask is in
        them; lse: the backward rebuilds ``P = exp(scale q kᵀ - lse)`` and needs ``out``
        and ``causal``)."""
        ...


def check_fused_qkv(op: str, qkv: Tensor, heads: Any) -> tuple[int, int, int, int]:
    """``(B, T, C, heads)`` of a valid call; metadata only."""
    checks.rank(op, qkv, 3, "qkv [B, T, 3C]")
    if not isinstance(heads, (int, np.integer)) or isinstance(heads, bool):
        raise DTypeError(f"[{op}] heads must be a Python int; got {type(heads).__name__}")
    h = int(heads)
    if h < 1:
        raise ShapeError(f"[{op}] heads must be >= 1; got {h}")
    b, t, width = qkv.shape
    if width == 0 or width % (3 * h):
        raise ShapeError(
            f"[{op}] qkv's last dim must be 3 * heads * D with head dim D >= 1 (q | k | v "
            f"blocks of heads * D columns); got qkv {qkv.shape} with heads={h}"
        )
    return b, t, width // 3, h


def _stat_shape(b: int, h: int, t: int, flash: bool) -> tuple[int, ...]:
    return (b, h, t) if flash else (b, h, t, t)


def attention_qkv(
    qkv: Tensor, heads: int, scale: float, causal: bool = True, flash: bool = False
) -> tuple[Tensor, Tensor]:
    op = "attention_qkv"
    backend = checks.float_operands(op, qkv)
    b, t, c, h = check_fused_qkv(op, qkv, heads)
    s = checks.number(op, scale, "scale")
    causal, flash = checks.flag(op, causal, "causal"), checks.flag(op, flash, "flash")
    expect = (Out((b, t, c), qkv.dtype), Out(_stat_shape(b, h, t, flash), qkv.dtype))
    return dispatch(ATTENTION_QKV, backend, (qkv, h, s, causal, flash), expect)


def attention_qkv_backward(
    dout: Tensor,
    qkv: Tensor,
    out: Tensor,
    stat: Tensor,
    heads: int,
    scale: float,
    causal: bool = True,
    flash: bool = False,
) -> Tensor:
    op = "attention_qkv_backward"
    backend = checks.float_operands(op, dout, qkv, out, stat)
    b, t, c, h = check_fused_qkv(op, qkv, heads)
    checks.shape_is(op, dout, (b, t, c), "dout")
    checks.shape_is(op, out, (b, t, c), "out")
    causal, flash = checks.flag(op, causal, "causal"), checks.flag(op, flash, "flash")
    checks.shape_is(op, stat, _stat_shape(b, h, t, flash), "lse" if flash else "probs")
    s = checks.number(op, scale, "scale")
    args = (dout, qkv, out, stat, h, s, causal, flash)
    return dispatch(ATTENTION_QKV_BACKWARD, backend, args, Out(qkv.shape, qkv.dtype))


# -- composites: views of the heads around the per-head ops -----------------------------------
def heads_view(x: Tensor, heads: int, block: int = 0, blocks: int = 1) -> Tensor:
    """Column block ``block`` of ``x[B, T, blocks * C]`` as a ``[B, H, T, D]`` view (no copy;
    any strides: splitting the last axis into (H, D) is always a view)."""
    b, t, width = x.shape
    c = width // blocks
    d = c // heads
    sb, st, sc = x.strides
    return Tensor(x.backend, x.storage, (b, heads, t, d), (sb, d * sc, st, sc),
                  x.offset + block * c * sc, x.dtype)  # fmt: skip


def merge_heads(x: Tensor) -> Tensor:
    """``[B, H, T, D]`` -> dense ``[B, T, H * D]`` (one copy unless already in that order)."""
    b, h, t, d = x.shape
    return x.permute(0, 2, 1, 3).contiguous().reshape(b, t, h * d)


def attention_qkv_composite(
    qkv: Tensor, heads: int, scale: float, causal: bool, flash: bool
) -> tuple[Tensor, Tensor]:
    q, k, v = (heads_view(qkv, heads, i, 3) for i in range(3))
    out, stat = (flash_attention if flash else attention)(q, k, v, scale, causal)
    return merge_heads(out), stat


def attention_qkv_backward_composite(
    dout: Tensor,
    qkv: Tensor,
    out: Tensor,
    stat: Tensor,
    heads: int,
    scale: float,
    causal: bool,
    flash: bool,
) -> Tensor:
    q, k, v = (heads_view(qkv, heads, i, 3) for i in range(3))
    do = heads_view(dout, heads)
    if flash:
        grads = flash_attention_backward(do, q, k, v, heads_view(out, heads), stat, scale, causal)
    else:
        grads = attention_backward(do, q, k, v, stat, scale)
    # [B, H, T, 3D] (dq | dk | dv per head row), then one copy to [B, T, 3, H, D]: four
    # copies in all where merging each gradient and concatenating would take six.
    b, h, t, d = q.shape
    per_head = concatenate_last_axis(list(grads)).reshape(b, h, t, 3, d)
    return per_head.permute(0, 2, 3, 1, 4).contiguous().reshape(b, t, 3 * h * d)


def _vjp(g: Tensor, args: Any, outs: Any, needs: Any) -> tuple[Tensor]:
    x, heads, scale, causal, flash = args
    out, stat = outs
    return (attention_qkv_backward(g, x, out, stat, heads, scale, causal, flash),)


# -- conformance samples ---------------------------------------------------------------------
def _e(lbl: str, b: int, h: int, t: int, d: int, causal: bool, flash: bool, **kw: Any) -> Params:
    return {"label": lbl, "b": b, "h": h, "t": t, "d": d, "causal": causal, "flash": flash, **kw}


def _name(t: int, h: int, causal: bool, flash: bool) -> str:
    return f"T={t}, {h} head{'s' * (h > 1)}, D=5{'' if causal else ', not causal'}" + (
        ", flash" if flash else ""
    )


#: Lengths spanning one, two and several tiles of any size from 16 to 128; heads 1 to 3.
_LENGTHS = (2, 31, 65, 129, 200)
EDGES = edges(
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
)

BENCH = _e("bench", 1, 4, 256, 64, True, False)


def _draw(d: Draw) -> Params:
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


def _samples(backward: bool) -> Samples:
    def build(p: Params, ctx: Ctx) -> Example:
        q, k, v, do = per_head_inputs(p)  # [B, H, T, D] each; "large" boosts q and k
        lay = p["layout"]
        fused = Arr(np.concatenate([np_merge_heads(a) for a in (q, k, v)], axis=-1), layout=lay)
        c, h = p["h"] * p["d"], p["h"]
        shape = (p["b"], p["t"], h, p["d"])
        # the values the backend will see (a broadcast layout repeats the first batch row)
        qh, kh, vh = (
            np.swapaxes(fused.value[..., i * c : (i + 1) * c].reshape(shape), 1, 2)
            for i in range(3)
        )
        p = {**p, "score_max": score_max(qh, kh)}
        scale = 1.0 / math.sqrt(p["d"])
        kwargs = {"causal": p["causal"], "flash": p["flash"]}
        if not backward:
            return Example(label(p), [fused, h, scale], kwargs, params=p)
        qr, kr, vr = (a.astype(ctx.dtype).astype(np.float64) for a in (qh, kh, vh))
        s = np_scores(qr, kr, scale, p["causal"])
        probs = np_softmax(s)
        stat = np_lse(s) if p["flash"] else probs
        out_lay = "dense" if lay == "broadcast" else lay  # out must stay the forward's
        args = [Arr(np_merge_heads(do), layout=lay), fused,
                Arr(np_merge_heads(probs @ vr), layout=out_lay), Arr(stat), h, scale]  # fmt: skip
        return Example(label(p), args, kwargs, params=p)

    return Samples(build, EDGES, _draw, bench=BENCH)


def _cost(args: list[Any]) -> tuple[int, int]:
    """Reads qkv, writes out and the statistic (probs at most); two products of B H T T D."""
    x, h = args[0], args[1]
    b, t, width = x.shape
    stat = b * h * t * t * x.dtype.itemsize
    return (x.nbytes * 4 // 3 + stat, 4 * b * t * t * (width // 3))


def _cost_backward(args: list[Any]) -> tuple[int, int]:
    """Reads dout, qkv, out and the statistic, writes dqkv; four products."""
    x, h = args[1], args[4]
    b, t, width = x.shape
    stat = b * h * t * t * x.dtype.itemsize
    return (x.nbytes * 8 // 3 + stat, 8 * b * t * t * (width // 3))


#: attention's and flash attention's own: atol per unit of the largest score / 16, since
#: scores carry ulps of their own magnitude into every output (and into lse).
_TOL = Tolerances(
    Tolerance(1e-4, 1e-4),
    Tolerance(1e-10, 1e-10),
    scale=score_scale,
    why="two accumulating products around a softmax (or online rescaling); scores carry their ulps",
)
_TOL_B = Tolerances(
    Tolerance(2e-4, 2e-4),
    Tolerance(1e-10, 1e-10),
    scale=score_scale,
    why="four accumulating products and a row sum (probabilities rebuilt from lse)",
)

ATTENTION_QKV = OpUnit(
    "attention_qkv", "fused", "attention_qkv", AttentionQKVMethods.attention_qkv,
    function=attention_qkv, outputs=("out", "stat"), composite=attention_qkv_composite,
    vjp=_vjp, differentiable=(0,), tolerance=_TOL, samples=_samples(False), cost=_cost,
    errors=(
        error("attention_qkv_rank", "attention_qkv",
              lambda t: attention_qkv(t.f(1, 2, 4, 6), 2, 1.0)),
        error("attention_qkv_width", "attention_qkv",
              lambda t: attention_qkv(t.f(1, 4, 10), 2, 1.0)),
        error("attention_qkv_zero_width", "attention_qkv",
              lambda t: attention_qkv(t.f(1, 4, 0), 1, 1.0)),
        error("attention_qkv_zero_heads", "attention_qkv",
              lambda t: attention_qkv(t.f(1, 4, 6), 0, 1.0)),
        error("attention_qkv_heads_float", "attention_qkv",
              lambda t: attention_qkv(t.f(1, 4, 6), 2.0, 1.0)),  # type: ignore[arg-type]
        error("attention_qkv_scale_tensor", "attention_qkv",
              lambda t: attention_qkv(t.f(1, 4, 6), 1, t.f(1))),
    ),
)  # fmt: skip
ATTENTION_QKV_BACKWARD = OpUnit(
    "attention_qkv_backward", "fused", "attention_qkv", AttentionQKVMethods.attention_qkv_backward,
    function=attention_qkv_backward, outputs=("dqkv",),
    composite=attention_qkv_backward_composite, tolerance=_TOL_B, samples=_samples(True),
    cost=_cost_backward,
    errors=(
        error("attention_qkv_bwd_dout", "attention_qkv_backward",
              lambda t: attention_qkv_backward(t.f(1, 3, 6), t.f(1, 3, 6), t.f(1, 3, 2),
                                               t.f(1, 1, 3, 3), 1, 1.0)),
        error("attention_qkv_bwd_lse", "attention_qkv_backward",
              lambda t: attention_qkv_backward(t.f(1, 3, 2), t.f(1, 3, 6), t.f(1, 3, 2),
                                               t.f(1, 1, 3, 3), 1, 1.0, True, True)),
    ),
)  # fmt: skip

register(ATTENTION_QKV, ATTENTION_QKV_BACKWARD)
