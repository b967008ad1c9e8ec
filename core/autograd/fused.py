"""Differentiable fused ops: GELU, softmax, LayerNorm, RMSNorm, linear (+GELU), embedding,
cross-entropy, attention.

Each forward calls the fused raw op (native kernel or core composite) through ``apply``,
and each VJP is the one its op unit declares, which calls the dedicated backward op: a GPU
backend's own kernels do the work in both directions. What is here is what only the
Variable level knows: cross entropy's mean over kept rows (ordinary ``sum`` and ``div``
nodes after the unit's), and which attention unit a ``mode`` picks (the mode names, the
head-dim check and the default scale are the attention unit's).
"""

from __future__ import annotations

from .. import ops
from ..errors import DTypeError
from ..ops.fused import add_layer_norm as _add_ln
from ..ops.fused import attention as _attention
from ..ops.fused import attention_qkv as _attention_qkv
from ..ops.fused import cross_entropy as _cross_entropy
from ..ops.fused import embedding as _embedding
from ..ops.fused import flash_attention as _flash
from ..ops.fused import gelu as _gelu
from ..ops.fused import layer_norm as _layer_norm
from ..ops.fused import linear as _linear
from ..ops.fused import linear_gelu as _linear_gelu
from ..ops.fused import rms_norm as _rms_norm
from ..ops.fused import softmax as _softmax
from ..tensor import Tensor
from .apply import apply, as_variable
from .graph import Variable, make
from .operations import div, sum


def gelu(x: Variable, approximate: str = "tanh") -> Variable:
    return apply(_gelu.GELU, x, approximate)


def softmax(x: Variable) -> Variable:
    """Softmax over the last axis; its VJP reuses the saved output."""
    return apply(_softmax.SOFTMAX, x)


def layer_norm(x: Variable, gamma: Variable, beta: Variable, eps: float = 1e-5) -> Variable:
    return apply(_layer_norm.LAYER_NORM, x, gamma, beta, eps)


def rms_norm(x: Variable, gamma: Variable, eps: float = 1e-6) -> Variable:
    """``x / sqrt(mean(x^2) + eps) * gamma`` over the last axis; the VJP reuses rstd."""
    return apply(_rms_norm.RMS_NORM, x, gamma, eps)


def add_layer_norm(
    x: Variable, r: Variable, gamma: Variable, beta: Variable, eps: float = 1e-5
) -> tuple[Variable, Variable]:
    """``(s, y)``: the residual sum ``s = x + r`` and ``y = layer_norm(s, gamma, beta)``.

    Two nodes: ``s`` (whose rule hands its gradient to ``x`` and ``r`` unchanged, as
    ``add``'s does) and ``y`` (parents ``s``, ``gamma``, ``beta``). ``y``'s rule *folds*
    (see graph.py): it receives the gradient ``s`` already has from the residual stream
    and returns ``ds + dx`` from one ``add_layer_norm_backward`` call, where the unfused
    graph ran ``layer_norm_backward`` and then an ``add``. With no such gradient yet it
    runs plain ``layer_norm_backward``."""
    op = "add_layer_norm"
    xv, rv, gv, bv = (as_variable(a, op) for a in (x, r, gamma, beta))
    s, y, mu, rs = _add_ln.add_layer_norm(xv._value, rv._value, gv._value, bv._value, eps)
    g_val = gv._value

    def sum_rule(g: Tensor) -> tuple[Tensor, Tensor]:
        return g, g

    def norm_rule(dy: Tensor, ds: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        if ds is None:
            return _layer_norm.layer_norm_backward(dy, s, g_val, mu, rs)
        return _add_ln.add_layer_norm_backward(dy, ds, s, g_val, mu, rs)

    norm_rule.fold = 0  # type: ignore[attr-defined]  # read by graph.vjp
    sv = make(s, op, (xv, rv), sum_rule)
    return sv, make(y, op, (sv, gv, bv), norm_rule)  # type: ignore[arg-type]


def linear(x: Variable, weight: Variable, bias: Variable) -> Variable:
    """``x[M, K] @ weight[K, N] + bias[N]``; one fused backward makes dx, dweight, dbias."""
    return apply(_linear.LINEAR, x, weight, bias)


def linear_gelu(
    x: Variable, weight: Variable, bias: Variable, approximate: str = "tanh"
) -> Variable:
    """``gelu(x[M, K] @ weight[K, N] + bias[N])`` as one node: the pre-activation is saved
    for the backward, which forms ``dy * gelu'(h)`` inside the linear backward's call."""
    return apply(_linear_gelu.LINEAR_GELU, x, weight, bias, approximate)


def embedding(table: Variable, ids: Tensor) -> Variable:
    """Rows of ``table[V, C]`` at ``ids``; the VJP scatter-adds repeated ids."""
    if not isinstance(ids, Tensor):
        raise DTypeError(f"[embedding] ids must be an integer Tensor; got {type(ids).__name__}")
    return apply(_embedding.EMBEDDING, table, ids)


def cross_entropy(logits: Variable, targets: Tensor) -> Variable:
    """Mean loss over rows whose target is not -1; the count stays on the device."""
    if not isinstance(targets, Tensor):
        raise DTypeError(
            f"[cross_entropy] targets must be an integer Tensor; got {type(targets).__name__}"
        )
    logits = as_variable(logits, "cross_entropy")
    rows = apply(_cross_entropy.CROSS_ENTROPY, logits, targets)
    rv = rows._value  # the logits' dtype, float32 for half logits (their loss rows)
    ignored = ops.full_like(rv, -1.0, (1,)).broadcast_to((rv.shape[0],))
    kept = ops.compare(ops.cast(targets, rv.dtype), ignored, "ne")
    count = ops.maximum(ops.sum(kept), ops.full_like(rv, 1.0, ()))  # all ignored: 0, not nan
    return div(sum(rows), count)


def attention(
    q: Variable,
    k: Variable,
    v: Variable,
    causal: bool = True,
    scale: float | None = None,
    mode: str = "materialized",
) -> Variable:
    """Scaled dot-product attention over ``[B, H, T, D]``.

    ``"materialized"`` saves the ``[B, H, T, T]`` probabilities for the VJP; ``"flash"``
    saves only the output and the ``[B, H, T]`` log-sum-exp and lets the backend rebuild
    the probabilities during backward. ``scale`` defaults to ``1/sqrt(D)``."""
    qv = as_variable(q, "attention")._value
    d = _attention.head_dim("attention", qv)
    s = _attention.default_scale(d) if scale is None else float(scale)
    flash = _attention.flash_mode("attention", mode)
    unit = _flash.FLASH_ATTENTION if flash else _attention.ATTENTION
    return apply(unit, q, k, v, s, bool(causal))


def attention_qkv(
    qkv: Variable,
    heads: int,
    causal: bool = True,
    scale: float | None = None,
    mode: str = "materialized",
) -> Variable:
    """Multi-head attention read straight from a fused projection ``qkv[B, T, 3C]``.

    q | k | v are its column blocks of width C and head h of each its ``D = C / heads``
    columns from ``h D``; the result is ``[B, T, C]`` with the heads side by side, the rows
    an output projection reads. Same modes and default scale ``1/sqrt(D)`` as
    :func:`attention`; no head split, permute or merge copies where the backend reads and
    writes through strides."""
    value = as_variable(qkv, "attention_qkv")._value
    _, _, c, h = _attention_qkv.check_fused_qkv("attention_qkv", value, heads)
    flash = _attention.flash_mode("attention_qkv", mode)
    s = _attention.default_scale(c // h) if scale is None else scale
    return apply(_attention_qkv.ATTENTION_QKV, qkv, h, s, bool(causal), flash)
