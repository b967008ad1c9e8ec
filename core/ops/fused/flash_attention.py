"""Flash attention: the same attention without a ``[T, T]`` matrix, and its backward.

``flash_attention(q, k, v, scale, causal) -> (out[B,H,T,D], lse[B,H,T])`` where ``lse`` is
the natural-log row log-sum-exp of the scaled, masked scores. A GPU kernel walks keys in
tiles with an online softmax: each new tile rescales the running sum and output by
``exp(old_max - new_max)`` (forgetting that is the classic bug, visible only past one
tile). ``flash_attention_backward(dout, q, k, v, out, lse, scale, causal) -> (dq, dk, dv)``
rebuilds ``P = exp(scale q kᵀ - lse)`` tile by tile. Shapes and masking as ``attention``.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...dtypes import compute_dtype
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.binary import add, div, sub
from ..primitive.matmul import matmul
from ..primitive.memory import full_like
from ..primitive.reduce import max, sum
from ..primitive.unary import exp, log
from ..rows import along_rows
from .attention import (
    attention_backward_composite,
    check_qkv,
    cost,
    rebuilt_out_gain,
    score_scale,
    scores,
)

_SAMPLES = samples_module(__name__)


class FlashAttentionMethods(Protocol):
    def flash_attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        """``(out[B,H,T,D], lse[B,H,T])``; never holds a ``[T, T]`` matrix on a GPU.
        ``out`` in ``q.dtype``, ``lse`` in its compute dtype (float32 for float16/bfloat16).

        ``out`` is ``attention``'s: scores ``S = scale * q kᵀ`` (``scale`` an argument),
        key ``j > i`` masked for query ``i`` when ``causal`` (never contributing, even when
        NaN or infinite), ``out = softmax(S) v`` over the unmasked keys. ``lse[b, h, i]`` is
        the natural-log log-sum-exp of row ``i`` of the masked scaled scores:
        ``m_i + log(sum_{j unmasked} exp(S[i, j] - m_i))`` with ``m_i`` their maximum (so
        with zero scores and ``causal``, ``lse[i] = log(i + 1)``). A tiled kernel keeps a
        running max and sum and rescales both (and the output) by ``exp(old_max -
        new_max)`` at every tile.

        Special values: as ``attention``: a NaN or infinity in ``q[i]`` makes ``out[i]``
        and ``lse[i]`` NaN, one in ``k[j]`` every row that sees key ``j``; a NaN or infinity
        in ``v[j]`` reaches every output row in the reference (masked ones included) but
        not ``lse``; the samples hold no non-finite ``v``. ``-0.0`` is 0.0. B, H or T = 0
        gives empty results.

        Composite: primitives only (the masked scores, ``max``, ``exp``, ``sum``, ``log``,
        ``matmul``)."""
        ...

    def flash_attention_backward(
        self,
        dout: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        lse: Tensor,
        scale: float,
        causal: bool,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dq, dk, dv)``, rebuilding ``P = exp(scale q kᵀ - lse)`` block by block.

        ``P`` is rebuilt from the forward's ``lse`` with masked entries (key ``j > i`` when
        ``causal``) exactly 0; then ``attention_backward``'s formulas: ``dV = Pᵀ dO``,
        ``dS = P * (dO Vᵀ - rowsum(dO * out))`` (``rowsum(dP * P)`` equals the row sum of
        ``dO * out``), ``dQ = scale dS K``, ``dK = scale dSᵀ Q``.

        Special values: IEEE through the products, as for attention's backward: a NaN or
        infinity in ``dout``, ``v`` or ``out`` reaches the rows and columns its products
        touch; a NaN or ``+inf`` in ``lse`` makes its row of ``P`` NaN or 0. ``-0.0`` is
        0.0. Empty shapes give empty results.

        Composite: rebuilds ``P`` from primitives, then the composite of attention's
        backward, whose ``softmax_backward`` is your native one when you define it."""
        ...


def flash_attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool = True
) -> tuple[Tensor, Tensor]:
    backend = checks.float_operands("flash_attention", q, k, v)
    check_qkv("flash_attention", q, k, v)
    s = checks.number("flash_attention", scale, "scale")
    expect = (Out(q.shape, q.dtype), Out(q.shape[:-1], compute_dtype(q.dtype)))
    causal = checks.flag("flash_attention", causal, "causal")
    return dispatch(FLASH_ATTENTION, backend, (q, k, v, s, causal), expect)


def flash_attention_backward(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    scale: float,
    causal: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    op = "flash_attention_backward"
    backend = checks.float_operands(op, dout, q, k, v, out)
    checks.statistics(op, q, lse=lse)
    check_qkv(op, q, k, v)
    checks.shape_is(op, dout, q.shape, "dout")
    checks.shape_is(op, out, q.shape, "out")
    checks.shape_is(op, lse, q.shape[:-1], "lse")
    s = checks.number(op, scale, "scale")
    grad = Out(q.shape, q.dtype)
    args = (dout, q, k, v, out, lse, s, checks.flag(op, causal, "causal"))
    return dispatch(FLASH_ATTENTION_BACKWARD, backend, args, (grad, grad, grad))


# -- composites ---------------------------------------------------------------------------------
def flash_attention_composite(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
) -> tuple[Tensor, Tensor]:
    """Materialised, but renormalised like the kernel: ``out = (E v) / rowsum(E)`` with
    ``E = exp(s - rowmax)``, so large scores lose no accuracy to ``exp(s - lse)``."""
    if q.shape[-2] == 0:
        return full_like(q, 0.0), full_like(q, 0.0, q.shape[:-1])
    s = scores(q, k, scale, causal)
    m = max(s, -1, keepdims=True)
    e = exp(sub(s, along_rows(m, s.shape)))
    total = sum(e, -1)
    out = div(matmul(e, v), along_rows(total, q.shape))
    return out, add(log(total), m.reshape(q.shape[:-1]))


def flash_attention_backward_composite(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    scale: float,
    causal: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """``P = exp(s - lse)``, renormalised by its row sums as the kernels' forward
    normalises: at large scores float32 ``lse`` is off by ulps of its magnitude (1e3: 6e-5),
    which ``exp`` turns into the same relative error in every ``P`` of the row, and
    ``dP - rowsum(P dP)`` then cancels to nothing (relative dq error 0.2 at scores of
    1e3); dividing by the row sum removes that common factor. A row that sums to zero
    (``lse`` of other scores) keeps its NaN: no finite P fits it."""
    s = scores(q, k, scale, causal)
    e = exp(sub(s, along_rows(lse, s.shape)))
    probs = div(e, along_rows(sum(e, -1), s.shape))
    return attention_backward_composite(dout, q, k, v, probs, scale)


def _flash_vjp(g: Tensor, args: Any, outs: Any, needs: Any) -> tuple[Tensor, ...]:
    q, k, v, scale, causal = args
    out, lse = outs
    return flash_attention_backward(g, q, k, v, out, lse, scale, causal)


_TOL = Tolerances(
    Tolerance(1e-4, 1e-4),
    Tolerance(1e-10, 1e-10),
    scale=score_scale,
    why="online rescaling across tiles; scores carry their ulps",
)
_TOL_B = Tolerances(Tolerance(2e-4, 2e-4), Tolerance(1e-10, 1e-10), scale=score_scale,
                    why="probabilities rebuilt from lse, four accumulating products",
                    rebuilds_saved=rebuilt_out_gain)  # fmt: skip

FLASH_ATTENTION = OpUnit(
    "flash_attention", "fused", FlashAttentionMethods.flash_attention, module="flash_attention",
    function=flash_attention, outputs=("out", "lse"), composite=flash_attention_composite,
    vjp=_flash_vjp, differentiable=(0, 1, 2), tolerance=_TOL, cost=cost,
    testing=_SAMPLES,
)  # fmt: skip
FLASH_ATTENTION_BACKWARD = OpUnit(
    "flash_attention_backward", "fused",
    FlashAttentionMethods.flash_attention_backward, module="flash_attention",
    function=flash_attention_backward,
    outputs=("dq", "dk", "dv"), composite=flash_attention_backward_composite, tolerance=_TOL_B,
    cost=cost,
    testing=_SAMPLES,
)  # fmt: skip

register(FLASH_ATTENTION, FLASH_ATTENTION_BACKWARD)
