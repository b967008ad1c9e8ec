"""Fused operations of the CPU backend, written as the plain math they define.

Each method is the formula a textbook gives, one numpy expression per line, so the
conformance reference can be checked by eye. The flash path is a real reference of the
algorithm: it walks keys in blocks with an online softmax and never builds a ``[T, T]``
matrix, so conformance compares flash kernels with the same algorithm, not just the same
result. Sums over leading (row) axes go through :func:`pairwise_sum` (see reductions.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .reductions import pairwise_sum
from .views import view

if TYPE_CHECKING:
    from riftco.tensor import Tensor

FLASH_BLOCK = 64
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_erf = np.frompyfunc(math.erf, 1, 1)


_v = view


def erf(x: np.ndarray) -> np.ndarray:
    """Exact erf (numpy has none), in float64; fine for a reference, not for speed.

    ``x`` may be a numpy scalar (a 0-d tensor's values after arithmetic), for which the
    ufunc returns a Python float: hence ``asarray`` on both sides."""
    return np.asarray(_erf(np.asarray(x, dtype=np.float64)), dtype=np.float64)


def gelu_math(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":  # x * x * x, not x**3: numpy's power is a libm call per element
        return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_grad_math(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        t = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))
        dinner = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner
    cdf = 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return cdf + x * pdf


def softmax_math(s: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, max-subtracted. An all -inf row gives NaN (-inf - -inf)."""
    if s.shape[-1] == 0:
        return s.copy()
    # s - max may overflow to -inf (|s| near the dtype's max): exp then gives the exact 0
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - np.max(s, axis=-1, keepdims=True))
        return e / np.sum(e, axis=-1, keepdims=True)


def _causal_mask(tq: int, tk: int, q0: int = 0, k0: int = 0) -> np.ndarray:
    """True where key position > query position (masked out)."""
    return (np.arange(k0, k0 + tk)[None, :]) > (np.arange(q0, q0 + tq)[:, None])


def _leading_axes(x: np.ndarray) -> tuple[int, ...]:
    return tuple(range(x.ndim - 1))


def attention_math(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(out, probs)`` of ``[..., T, D]`` heads: ``softmax(scale q kᵀ, masked) v``."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if not causal:
        p = softmax_math(s)
        return np.matmul(p, v), p
    mask = _causal_mask(s.shape[-2], s.shape[-1])
    # masked probabilities are exactly 0, in a NaN row too (softmax alone makes them NaN)
    p = np.where(mask, 0.0, softmax_math(np.where(mask, -np.inf, s))).astype(s.dtype)
    return np.matmul(p, v), p


def attention_backward_math(
    do: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, p: np.ndarray, scale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dq, dk, dv)`` from the saved probabilities ``p`` (the mask is in them)."""
    dv = np.matmul(np.swapaxes(p, -1, -2), do)
    dp = np.matmul(do, np.swapaxes(v, -1, -2))
    ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
    dq = scale * np.matmul(ds, k)
    dk = scale * np.matmul(np.swapaxes(ds, -1, -2), q)
    return dq, dk, dv


def flash_math(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(out, lse)``: keys in blocks of FLASH_BLOCK with an online softmax, no [T, T]."""
    t = q.shape[-2]
    acc = np.zeros(q.shape, dtype=q.dtype)
    row_max = np.full(q.shape[:-1], -np.inf, dtype=q.dtype)
    row_sum = np.zeros(q.shape[:-1], dtype=q.dtype)
    for k0 in range(0, k.shape[-2], FLASH_BLOCK):
        kb, vb = k[..., k0 : k0 + FLASH_BLOCK, :], v[..., k0 : k0 + FLASH_BLOCK, :]
        s = np.matmul(q, np.swapaxes(kb, -1, -2)) * scale  # (B, H, T, block)
        if causal:
            s = np.where(_causal_mask(t, kb.shape[-2], 0, k0), -np.inf, s)
        new_max = np.maximum(row_max, np.max(s, axis=-1))
        safe = np.where(np.isneginf(new_max), 0.0, new_max)  # rows with no key yet
        p = np.exp(s - safe[..., None])
        correction = np.exp(np.where(np.isneginf(row_max), -np.inf, row_max - safe))
        row_sum = row_sum * correction + np.sum(p, axis=-1)
        acc = acc * correction[..., None] + np.matmul(p, vb)
        row_max = new_max
    with np.errstate(divide="ignore", invalid="ignore"):
        return acc / row_sum[..., None], row_max + np.log(row_sum)


def flash_backward_math(
    do: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    out: np.ndarray,
    lse: np.ndarray,
    scale: float,
    causal: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dq, dk, dv)``, rebuilding the probabilities block by block from ``lse``."""
    lv = lse[..., None]
    d = np.sum(do * out, axis=-1, keepdims=True)  # rowsum(dO * O)
    t = q.shape[-2]
    dq = np.zeros(q.shape, dtype=q.dtype)
    dk = np.zeros(k.shape, dtype=q.dtype)
    dv = np.zeros(v.shape, dtype=q.dtype)
    for k0 in range(0, k.shape[-2], FLASH_BLOCK):
        sl = slice(k0, k0 + FLASH_BLOCK)
        kb, vb = k[..., sl, :], v[..., sl, :]
        s = np.matmul(q, np.swapaxes(kb, -1, -2)) * scale
        if causal:
            s = np.where(_causal_mask(t, kb.shape[-2], 0, k0), -np.inf, s)
        p = np.exp(s - lv)  # probabilities rebuilt from the saved row statistics
        dv[..., sl, :] = np.matmul(np.swapaxes(p, -1, -2), do)
        dp = np.matmul(do, np.swapaxes(vb, -1, -2))
        ds = p * (dp - d)
        dq += scale * np.matmul(ds, kb)
        dk[..., sl, :] = scale * np.matmul(np.swapaxes(ds, -1, -2), q)
    return dq, dk, dv


def split_heads(x: np.ndarray, heads: int, blocks: int = 1) -> list[np.ndarray]:
    """The column blocks of ``x[B, T, blocks * C]`` as ``[B, H, T, D]`` arrays: block i is
    columns ``[i C, (i + 1) C)``, head h of it the D = C / heads columns from ``h D``."""
    b, t, width = x.shape
    per_head = x.reshape(b, t, blocks, heads, width // blocks // heads)
    return [per_head[:, :, i].transpose(0, 2, 1, 3) for i in range(blocks)]


def merge_heads(*xs: np.ndarray) -> np.ndarray:
    """``[B, H, T, D]`` arrays -> ``[B, T, n H D]``: each one's heads side by side, in turn."""
    b, h, t, d = xs[0].shape
    return np.concatenate([x.transpose(0, 2, 1, 3).reshape(b, t, h * d) for x in xs], axis=-1)


class FusedOps:
    """Mixin of native fused ops for :class:`CPUBackend` (``self.result`` wraps arrays)."""

    result: Any

    def gelu(self, x: Tensor, approximate: str) -> Tensor:
        return self.result(gelu_math(_v(x), approximate), x.dtype)

    def gelu_backward(self, dy: Tensor, x: Tensor, approximate: str) -> Tensor:
        return self.result(_v(dy) * gelu_grad_math(_v(x), approximate), x.dtype)

    def softmax(self, x: Tensor) -> Tensor:
        return self.result(softmax_math(_v(x)), x.dtype)

    def softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        dyv, yv = _v(dy), _v(y)
        return self.result(yv * (dyv - np.sum(dyv * yv, axis=-1, keepdims=True)), y.dtype)

    def layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        y, mean, rstd = _layer_norm_math(_v(x), _v(gamma), _v(beta), eps)
        dt = x.dtype
        return self.result(y, dt), self.result(mean, dt), self.result(rstd, dt)

    def layer_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        dx, dgamma, dbeta = _layer_norm_backward_math(_v(dy), _v(x), _v(gamma), _v(mean), _v(rstd))
        dt = x.dtype
        return self.result(dx, dt), self.result(dgamma, dt), self.result(dbeta, dt)

    def add_layer_norm(
        self, x: Tensor, r: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        with np.errstate(over="ignore", invalid="ignore"):  # IEEE sums, as ``add`` gives
            s = np.add(_v(x), _v(r))
        y, mean, rstd = _layer_norm_math(s, _v(gamma), _v(beta), eps)
        dt = x.dtype
        return self.result(s, dt), self.result(y, dt), self.result(mean, dt), self.result(rstd, dt)

    def add_layer_norm_backward(
        self, dy: Tensor, ds: Tensor, s: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        dx, dgamma, dbeta = _layer_norm_backward_math(_v(dy), _v(s), _v(gamma), _v(mean), _v(rstd))
        dt = s.dtype
        with np.errstate(over="ignore", invalid="ignore"):
            dsum = np.add(_v(ds), dx.astype(dt, copy=False))  # dx rounded first, as unfused
        return self.result(dsum, dt), self.result(dgamma, dt), self.result(dbeta, dt)

    def rms_norm(self, x: Tensor, gamma: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        xv = _v(x)
        rstd = 1.0 / np.sqrt(np.mean(xv * xv, axis=-1) + eps)
        return self.result(xv * rstd[..., None] * _v(gamma), x.dtype), self.result(rstd, x.dtype)

    def rms_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor]:
        dyv, r = _v(dy), _v(rstd)[..., None]
        xhat = _v(x) * r
        g = dyv * _v(gamma)
        dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
        dgamma = pairwise_sum(dyv * xhat, _leading_axes(xhat))
        return self.result(dx, x.dtype), self.result(dgamma, x.dtype)

    def embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        return self.result(_v(table)[_v(ids)], table.dtype)

    def embedding_backward(self, dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
        c = dy.shape[-1]
        # np.add.at applies updates in index order: deterministic, repeated ids accumulate.
        # A frequent id gathers up to B*T rows one by one, so float32 rows are added in
        # float64 and rounded once (the result keeps dy's dtype).
        out = np.zeros((num_embeddings, c), dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # IEEE: inf + -inf = NaN
            np.add.at(out, _v(ids).reshape(-1), _v(dy).reshape(ids.size, c))
        return self.result(out, dy.dtype)

    def linear(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        return self.result(_v(x) @ _v(weight) + _v(bias), x.dtype)

    def linear_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        return self._linear_grads(_v(dy), x, weight)

    def _linear_grads(
        self, g: np.ndarray, x: Tensor, weight: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        dt = x.dtype
        dbias = pairwise_sum(g, (0,))  # a long column of rows: pairwise, like sum
        return (
            self.result(g @ _v(weight).T, dt),
            self.result(_v(x).T @ g, dt),
            self.result(dbias, dt),
        )

    def linear_gelu(
        self, x: Tensor, weight: Tensor, bias: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor]:
        """``linear`` then ``gelu``'s math: the reference's bits for the unfused layer."""
        h = _v(x) @ _v(weight) + _v(bias)
        return self.result(gelu_math(h, approximate), x.dtype), self.result(h, x.dtype)

    def linear_gelu_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor, h: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor, Tensor]:
        g = np.asarray(_v(dy) * gelu_grad_math(_v(h), approximate), x.dtype)
        return self._linear_grads(g, x, weight)

    def cross_entropy(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        lv, t = _v(logits), _v(targets)
        m = np.max(lv, axis=-1, keepdims=True)
        with np.errstate(over="ignore"):  # lv - m -> -inf is fine: exp gives 0
            lse = (m + np.log(np.sum(np.exp(lv - m), axis=-1, keepdims=True)))[:, 0]
        picked = lv[np.arange(lv.shape[0]), np.where(t < 0, 0, t)]
        loss = np.where(t < 0, 0.0, lse - picked)  # target -1: an ignored row
        return self.result(loss, logits.dtype), self.result(lse, logits.dtype)

    def cross_entropy_backward(
        self, dloss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
    ) -> Tensor:
        lv, t = _v(logits), _v(targets)
        keep = t >= 0
        onehot = np.zeros_like(lv)
        onehot[np.arange(lv.shape[0])[keep], t[keep]] = 1.0
        g = (np.exp(lv - _v(lse)[:, None]) - onehot) * (_v(dloss) * keep)[:, None]
        return self.result(g, logits.dtype)

    # -- attention -----------------------------------------------------------------------
    def attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        out, p = attention_math(_v(q), _v(k), _v(v), scale, causal)
        return self.result(out, q.dtype), self.result(p, q.dtype)

    def attention_backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        dq, dk, dv = attention_backward_math(_v(dout), _v(q), _v(k), _v(v), _v(probs), scale)
        dt = q.dtype
        return self.result(dq, dt), self.result(dk, dt), self.result(dv, dt)

    def flash_attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        out, lse = flash_math(_v(q), _v(k), _v(v), scale, causal)
        return self.result(out, q.dtype), self.result(lse, q.dtype)

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
        args = (_v(dout), _v(q), _v(k), _v(v), _v(out), _v(lse))
        dq, dk, dv = flash_backward_math(*args, scale, causal)
        dt = q.dtype
        return self.result(dq, dt), self.result(dk, dt), self.result(dv, dt)

    # -- attention on a fused q | k | v projection ----------------------------------------
    def attention_qkv(
        self, qkv: Tensor, heads: int, scale: float, causal: bool, flash: bool
    ) -> tuple[Tensor, Tensor]:
        q, k, v = split_heads(_v(qkv), heads, 3)
        out, stat = (flash_math if flash else attention_math)(q, k, v, scale, causal)
        return self.result(merge_heads(out), qkv.dtype), self.result(stat, qkv.dtype)

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
        q, k, v = split_heads(_v(qkv), heads, 3)
        (do,) = split_heads(_v(dout), heads)
        if flash:
            (o,) = split_heads(_v(out), heads)
            grads = flash_backward_math(do, q, k, v, o, _v(stat), scale, causal)
        else:
            grads = attention_backward_math(do, q, k, v, _v(stat), scale)
        return self.result(merge_heads(*grads), qkv.dtype)


def _layer_norm_math(
    xv: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(y, mean, rstd)`` of LayerNorm; shared by ``layer_norm`` and ``add_layer_norm`` so
    the fused op gives the unfused pair's bits."""
    mean = np.mean(xv, axis=-1)
    var = np.mean((xv - mean[..., None]) ** 2, axis=-1)  # biased variance
    rstd = 1.0 / np.sqrt(var + eps)
    y = (xv - mean[..., None]) * rstd[..., None] * gamma + beta
    return y, mean, rstd


def _layer_norm_backward_math(
    dyv: np.ndarray, xv: np.ndarray, gamma: np.ndarray, mean: np.ndarray, rstd: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dx, dgamma, dbeta)`` of LayerNorm from saved statistics (shared like the forward)."""
    r = rstd[..., None]
    xhat = (xv - mean[..., None]) * r
    dgamma = pairwise_sum(dyv * xhat, _leading_axes(xv))
    dbeta = pairwise_sum(dyv, _leading_axes(xv))
    dxhat = dyv * gamma
    dx = r * (
        dxhat
        - np.mean(dxhat, axis=-1, keepdims=True)
        - xhat * np.mean(dxhat * xhat, axis=-1, keepdims=True)
    )
    return dx, dgamma, dbeta
