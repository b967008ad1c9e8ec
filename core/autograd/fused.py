"""Differentiable fused ops: GELU, softmax, LayerNorm, embedding, cross-entropy, attention.

Each forward calls the fused raw op (native kernel or core composite) and each VJP calls
its dedicated backward op, so a GPU backend's own kernels do the work in both directions.
"""

from __future__ import annotations

import math

from .. import tensor_ops as ops
from ..creation import full_like
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .graph import Variable, make
from .operations import as_variable


def gelu(x: Variable, approximate: str = "tanh") -> Variable:
    xv = x._value
    y = ops.gelu(xv, approximate)
    return make(y, "gelu", (x,), lambda g: (ops.gelu_backward(g, xv, approximate),))


def softmax(x: Variable) -> Variable:
    """Softmax over the last axis; its VJP reuses the saved output."""
    y = ops.softmax(x._value)
    return make(y, "softmax", (x,), lambda g: (ops.softmax_backward(g, y),))


def layer_norm(x: Variable, gamma: Variable, beta: Variable, eps: float = 1e-5) -> Variable:
    x, gamma, beta = (as_variable(t, "layer_norm") for t in (x, gamma, beta))
    xv, gv = x._value, gamma._value
    y, mean, rstd = ops.layer_norm(xv, gv, beta._value, eps)
    return make(
        y, "layer_norm", (x, gamma, beta),
        lambda g: ops.layer_norm_backward(g, xv, gv, mean, rstd),
    )  # fmt: skip


def embedding(table: Variable, ids: Tensor) -> Variable:
    """Rows of ``table[V, C]`` at ``ids``; the VJP scatter-adds repeated ids."""
    if not isinstance(ids, Tensor):
        raise DTypeError(f"[embedding] ids must be an integer Tensor; got {type(ids).__name__}")
    tv = table._value
    num = tv.shape[0] if tv.ndim == 2 else 0
    y = ops.embedding(tv, ids)
    return make(y, "embedding", (table,), lambda g: (ops.embedding_backward(g, ids, num),))


def cross_entropy(logits: Variable, targets: Tensor) -> Variable:
    """Mean loss over rows whose target is not -1; the count stays on the device."""
    if not isinstance(targets, Tensor):
        raise DTypeError(
            f"[cross_entropy] targets must be an integer Tensor; got {type(targets).__name__}"
        )
    lv = logits._value
    rows, lse = ops.cross_entropy(lv, targets)
    n = lv.shape[0]
    ignored = full_like(lv, -1.0, (1,)).broadcast_to((n,))
    kept = ops.compare(ops.cast(targets, lv.dtype), ignored, "ne")
    count = ops.maximum(ops.sum(kept), full_like(lv, 1.0, ()))  # all rows ignored: loss 0, not nan
    loss = ops.div(ops.sum(rows), count)

    def rule(g: Tensor) -> tuple[Tensor]:
        drows = ops.div(g, count).reshape(1).broadcast_to((n,))
        return (ops.cross_entropy_backward(drows, lv, targets, lse),)

    return make(loss, "cross_entropy", (logits,), rule)


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
    the probabilities during backward."""
    q, k, v = (as_variable(t, "attention") for t in (q, k, v))
    qv, kv, vv = q._value, k._value, v._value
    if qv.ndim != 4:
        raise ShapeError(f"[attention] q must be [B, H, T, D]; got shape {qv.shape}")
    s = 1.0 / math.sqrt(qv.shape[-1]) if scale is None else float(scale)
    if mode == "materialized":
        out, probs = ops.attention(qv, kv, vv, s, causal)
        return make(
            out, "attention", (q, k, v), lambda g: ops.attention_backward(g, qv, kv, vv, probs, s)
        )
    if mode == "flash":
        out, lse = ops.flash_attention(qv, kv, vv, s, causal)
        return make(
            out, "flash_attention", (q, k, v),
            lambda g: ops.flash_attention_backward(g, qv, kv, vv, out, lse, s, causal),
        )  # fmt: skip
    raise ShapeError(f"[attention] mode must be 'materialized' or 'flash'; got {mode!r}")
