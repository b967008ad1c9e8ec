"""Fused operations of the CPU backend, written as the plain math they define.

The flash path is a real reference of the algorithm: it walks keys in blocks with an
online softmax and never builds a ``[T, T]`` matrix, so conformance compares GPU flash
kernels with the same algorithm, not just the same result.

Each formula is evaluated in place on the op's own fresh temporaries (never on an input):
on a training step's (1024, 512) activations, every extra numpy temporary is a pass over
2 MB and an allocation, and the straightforward expressions made 10 of them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from riftco.tensor import Tensor

FLASH_BLOCK = 64
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_erf = np.frompyfunc(math.erf, 1, 1)


def _v(x: Tensor) -> np.ndarray:
    from .backend import view

    return view(x)


def erf(x: np.ndarray) -> np.ndarray:
    """Exact erf (numpy has none); fine for a reference, not for speed."""
    return _erf(x.astype(np.float64)).astype(np.float64)


def gelu_math(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        y = x * x  # 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi)
        y *= 0.044715
        y += 1.0
        y *= x
        y *= _SQRT_2_OVER_PI
        np.tanh(y, out=y)
        y += 1.0
        y *= x
        y *= 0.5
        return y
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_grad_math(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        # 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2), t = tanh(k (x + 0.044715 x^3))
        x2 = x * x
        t = x2 * 0.044715
        t += 1.0
        t *= x
        t *= _SQRT_2_OVER_PI
        np.tanh(t, out=t)
        x2 *= 3 * 0.044715 * _SQRT_2_OVER_PI  # x2 becomes k (1 + 3 * 0.044715 x^2)
        x2 += _SQRT_2_OVER_PI
        x2 *= x
        x2 *= 0.5
        u = t * t
        np.subtract(1.0, u, out=u)
        u *= x2
        t += 1.0
        t *= 0.5
        t += u
        return t
    cdf = 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return cdf + x * pdf


def _causal_mask(tq: int, tk: int, q0: int = 0, k0: int = 0) -> np.ndarray:
    """True where key position > query position (masked out)."""
    return (np.arange(k0, k0 + tk)[None, :]) > (np.arange(q0, q0 + tq)[:, None])


class FusedOps:
    """Mixin of native fused ops for :class:`CPUBackend` (``self.result`` wraps arrays)."""

    result: Any

    def gelu(self, x: Tensor, approximate: str) -> Tensor:
        return self.result(gelu_math(_v(x), approximate), x.dtype)

    def gelu_backward(self, dy: Tensor, x: Tensor, approximate: str) -> Tensor:
        g = gelu_grad_math(_v(x), approximate)
        g *= _v(dy)
        return self.result(g, x.dtype)

    def softmax(self, x: Tensor) -> Tensor:
        xv = _v(x)
        # x - max may overflow to -inf (|x| near the dtype's max): exp then gives the exact 0
        with np.errstate(invalid="ignore", over="ignore"):
            e = np.exp(xv - np.max(xv, axis=-1, keepdims=True))
            return self.result(e / np.sum(e, axis=-1, keepdims=True), x.dtype)

    def softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        dyv, yv = _v(dy), _v(y)
        return self.result(yv * (dyv - np.sum(dyv * yv, axis=-1, keepdims=True)), y.dtype)

    def layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        xv = _v(x)
        c = xv.shape[-1]
        mean = np.add.reduce(xv, axis=-1) / c
        xc = xv - mean[..., None]
        y = xc * xc
        var = np.add.reduce(y, axis=-1) / c  # biased variance
        rstd = 1.0 / np.sqrt(var + eps)
        np.multiply(xc, rstd[..., None], out=y)  # (x - mean) * rstd * gamma + beta
        y *= _v(gamma)
        y += _v(beta)
        dt = x.dtype
        return self.result(y, dt), self.result(mean, dt), self.result(rstd, dt)

    def layer_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        xv, dyv, g = _v(x), _v(dy), _v(gamma)
        r = _v(rstd)[..., None]
        c = xv.shape[-1]
        xhat = xv - _v(mean)[..., None]
        xhat *= r
        lead = tuple(range(xv.ndim - 1))
        tmp = dyv * xhat
        dgamma = np.add.reduce(tmp, axis=lead)
        dbeta = np.add.reduce(dyv, axis=lead)
        dxhat = dyv * g
        # dx = r * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
        np.multiply(dxhat, xhat, out=tmp)
        xhat *= np.add.reduce(tmp, axis=-1, keepdims=True) / c
        dxhat -= np.add.reduce(dxhat, axis=-1, keepdims=True) / c
        dxhat -= xhat
        dxhat *= r
        dt = x.dtype
        return self.result(dxhat, dt), self.result(dgamma, dt), self.result(dbeta, dt)

    def embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        return self.result(_v(table)[_v(ids)], table.dtype)

    def embedding_backward(self, dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
        c = dy.shape[-1]
        flat = _v(ids).reshape(-1)
        rows = _v(dy).reshape(-1, c)
        out = np.zeros((num_embeddings, c), dtype=dy.dtype)
        if flat.size:
            # Scatter-add as a stable sort plus one segmented sum per id: a fixed summation
            # order, so the same bits on every run (no threads, no atomics), at a sixth
            # of np.add.at's per-element cost.
            order = np.argsort(flat, kind="stable")
            sorted_ids = flat[order]
            starts = np.flatnonzero(np.diff(sorted_ids, prepend=sorted_ids[0] - 1))
            out[sorted_ids[starts]] = np.add.reduceat(rows[order], starts, axis=0)
        return self.result(out)

    def cross_entropy(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        lv, t = _v(logits), _v(targets)
        m = np.max(lv, axis=-1, keepdims=True)
        with np.errstate(over="ignore"):  # lv - m -> -inf is fine: exp gives 0
            lse = (m + np.log(np.sum(np.exp(lv - m), axis=-1, keepdims=True)))[:, 0]
        picked = lv[np.arange(lv.shape[0]), np.where(t < 0, 0, t)]
        loss = np.where(t < 0, 0.0, lse - picked)
        return self.result(loss, logits.dtype), self.result(lse, logits.dtype)

    def cross_entropy_backward(
        self, dloss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
    ) -> Tensor:
        lv, t = _v(logits), _v(targets)
        g = np.exp(lv - _v(lse)[:, None])
        rows = np.arange(lv.shape[0])
        keep = t >= 0
        g[rows[keep], t[keep]] -= 1.0
        g *= (_v(dloss) * keep)[:, None]
        return self.result(g, logits.dtype)

    # -- attention -----------------------------------------------------------------------
    def attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        s = np.matmul(_v(q), np.swapaxes(_v(k), -1, -2))
        s *= scale
        if causal:
            np.copyto(s, -np.inf, where=_causal_mask(s.shape[-2], s.shape[-1]))
        s -= np.maximum.reduce(s, axis=-1, keepdims=True)
        p = np.exp(s, out=s)
        p /= np.add.reduce(p, axis=-1, keepdims=True)
        out = np.matmul(p, _v(v))
        return self.result(out, q.dtype), self.result(p, q.dtype)

    def attention_backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        do, p = _v(dout), _v(probs)
        dv = np.matmul(np.swapaxes(p, -1, -2), do)
        dp = np.matmul(do, np.swapaxes(_v(v), -1, -2))
        ds = dp * p  # dS = P * (dP - rowsum(dP * P)), then scaled once for dQ and dK
        dp -= np.add.reduce(ds, axis=-1, keepdims=True)
        np.multiply(dp, p, out=ds)
        ds *= scale
        dq = np.matmul(ds, _v(k))
        dk = np.matmul(np.swapaxes(ds, -1, -2), _v(q))
        dt = q.dtype
        return self.result(dq, dt), self.result(dk, dt), self.result(dv, dt)

    def flash_attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        qv, kv, vv = _v(q), _v(k), _v(v)
        t = qv.shape[-2]
        tk = kv.shape[-2]
        acc = np.zeros(qv.shape, dtype=qv.dtype)
        row_max = np.full(qv.shape[:-1], -np.inf, dtype=qv.dtype)
        row_sum = np.zeros(qv.shape[:-1], dtype=qv.dtype)
        for k0 in range(0, tk, FLASH_BLOCK):
            # Causal: queries before k0 see no key of this block, so only rows q0: take part.
            q0 = k0 if causal else 0
            if q0 >= t:
                break
            kb, vb = kv[..., k0 : k0 + FLASH_BLOCK, :], vv[..., k0 : k0 + FLASH_BLOCK, :]
            s = np.matmul(qv[..., q0:, :], np.swapaxes(kb, -1, -2))  # (B, H, T - q0, block)
            s *= scale
            if causal:
                np.copyto(s, -np.inf, where=_causal_mask(t - q0, kb.shape[-2], q0, k0))
            old_max = row_max[..., q0:]
            new_max = np.maximum(old_max, np.maximum.reduce(s, axis=-1))
            safe = np.where(np.isneginf(new_max), 0.0, new_max)
            s -= safe[..., None]
            p = np.exp(s, out=s)
            correction = np.exp(np.where(np.isneginf(old_max), -np.inf, old_max - safe))
            row_sum[..., q0:] = row_sum[..., q0:] * correction + np.add.reduce(p, axis=-1)
            a = acc[..., q0:, :]
            a *= correction[..., None]
            a += np.matmul(p, vb)
            row_max[..., q0:] = new_max
        with np.errstate(divide="ignore", invalid="ignore"):
            acc /= row_sum[..., None]
            lse = row_max + np.log(row_sum)
        return self.result(acc, q.dtype), self.result(lse, q.dtype)

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
        qv, kv, vv, do = _v(q), _v(k), _v(v), _v(dout)
        lv = _v(lse)[..., None]
        d = np.add.reduce(do * _v(out), axis=-1, keepdims=True)  # rowsum(dO * O)
        t = qv.shape[-2]
        dq = np.zeros(qv.shape, dtype=qv.dtype)
        dk = np.zeros(kv.shape, dtype=qv.dtype)
        dv = np.zeros(vv.shape, dtype=qv.dtype)
        for k0 in range(0, kv.shape[-2], FLASH_BLOCK):
            q0 = k0 if causal else 0  # earlier queries get no gradient through this block
            if q0 >= t:
                break
            sl = slice(k0, k0 + FLASH_BLOCK)
            kb, vb = kv[..., sl, :], vv[..., sl, :]
            qs, dos = qv[..., q0:, :], do[..., q0:, :]
            s = np.matmul(qs, np.swapaxes(kb, -1, -2))
            s *= scale
            if causal:
                np.copyto(s, -np.inf, where=_causal_mask(t - q0, kb.shape[-2], q0, k0))
            s -= lv[..., q0:, :]
            p = np.exp(s, out=s)  # probabilities rebuilt from the saved row statistics
            dv[..., sl, :] = np.matmul(np.swapaxes(p, -1, -2), dos)
            ds = np.matmul(dos, np.swapaxes(vb, -1, -2))  # dP, then dS = P * (dP - D)
            ds -= d[..., q0:, :]
            ds *= p
            ds *= scale
            dq[..., q0:, :] += np.matmul(ds, kb)
            dk[..., sl, :] = np.matmul(np.swapaxes(ds, -1, -2), qs)
        dt = q.dtype
        return self.result(dq, dt), self.result(dk, dt), self.result(dv, dt)

    def adam_update(
        self,
        param: Tensor,
        grad: Tensor,
        m: Tensor,
        v: Tensor,
        lr: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        step: int,
    ) -> None:
        p = param.storage.buffer[param.offset : param.offset + param.size]
        mb = m.storage.buffer[m.offset : m.offset + m.size]
        vb = v.storage.buffer[v.offset : v.offset + v.size]
        g = _v(grad).reshape(-1)
        tmp = g * (1.0 - beta1)  # m = b1 m + (1 - b1) g
        mb *= beta1
        mb += tmp
        np.multiply(g, g, out=tmp)  # v = b2 v + (1 - b2) g^2
        tmp *= 1.0 - beta2
        vb *= beta2
        vb += tmp
        # p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p), mhat = m / bc1, vhat = v / bc2
        bc1, bc2 = 1.0 - beta1**step, 1.0 - beta2**step
        np.divide(vb, bc2, out=tmp)
        np.sqrt(tmp, out=tmp)
        tmp += eps
        np.divide(mb, tmp, out=tmp)
        tmp *= lr / bc1
        if weight_decay:
            tmp += (lr * weight_decay) * p
        p -= tmp
