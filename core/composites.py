"""Composite fallbacks: every fused op written with primitives only.

A new backend that implements just the primitives is complete because of this module.
Each function receives already-validated operands and calls only ``tensor_ops``
primitives, so it runs on the operands' own backend. Small host constants (``arange``,
the causal mask) are uploaded with ``from_numpy``; that is an upload, never a download.
"""

from __future__ import annotations

import math

import numpy as np

from . import tensor_ops as ops
from .creation import full_like
from .tensor import Tensor

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _const(like: Tensor, array: np.ndarray) -> Tensor:
    return like.backend.from_numpy(np.ascontiguousarray(array, dtype=like.dtype))


def _bcast_last(stat: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``stat`` of shape ``shape[:-1]`` (or keepdims) broadcast along the last axis."""
    if stat.ndim == len(shape) - 1:
        stat = stat.expand_dims(-1)  # a view for any strides (reshape would need dense)
    return stat.broadcast_to(shape)


def _erf(x: Tensor) -> Tensor:
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): exp, abs and a polynomial only."""
    p, a1, a2, a3, a4, a5 = (
        0.3275911,
        0.254829592,
        -0.284496736,
        1.421413741,
        -1.453152027,
        1.061405429,
    )
    ax = ops.abs(x)
    t = ops.pow_scalar(ops.add_scalar(ops.mul_scalar(ax, p), 1.0), -1.0)
    poly = ops.add_scalar(ops.mul_scalar(t, a5), a4)
    for c in (a3, a2, a1):
        poly = ops.add_scalar(ops.mul(poly, t), c)
    poly = ops.mul(poly, t)
    y = ops.sub(full_like(x, 1.0), ops.mul(poly, ops.exp(ops.neg(ops.mul(ax, ax)))))
    zero = full_like(x, 0.0)
    sign = ops.sub(ops.compare(x, zero, "ge"), ops.compare(x, zero, "lt"))
    return ops.mul(y, sign)


def gelu(x: Tensor, approximate: str) -> Tensor:
    if approximate == "tanh":
        inner = ops.mul_scalar(
            ops.add(x, ops.mul_scalar(ops.pow_scalar(x, 3.0), 0.044715)), _SQRT_2_OVER_PI
        )
        return ops.mul(ops.mul_scalar(x, 0.5), ops.add_scalar(ops.tanh(inner), 1.0))
    cdf = ops.mul_scalar(ops.add_scalar(_erf(ops.mul_scalar(x, 1.0 / math.sqrt(2.0))), 1.0), 0.5)
    return ops.mul(x, cdf)


def gelu_backward(dy: Tensor, x: Tensor, approximate: str) -> Tensor:
    if approximate == "tanh":
        x2 = ops.mul(x, x)
        inner = ops.mul_scalar(
            ops.mul(x, ops.add_scalar(ops.mul_scalar(x2, 0.044715), 1.0)), _SQRT_2_OVER_PI
        )
        t = ops.tanh(inner)
        dinner = ops.mul_scalar(
            ops.add_scalar(ops.mul_scalar(x2, 3 * 0.044715), 1.0), _SQRT_2_OVER_PI
        )
        sech2 = ops.add_scalar(ops.neg(ops.mul(t, t)), 1.0)
        grad = ops.add(
            ops.mul_scalar(ops.add_scalar(t, 1.0), 0.5),
            ops.mul(ops.mul_scalar(x, 0.5), ops.mul(sech2, dinner)),
        )
        return ops.mul(dy, grad)
    cdf = ops.mul_scalar(ops.add_scalar(_erf(ops.mul_scalar(x, 1.0 / math.sqrt(2.0))), 1.0), 0.5)
    pdf = ops.mul_scalar(
        ops.exp(ops.mul_scalar(ops.mul(x, x), -0.5)), 1.0 / math.sqrt(2.0 * math.pi)
    )
    return ops.mul(dy, ops.add(cdf, ops.mul(x, pdf)))


def softmax(x: Tensor) -> Tensor:
    shifted = ops.sub(x, _bcast_last(ops.max(x, -1, keepdims=True), x.shape))
    e = ops.exp(shifted)
    return ops.div(e, _bcast_last(ops.sum(e, -1, keepdims=True), x.shape))


def softmax_backward(dy: Tensor, y: Tensor) -> Tensor:
    dot = ops.sum(ops.mul(dy, y), -1, keepdims=True)
    return ops.mul(y, ops.sub(dy, _bcast_last(dot, y.shape)))


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    mean = ops.mean(x, -1)
    centred = ops.sub(x, _bcast_last(mean, x.shape))
    var = ops.mean(ops.mul(centred, centred), -1)
    rstd = ops.rsqrt(ops.add_scalar(var, eps))
    xhat = ops.mul(centred, _bcast_last(rstd, x.shape))
    y = ops.add(ops.mul(xhat, gamma.broadcast_to(x.shape)), beta.broadcast_to(x.shape))
    return y, mean, rstd


def layer_norm_backward(
    dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    r = _bcast_last(rstd, x.shape)
    xhat = ops.mul(ops.sub(x, _bcast_last(mean, x.shape)), r)
    lead = tuple(range(x.ndim - 1))
    dgamma = ops.sum(ops.mul(dy, xhat), lead) if lead else ops.mul(dy, xhat)
    dbeta = ops.sum(dy, lead) if lead else dy
    dxhat = ops.mul(dy, gamma.broadcast_to(x.shape))
    m1 = _bcast_last(ops.mean(dxhat, -1), x.shape)
    m2 = _bcast_last(ops.mean(ops.mul(dxhat, xhat), -1), x.shape)
    dx = ops.mul(r, ops.sub(ops.sub(dxhat, m1), ops.mul(xhat, m2)))
    return dx, dgamma, dbeta


def _one_hot(ids: Tensor, num: int, like: Tensor) -> Tensor:
    """``[N, num]`` mask in ``like.dtype`` with a 1 at each id (0 for id -1)."""
    flat = ops.cast(ids.contiguous().reshape(-1), like.dtype)  # a view may not reshape
    n = flat.shape[0]
    cols = _const(like, np.arange(num)).reshape(1, num).broadcast_to((n, num))
    return ops.compare(flat.reshape(n, 1).broadcast_to((n, num)), cols, "eq")


def embedding(table: Tensor, ids: Tensor) -> Tensor:
    v, c = table.shape
    out = ops.matmul(_one_hot(ids, v, table), table)
    return out.reshape(ids.shape + (c,))


def embedding_backward(dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
    c = dy.shape[-1]
    onehot = _one_hot(ids, num_embeddings, dy)
    return ops.matmul(onehot, dy.contiguous().reshape(-1, c), transpose_a=True)


def _lse(logits: Tensor) -> Tensor:
    m = ops.max(logits, -1, keepdims=True)
    e = ops.exp(ops.sub(logits, _bcast_last(m, logits.shape)))
    return ops.add(ops.log(ops.sum(e, -1)), m.reshape(logits.shape[:-1]))


def cross_entropy(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    n, v = logits.shape
    lse = _lse(logits)
    onehot = _one_hot(targets, v, logits)
    picked = ops.sum(ops.mul(onehot, logits), -1)
    keep = ops.sum(onehot, -1)  # 1 for a real target, 0 for an ignored (-1) one
    return ops.mul(ops.sub(lse, picked), keep), lse


def cross_entropy_backward(dloss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor) -> Tensor:
    n, v = logits.shape
    probs = ops.exp(ops.sub(logits, _bcast_last(lse, logits.shape)))
    onehot = _one_hot(targets, v, logits)
    keep = ops.sum(onehot, -1)
    scale = _bcast_last(ops.mul(dloss, keep), logits.shape)
    return ops.mul(ops.sub(probs, onehot), scale)


def _scores(q: Tensor, k: Tensor, scale: float, causal: bool) -> Tensor:
    s = ops.mul_scalar(ops.matmul(q, k, transpose_b=True), scale)
    if causal:
        t = q.shape[-2]
        masked = np.triu(np.ones((t, t), dtype=bool), 1)
        mask = _const(s, masked).broadcast_to(s.shape)
        s = ops.where(mask, full_like(s, -math.inf, (1,) * s.ndim).broadcast_to(s.shape), s)
    return s


def attention(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool) -> tuple[Tensor, Tensor]:
    probs = softmax(_scores(q, k, scale, causal))
    return ops.matmul(probs, v), probs


def attention_backward(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    dv = ops.matmul(probs, dout, transpose_a=True)
    dp = ops.matmul(dout, v, transpose_b=True)
    ds = softmax_backward(dp, probs)
    dq = ops.mul_scalar(ops.matmul(ds, k), scale)
    dk = ops.mul_scalar(ops.matmul(ds, q, transpose_a=True), scale)
    return dq, dk, dv


def flash_attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
) -> tuple[Tensor, Tensor]:
    """Composite flash: same results and ``lse`` as the fused kernel, but materialised."""
    s = _scores(q, k, scale, causal)
    lse = _lse(s)
    probs = ops.exp(ops.sub(s, _bcast_last(lse, s.shape)))
    return ops.matmul(probs, v), lse


def flash_attention_backward(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    scale: float,
    causal: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    s = _scores(q, k, scale, causal)
    probs = ops.exp(ops.sub(s, _bcast_last(lse, s.shape)))
    return attention_backward(dout, q, k, v, probs, scale)


def adam_update(
    param: Tensor, grad: Tensor, m: Tensor, v: Tensor,
    lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: int,
) -> None:  # fmt: skip
    new_m = ops.add(ops.mul_scalar(m, beta1), ops.mul_scalar(grad, 1.0 - beta1))
    new_v = ops.add(ops.mul_scalar(v, beta2), ops.mul_scalar(ops.mul(grad, grad), 1.0 - beta2))
    mhat = ops.mul_scalar(new_m, 1.0 / (1.0 - beta1**step))
    vhat = ops.mul_scalar(new_v, 1.0 / (1.0 - beta2**step))
    update = ops.div(mhat, ops.add_scalar(ops.sqrt(vhat), eps))
    update = ops.add(update, ops.mul_scalar(param, weight_decay))
    new_p = ops.sub(param, ops.mul_scalar(update, lr))
    ops.assign_(m, new_m)
    ops.assign_(v, new_v)
    ops.assign_(param, new_p)
