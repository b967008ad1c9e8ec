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

from typing import Any, Protocol

import numpy as np

from ...dtypes import compute_dtype
from ...errors import DTypeError, ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.layout import concatenate_last_axis
from .attention import attention, attention_backward, score_scale
from .flash_attention import flash_attention, flash_attention_backward

_SAMPLES = samples_module(__name__)


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
        T = 0 gives empty results. Outputs in ``qkv``'s dtype, but ``lse`` in the compute
        dtype (float32 for float16/bfloat16). With ``flash``, ``lse`` is
        the natural-log log-sum-exp of each row of the masked scaled scores, as
        ``flash_attention`` defines it.

        Special values: per head those of ``attention`` / ``flash_attention``: a NaN or
        infinity in a query row poisons that row, in a key row every row that sees the
        key, in a value row every output row of its head (the samples hold no non-finite
        values). ``-0.0`` is 0.0. B or T = 0 gives empty results.

        Composite: views and copies of ``qkv`` around ``attention`` or ``flash_attention``
        (your native ones when you define them)."""
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
        and ``causal``). Per head the formulas of ``attention_backward`` /
        ``flash_attention_backward``.

        Special values: theirs, per head: IEEE through the products (a NaN or infinity in
        ``dout``, ``qkv`` or ``stat`` reaches the rows and columns its products touch).
        ``-0.0`` is 0.0. B or T = 0 gives an empty result.

        Composite: views and copies around ``attention_backward`` or
        ``flash_attention_backward`` (your native ones when you define them), then
        ``concatenate_last_axis``."""
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
    stat = compute_dtype(qkv.dtype) if flash else qkv.dtype  # lse; probs stay in the dtype
    expect = (Out((b, t, c), qkv.dtype), Out(_stat_shape(b, h, t, flash), stat))
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
    backend = checks.float_operands(op, dout, qkv, out)
    b, t, c, h = check_fused_qkv(op, qkv, heads)
    checks.shape_is(op, dout, (b, t, c), "dout")
    checks.shape_is(op, out, (b, t, c), "out")
    causal, flash = checks.flag(op, causal, "causal"), checks.flag(op, flash, "flash")
    if flash:
        checks.statistics(op, qkv, lse=stat)
    else:
        checks.float_operands(op, qkv, stat)
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
    "attention_qkv", "fused", AttentionQKVMethods.attention_qkv, module="attention_qkv",
    function=attention_qkv, outputs=("out", "stat"), composite=attention_qkv_composite,
    vjp=_vjp, differentiable=(0,), tolerance=_TOL, cost=_cost,
    testing=_SAMPLES,
    since=(1, 1),
)  # fmt: skip
ATTENTION_QKV_BACKWARD = OpUnit(
    "attention_qkv_backward", "fused", AttentionQKVMethods.attention_qkv_backward,
    module="attention_qkv",
    function=attention_qkv_backward, outputs=("dqkv",),
    composite=attention_qkv_backward_composite, tolerance=_TOL_B, cost=_cost_backward,
    testing=_SAMPLES,
    since=(1, 1),
)  # fmt: skip

register(ATTENTION_QKV, ATTENTION_QKV_BACKWARD)
