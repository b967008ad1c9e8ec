"""Deliberately broken backends: one plausible kernel-author bug each.

Each class is the CPU reference with one method replaced by a version that makes a mistake
real kernels make (wrong dtype, writing an input, ignoring an offset, no max subtraction,
a forgotten rescale, NaN swallowed, ...). ``MUTANTS`` maps each to the op the conformance
suite must blame. ``test_conformance_mutants.py`` runs the suite on every one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from riftco.backends.cpu.backend import CPUBackend, view
from riftco.backends.cpu.fused import (
    _layer_norm_math,
    attention_math,
    flash_math,
    gelu_grad_math,
    gelu_math,
    merge_heads,
)
from riftco.tensor import Tensor


def _flat(x: Tensor) -> np.ndarray:
    """The buffer reshaped as if the view started at 0: the "contiguous fast path" bug."""
    buf = x.storage.buffer
    return buf[: x.size].reshape(x.shape)


class Base(CPUBackend):
    name = "mutant"


# -- primitives ------------------------------------------------------------------------------
class AddReturnsFloat64(Base):
    def add(self, a: Tensor, b: Tensor) -> Tensor:
        return self.result(view(a).astype(np.float64) + view(b))


class MulWritesItsInput(Base):
    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        out = view(a) * view(b)
        a.storage.buffer[a.offset : a.offset + min(a.size, 1)] = 0.0  # scratch reuse
        return self.result(out)


class ExpIgnoresOffset(Base):
    def exp(self, x: Tensor) -> Tensor:
        if x.is_contiguous:
            return self.result(np.exp(_flat(x)))
        return super().exp(x)


class TanhClampSwallowsNaN(Base):
    def tanh(self, x: Tensor) -> Tensor:
        v = view(x)
        return self.result(np.tanh(np.clip(np.nan_to_num(v, nan=-20.0), -20, 20)).astype(v.dtype))


class RsqrtGuardsZero(Base):
    def rsqrt(self, x: Tensor) -> Tensor:
        v = view(x)
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.result(np.where(v == 0, 0.0, 1.0 / np.sqrt(v)).astype(v.dtype))


class LogClampsDomain(Base):
    def log(self, x: Tensor) -> Tensor:
        v = view(x)
        return self.result(np.log(np.maximum(v, np.finfo(v.dtype).tiny)))


class SubSwapsOperands(Base):
    def sub(self, a: Tensor, b: Tensor) -> Tensor:
        return self.result(view(b) - view(a))


class DivByZeroGivesZero(Base):
    def div(self, a: Tensor, b: Tensor) -> Tensor:
        bv = view(b)
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.result(np.where(bv == 0, 0.0, view(a) / bv).astype(bv.dtype))


class MaximumIsFmax(Base):
    def maximum(self, a: Tensor, b: Tensor) -> Tensor:
        return self.result(np.fmax(view(a), view(b)))


class PowViaExpLog(Base):
    def pow_scalar(self, x: Tensor, value: float) -> Tensor:
        v = view(x)
        with np.errstate(all="ignore"):
            return self.result(np.exp(value * np.log(v)).astype(v.dtype))


class CompareLeIsLt(Base):
    def compare(self, a: Tensor, b: Tensor, op: str) -> Tensor:
        return super().compare(a, b, "lt" if op == "le" else op)


class WherePositiveOnly(Base):
    def where(self, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
        return self.result(np.where(view(cond) > 0, view(a), view(b)), a.dtype)


class CastRoundsToNearest(Base):
    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        if np.dtype(dtype).kind == "i" and x.dtype.kind == "f":
            v = np.nan_to_num(view(x), nan=0.0, posinf=0.0, neginf=0.0)
            return self.result(np.clip(np.rint(v), -1e9, 1e9).astype(dtype))
        return super().cast(x, dtype)


class SumIgnoresKeepdims(Base):
    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        return super().sum(x, axes, False)


class SumInFloat16(Base):
    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        v = view(x)
        with np.errstate(over="ignore"):
            out = np.sum(v.astype(np.float16), axis=axes, keepdims=keepdims)
        return self.result(out.astype(v.dtype))


class MaxDropsNaN(Base):
    def max(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        return self.result(np.fmax.reduce(view(x), axis=axes, keepdims=keepdims), x.dtype)


class ArgmaxLastTie(Base):
    def argmax(self, x: Tensor) -> Tensor:
        v = view(x)[..., ::-1]
        return self.result(v.shape[-1] - 1 - np.argmax(v, axis=-1), np.int32)


class MatmulIgnoresTransposeB(Base):
    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        bv = view(b)
        if transpose_b:  # right shape, wrong values: reinterpret, no transpose
            bv = np.ascontiguousarray(bv).reshape(bv.shape[:-2] + (bv.shape[-1], bv.shape[-2]))
        av = np.swapaxes(view(a), -1, -2) if transpose_a else view(a)
        return self.result(av @ bv)


class MatmulFirstBatchOnly(Base):
    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        out = view(super().matmul(a, b, transpose_a, transpose_b))
        if out.ndim > 2 and out.shape[0] > 1:
            out = np.broadcast_to(out[:1], out.shape).copy()
        return self.result(out)


class ConcatenateReturnsItsInput(Base):
    def concatenate_last_axis(self, xs: Any) -> Tensor:
        return xs[0] if len(xs) == 1 else super().concatenate_last_axis(xs)


class SplitReturnsViews(Base):
    def split_last_axis(self, x: Tensor, sizes: Any) -> list[Tensor]:
        out, start = [], 0
        for s in sizes:
            out.append(x[..., start : start + s])
            start += s
        return out


class CopyStridedIgnoresBroadcast(Base):
    def copy_strided(self, x: Tensor) -> Tensor:
        if 0 in x.strides and x.size:
            return self.result(_flat(x))
        return super().copy_strided(x)


class ToNumpyIgnoresStrides(Base):
    def to_numpy(self, x: Tensor) -> np.ndarray:
        if x.size and not x.is_dense:
            return np.array(x.storage.buffer[x.offset : x.offset + x.size]).reshape(x.shape)
        return super().to_numpy(x)


class FillTurnsNaNIntoZero(Base):
    def fill(self, x: Tensor, value: float) -> None:
        super().fill(x, 0.0 if math.isnan(value) else value)


# -- fused -----------------------------------------------------------------------------------
class GeluNaiveTanh(Base):
    def gelu(self, x: Tensor, approximate: str) -> Tensor:
        if approximate != "tanh":
            return super().gelu(x, approximate)
        v = view(x)
        u = math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)
        with np.errstate(all="ignore"):
            e = np.exp(2 * u)
            return self.result((0.5 * v * (1 + (e - 1) / (e + 1))).astype(v.dtype))


class GeluBackwardWrongForm(Base):
    def gelu_backward(self, dy: Tensor, x: Tensor, approximate: str) -> Tensor:
        v = view(x)
        return self.result((view(dy) * gelu_grad_math(v, "none")).astype(v.dtype))


class SoftmaxWithoutMaxSubtraction(Base):
    def softmax(self, x: Tensor) -> Tensor:
        v = view(x)
        with np.errstate(all="ignore"):
            e = np.exp(v)
            return self.result(e / e.sum(axis=-1, keepdims=True), x.dtype)


class SoftmaxBackwardMissingRowSum(Base):
    def softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        return self.result(view(dy) * view(y), y.dtype)


class LayerNormNaiveVariance(Base):
    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> Any:
        v = view(x)
        mean = v.mean(axis=-1)
        var = (v * v).mean(axis=-1) - mean * mean  # E[x^2] - E[x]^2 cancels catastrophically
        rstd = 1 / np.sqrt(np.maximum(var, 0) + eps)
        y = (v - mean[..., None]) * rstd[..., None] * view(gamma) + view(beta)
        return tuple(self.result(a, x.dtype) for a in (y, mean, rstd))


class LayerNormReturnsVariance(Base):
    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> Any:
        y, mean, rstd = super().layer_norm(x, gamma, beta, eps)
        return y, mean, self.result(1.0 / view(rstd) ** 2 - eps, x.dtype)


class LayerNormBackwardDgammaOff(Base):
    def layer_norm_backward(self, *args: Any) -> Any:
        dx, dgamma, dbeta = super().layer_norm_backward(*args)
        return dx, self.result(view(dgamma) * 1.01), dbeta


class RMSNormIgnoresEps(Base):
    def rms_norm(self, x: Tensor, gamma: Tensor, eps: float) -> Any:
        return super().rms_norm(x, gamma, 1e-30)  # eps "only guards a zero row"


class RMSNormBackwardDropsLastChunk(Base):
    """dgamma from whole 64-row chunks only: the rows past the last full chunk are lost."""

    def rms_norm_backward(self, dy: Tensor, x: Tensor, gamma: Tensor, rstd: Tensor) -> Any:
        dx, dgamma = super().rms_norm_backward(dy, x, gamma, rstd)
        c = x.shape[-1]
        rows = x.size // c if c else 0
        kept = rows // 64 * 64
        if kept == rows:
            return dx, dgamma
        dyv = np.ascontiguousarray(view(dy)).reshape(rows, c)[kept:]
        xv = np.ascontiguousarray(view(x)).reshape(rows, c)[kept:]
        rv = np.ascontiguousarray(view(rstd)).reshape(rows)[kept:, None]
        return dx, self.result(view(dgamma) - (dyv * xv * rv).sum(axis=0), x.dtype)


class EmbeddingIgnoresTableStrides(Base):
    def embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        return self.result(_flat(table)[view(ids)], table.dtype)


class EmbeddingBackwardLastWriteWins(Base):
    def embedding_backward(self, dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
        c = dy.shape[-1]
        out = np.zeros((num_embeddings, c), dtype=dy.dtype)
        out[view(ids).reshape(-1)] = view(dy).reshape(ids.size, c)
        return self.result(out)


class EmbeddingBackwardNondeterministic(Base):
    """Accumulates repeated ids in a different order on every call (float atomics)."""

    calls = 0

    def embedding_backward(self, dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
        c = dy.shape[-1]
        flat, rows = view(ids).reshape(-1), view(dy).reshape(ids.size, c)
        type(self).calls += 1
        order = np.random.default_rng(type(self).calls).permutation(flat.size)
        out = np.zeros((num_embeddings, c), dtype=dy.dtype)
        for i in order:
            out[flat[i]] += rows[i]
        return self.result(out)


class CrossEntropyIgnoredRowsCount(Base):
    """Reads target -1 as the last class (Python indexing) instead of ignoring the row."""

    def cross_entropy(self, logits: Tensor, targets: Tensor) -> Any:
        lv, t = view(logits), view(targets)
        m = lv.max(axis=-1, keepdims=True)
        lse = (m + np.log(np.exp(lv - m).sum(axis=-1, keepdims=True)))[:, 0]
        loss = lse - lv[np.arange(lv.shape[0]), t]
        return self.result(loss, logits.dtype), self.result(lse, logits.dtype)


class CrossEntropyNoMaxSubtraction(Base):
    def cross_entropy(self, logits: Tensor, targets: Tensor) -> Any:
        lv, t = view(logits), view(targets)
        with np.errstate(all="ignore"):
            lse = np.log(np.exp(lv).sum(axis=-1))
        loss = np.where(t < 0, 0.0, lse - lv[np.arange(lv.shape[0]), np.maximum(t, 0)])
        return self.result(loss, logits.dtype), self.result(lse, logits.dtype)


class CrossEntropyBackwardUnscaled(Base):
    def cross_entropy_backward(
        self, dloss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
    ) -> Tensor:
        ones = self.from_numpy(np.ones(dloss.shape, dloss.dtype))
        return super().cross_entropy_backward(ones, logits, targets, lse)


class AttentionMasksDiagonal(Base):
    """Causal mask off by one: masks key j >= i (the diagonal too) instead of j > i."""

    def attention(self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool) -> Any:
        s = scale * view(q) @ np.swapaxes(view(k), -1, -2)
        if causal and s.size:
            t = s.shape[-1]
            masked = np.triu(np.ones((t, t), bool), 0)
            masked[0, 0] = False  # row 0 keeps its one key (else it would be NaN)
            s = np.where(masked, -np.inf, s)
        with np.errstate(all="ignore"):
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
        return self.result(p @ view(v), q.dtype), self.result(p, q.dtype)


class AttentionBackwardDkUnscaled(Base):
    def attention_backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
    ) -> Any:
        dq, dk, dv = super().attention_backward(dout, q, k, v, probs, scale)
        return dq, self.result(view(dk) / scale), dv


class FlashForgetsRescale(Base):
    """Online softmax over 64-key tiles that never rescales earlier tiles' partial sums."""

    def flash_attention(self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool) -> Any:
        qv, kv, vv = view(q), view(k), view(v)
        t = qv.shape[-2]
        acc = np.zeros(qv.shape)
        total = np.zeros(qv.shape[:-1])
        row_max = np.full(qv.shape[:-1], -np.inf)
        for k0 in range(0, t, 64):
            s = scale * qv @ np.swapaxes(kv[..., k0 : k0 + 64, :], -1, -2)
            if causal:
                keys = np.arange(k0, k0 + s.shape[-1])
                s = np.where(keys[None, :] > np.arange(t)[:, None], -np.inf, s)
            with np.errstate(all="ignore"):
                row_max = np.maximum(row_max, s.max(axis=-1))
                p = np.exp(s - row_max[..., None])
            p = np.nan_to_num(p)
            total += p.sum(axis=-1)  # BUG: earlier tiles are not multiplied by exp(old - new)
            acc += p @ vv[..., k0 : k0 + 64, :]
        with np.errstate(all="ignore"):
            out, lse = acc / total[..., None], row_max + np.log(total)
        return self.result(out, q.dtype), self.result(lse, q.dtype)


class FlashBackwardDqDoubled(Base):
    def flash_attention_backward(self, *args: Any) -> Any:
        dq, dk, dv = super().flash_attention_backward(*args)
        return self.result(2 * view(dq)), dk, dv


class AdamWithoutBiasCorrection(Base):
    def adam_update(
        self, param: Tensor, grad: Tensor, m: Tensor, v: Tensor, lr: float,
        beta1: float, beta2: float, eps: float, weight_decay: float, step: int,
    ) -> None:  # fmt: skip
        p, mb, vb = (t.storage.buffer[: t.size] for t in (param, m, v))
        g = view(grad).reshape(-1)
        mb[:] = beta1 * mb + (1 - beta1) * g
        vb[:] = beta2 * vb + (1 - beta2) * g * g
        p -= lr * (mb / (np.sqrt(vb) + eps) + weight_decay * p)  # BUG: no 1 - beta^step


class AdamL2InsteadOfDecoupled(Base):
    def adam_update(
        self, param: Tensor, grad: Tensor, m: Tensor, v: Tensor, lr: float,
        beta1: float, beta2: float, eps: float, weight_decay: float, step: int,
    ) -> None:  # fmt: skip
        g = self.from_numpy(view(grad) + weight_decay * view(param))
        super().adam_update(param, g, m, v, lr, beta1, beta2, eps, 0.0, step)


class AdamMultiClipsMomentOnly(Base):
    """The clip scale reaches the first moment but not the second (the update then moves
    by ``s m / sqrt(v)`` instead of ``s m / (s sqrt(v))``): right whenever nothing clips."""

    def adam_update_multi(self, params: Any, grads: Any, ms: Any, vs: Any, *hyper: Any) -> None:
        *adam, norm, max_norm = hyper
        if norm is None:
            return super().adam_update_multi(params, grads, ms, vs, *hyper)
        lr, b1, b2, eps, wd, step = adam
        s = max_norm / max(float(view(norm)) + 1e-6, max_norm)
        for p, g, m, v in zip(params, grads, ms, vs, strict=True):
            pb, mb, vb = (t.storage.buffer[: t.size] for t in (p, m, v))
            gv = view(g).reshape(-1)
            mb[:] = b1 * mb + (1 - b1) * (s * gv)
            vb[:] = b2 * vb + (1 - b2) * gv * gv  # BUG: the unscaled gradient
            pb -= lr * (mb / (1 - b1**step) / (np.sqrt(vb / (1 - b2**step)) + eps) + wd * pb)


class AdamMultiSkipsLastTensor(Base):
    """A loop bound off by one: the last parameter keeps its value and moments."""

    def adam_update_multi(self, params: Any, grads: Any, ms: Any, vs: Any, *hyper: Any) -> None:
        if len(params) > 1:
            params, grads, ms, vs = params[:-1], grads[:-1], ms[:-1], vs[:-1]
        super().adam_update_multi(params, grads, ms, vs, *hyper)


class AdamMultiNaNNormMeansNoClip(Base):
    """A "robust" clip that treats a NaN norm as no clipping (NaN > max_norm is false)."""

    def adam_update_multi(self, params: Any, grads: Any, ms: Any, vs: Any, *hyper: Any) -> None:
        *adam, norm, max_norm = hyper
        if norm is not None and math.isnan(float(view(norm))):
            norm = None
        super().adam_update_multi(params, grads, ms, vs, *adam, norm, max_norm)


class AddLayerNormStatsOfX(Base):
    """Normalises ``x`` instead of the sum (a kernel that reads the wrong buffer in its
    statistics pass); ``s`` itself is right."""

    def add_layer_norm(self, x: Tensor, r: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> Any:
        s = self.add(x, r)
        return (s, *self.layer_norm(x, gamma, beta, eps))


class AddLayerNormBackwardDropsStream(Base):
    """Returns the LayerNorm's dx alone: the residual stream's gradient ``ds`` is lost."""

    def add_layer_norm_backward(self, dy: Tensor, ds: Tensor, *rest: Any) -> Any:
        return self.layer_norm_backward(dy, *rest)


class LinearBiasOnFirstRowOnly(Base):
    """An epilogue that adds the bias to row 0 only (a loop bound from a 1-row test)."""

    def linear(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        y = view(x) @ view(weight)
        if y.shape[0]:
            y[0] += view(bias)
        return self.result(y, x.dtype)


class LinearPacksWeightOnce(Base):
    """Packs the weight on the first call of each weight layout and reuses the pack after
    (a GEMM backend assuming weights never change between calls, where a training step
    updates them in place every step). Right on any single call: only a later call with a
    weight of the same layout and other values shows it."""

    def linear(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        packs: dict[Any, np.ndarray] = self.__dict__.setdefault("_packs", {})
        key = (weight.shape, weight.strides, weight.offset, weight.dtype)
        packed = packs.setdefault(key, np.array(view(weight)))
        return self.result(view(x) @ packed + view(bias), x.dtype)


class LinearBackwardBiasGradIsMean(Base):
    def linear_backward(self, dy: Tensor, x: Tensor, weight: Tensor) -> Any:
        g = view(dy)
        db = g.mean(axis=0) if g.shape[0] else np.zeros(g.shape[1], g.dtype)
        return (self.result(g @ view(weight).T), self.result(view(x).T @ g),
                self.result(db.astype(g.dtype)))  # fmt: skip


class LinearGeluSavesActivation(Base):
    """Saves gelu(h) instead of h for the backward (the epilogue overwrote its tile)."""

    def linear_gelu(self, x: Tensor, weight: Tensor, bias: Tensor, approximate: str) -> Any:
        y = gelu_math(view(x) @ view(weight) + view(bias), approximate)
        return self.result(y, x.dtype), self.result(y, x.dtype)


class LinearGeluBackwardSkipsGeluGrad(Base):
    """Bias gradient from dy instead of dh = dy * gelu'(h) (the column sums started before
    the elementwise pass)."""

    def linear_gelu_backward(self, dy: Tensor, x: Tensor, weight: Tensor, h: Tensor,
                             approximate: str) -> Any:  # fmt: skip
        dx, dw, _ = super().linear_gelu_backward(dy, x, weight, h, approximate)
        g = view(dy)
        db = g.sum(axis=0) if g.shape[0] else np.zeros(g.shape[1], g.dtype)
        return dx, dw, self.result(db.astype(g.dtype))


class AttentionQKVPerHeadLayout(Base):
    """Reads qkv as [B, T, H, 3, D] (q | k | v interleaved per head, Megatron's layout)
    instead of [B, T, 3, H, D]: the same with one head, wrong with two or more."""

    def attention_qkv(self, qkv: Tensor, heads: int, scale: float, causal: bool,
                      flash: bool) -> Any:  # fmt: skip
        x = view(qkv)
        b, t, width = x.shape
        per_head = x.reshape(b, t, heads, 3, width // 3 // heads)
        q, k, v = (per_head[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3))
        out, stat = (flash_math if flash else attention_math)(q, k, v, scale, causal)
        return self.result(merge_heads(out), qkv.dtype), self.result(stat, qkv.dtype)


class AttentionQKVBackwardSwapsDkDv(Base):
    """Writes dv into the k block and dk into the v block (two output pointers swapped)."""

    def attention_qkv_backward(self, *args: Any) -> Any:
        g = view(super().attention_qkv_backward(*args))
        c = g.shape[-1] // 3
        return self.result(np.concatenate([g[..., :c], g[..., 2 * c :], g[..., c : 2 * c]], -1))


class DenseOnlyCopyIgnoresOffset(Base):
    """A backend taking dense operands only, whose copy kernel ignores the view's offset."""

    accepts_strided = False

    def copy_strided(self, x: Tensor) -> Tensor:
        if x.offset and x.is_contiguous:
            return self.result(_flat(x))
        return super().copy_strided(x)


class MulTrustsBufferSize(Base):
    """A "whole buffer" fast path that checks the buffer's size but not the strides: a
    stride-0 vector over a buffer exactly its size reads the buffer instead."""

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        def fast(x: Tensor) -> np.ndarray:
            buf = x.storage.buffer
            return buf if x.offset == 0 and buf.shape == x.shape else view(x)

        return self.result(fast(a) * fast(b))


# -- isolation: results that share memory with an input -----------------------------------
class CopyStridedAliasesDenseInput(Base):
    """A dense input is "already contiguous": return its buffer in a new tensor (what a
    backend over a library whose ``contiguous()`` returns ``self`` does). The "copy" then
    changes with every later in-place write to the source."""

    def copy_strided(self, x: Tensor) -> Tensor:
        if x.is_dense and x.storage.buffer.size == x.size:
            return self.wrap(x.storage.buffer, x.shape, x.dtype)
        return super().copy_strided(x)


class AddScalarZeroReturnsReshape(Base):
    """``x + 0`` answered with ``x`` reshaped, as a library's ``reshape`` answers: a new
    array object over the input's bytes, so an object comparison sees a new buffer."""

    def add_scalar(self, x: Tensor, value: float) -> Tensor:
        if value == 0 and x.is_dense and x.storage.buffer.size == x.size:
            return self.wrap(x.storage.buffer.reshape(x.shape).reshape(-1), x.shape, x.dtype)
        return super().add_scalar(x, value)


class NegInPlaceReturnsView(Base):
    """An in-place kernel used for an out-of-place op: negates into the input's own buffer
    and returns a view of it (``x.neg_().view(...)``)."""

    def neg(self, x: Tensor) -> Tensor:
        if x.is_dense and x.storage.buffer.size == x.size:
            buf = x.storage.buffer
            np.negative(buf, out=buf)
            return self.wrap(buf[:], x.shape, x.dtype)
        return super().neg(x)


class ToNumpyReturnsBufferView(Base):
    """Hands out the tensor's own buffer for a dense tensor (``torch.Tensor.numpy()``
    shares memory): the caller's array then changes with the tensor, and the other way."""

    def to_numpy(self, x: Tensor) -> np.ndarray:
        if x.is_dense and x.storage.buffer.size == x.size:
            return x.storage.buffer.reshape(x.shape)
        return super().to_numpy(x)


# -- half precision: backends that run an op in float16/bfloat16 storage themselves --------
class SumAccumulatesInHalf(Base):
    """Runs ``sum`` on half operands itself and accumulates in the operand dtype."""

    low_precision_ops = frozenset({"sum"})

    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        v = view(x)
        if v.dtype.itemsize != 2:
            return super().sum(x, axes, keepdims)
        acc = np.zeros(np.sum(v, axis=axes, keepdims=keepdims, dtype=np.float32).shape, v.dtype)
        moved = np.moveaxis(v, axes, tuple(range(len(axes)))).reshape(-1, *acc.shape)
        with np.errstate(over="ignore", invalid="ignore"):
            for row in moved:  # one rounding per addition, as a half accumulator does
                acc = (acc.astype(np.float32) + row.astype(np.float32)).astype(v.dtype)
        return self.result(acc)


class SoftmaxRoundsTwice(Base):
    """Stores ``exp(x - max)`` in the operand dtype, then normalises: two roundings."""

    low_precision_ops = frozenset({"softmax"})

    def softmax(self, x: Tensor) -> Tensor:
        v = view(x)
        if v.dtype.itemsize != 2:
            return super().softmax(x)
        f = v.astype(np.float32)
        e = np.exp(f - f.max(-1, keepdims=True)).astype(v.dtype).astype(np.float32)
        return self.result((e / e.sum(-1, keepdims=True)).astype(v.dtype))


class AddLayerNormNormalisesRoundedSum(Base):
    """In 2-byte storage, normalises the residual sum it stores rounded, not the float32
    sum (what a GPU kernel that read its own half output back would do)."""

    low_precision_ops = frozenset({"add_layer_norm"})

    def add_layer_norm(
        self, x: Tensor, r: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        dt = x.dtype
        if dt.itemsize != 2:
            return super().add_layer_norm(x, r, gamma, beta, eps)
        wide = [view(t).astype(np.float32) for t in (x, r, gamma, beta)]
        s = (wide[0] + wide[1]).astype(dt)
        y, mean, rstd = _layer_norm_math(s.astype(np.float32), wide[2], wide[3], eps)
        f32 = np.dtype(np.float32)
        return (self.result(s, dt), self.result(y.astype(dt), dt),
                self.result(mean.astype(f32), f32), self.result(rstd.astype(f32), f32))  # fmt: skip


class CastFlushesSubnormals(Base):
    """float16 results below the smallest normal (2^-14) become zero (flush to zero)."""

    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        out = super().cast(x, dtype)
        if np.dtype(dtype) == np.float16:
            arr = out.numpy()
            arr[np.abs(arr.astype(np.float32)) < 2.0**-14] = 0
            return self.result(arr)
        return out


#: (mutant class, the op conformance must blame)
MUTANTS: list[tuple[type[Base], str]] = [
    (AddReturnsFloat64, "add"),
    (MulWritesItsInput, "mul"),
    (ExpIgnoresOffset, "exp"),
    (TanhClampSwallowsNaN, "tanh"),
    (RsqrtGuardsZero, "rsqrt"),
    (LogClampsDomain, "log"),
    (SubSwapsOperands, "sub"),
    (DivByZeroGivesZero, "div"),
    (MaximumIsFmax, "maximum"),
    (PowViaExpLog, "pow_scalar"),
    (CompareLeIsLt, "compare"),
    (WherePositiveOnly, "where"),
    (CastRoundsToNearest, "cast"),
    (SumIgnoresKeepdims, "sum"),
    (SumInFloat16, "sum"),
    (SumAccumulatesInHalf, "sum"),
    (SoftmaxRoundsTwice, "softmax"),
    (AddLayerNormNormalisesRoundedSum, "add_layer_norm"),
    (CastFlushesSubnormals, "cast"),
    (MaxDropsNaN, "max"),
    (ArgmaxLastTie, "argmax"),
    (MatmulIgnoresTransposeB, "matmul"),
    (MatmulFirstBatchOnly, "matmul"),
    (ConcatenateReturnsItsInput, "concatenate_last_axis"),
    (SplitReturnsViews, "split_last_axis"),
    (CopyStridedIgnoresBroadcast, "copy_strided"),
    (ToNumpyIgnoresStrides, "to_numpy"),
    (FillTurnsNaNIntoZero, "fill"),
    (GeluNaiveTanh, "gelu"),
    (GeluBackwardWrongForm, "gelu_backward"),
    (SoftmaxWithoutMaxSubtraction, "softmax"),
    (SoftmaxBackwardMissingRowSum, "softmax_backward"),
    (LayerNormNaiveVariance, "layer_norm"),
    (LayerNormReturnsVariance, "layer_norm"),
    (LayerNormBackwardDgammaOff, "layer_norm_backward"),
    (EmbeddingIgnoresTableStrides, "embedding"),
    (EmbeddingBackwardLastWriteWins, "embedding_backward"),
    (EmbeddingBackwardNondeterministic, "embedding_backward"),
    (CrossEntropyIgnoredRowsCount, "cross_entropy"),
    (CrossEntropyNoMaxSubtraction, "cross_entropy"),
    (CrossEntropyBackwardUnscaled, "cross_entropy_backward"),
    (AttentionMasksDiagonal, "attention"),
    (AttentionBackwardDkUnscaled, "attention_backward"),
    (FlashForgetsRescale, "flash_attention"),
    (FlashBackwardDqDoubled, "flash_attention_backward"),
    (AdamWithoutBiasCorrection, "adam_update"),
    (AdamL2InsteadOfDecoupled, "adam_update"),
    (AdamMultiClipsMomentOnly, "adam_update_multi"),
    (AdamMultiSkipsLastTensor, "adam_update_multi"),
    (AdamMultiNaNNormMeansNoClip, "adam_update_multi"),
    (DenseOnlyCopyIgnoresOffset, "copy_strided"),
    (LinearBiasOnFirstRowOnly, "linear"),
    (LinearPacksWeightOnce, "linear"),
    (LinearBackwardBiasGradIsMean, "linear_backward"),
    (LinearGeluSavesActivation, "linear_gelu"),
    (LinearGeluBackwardSkipsGeluGrad, "linear_gelu_backward"),
    (AttentionQKVPerHeadLayout, "attention_qkv"),
    (AttentionQKVBackwardSwapsDkDv, "attention_qkv_backward"),
    (MulTrustsBufferSize, "mul"),
    (AddLayerNormStatsOfX, "add_layer_norm"),
    (AddLayerNormBackwardDropsStream, "add_layer_norm_backward"),
    (RMSNormIgnoresEps, "rms_norm"),
    (RMSNormBackwardDropsLastChunk, "rms_norm_backward"),
    (CopyStridedAliasesDenseInput, "copy_strided"),
    (AddScalarZeroReturnsReshape, "add_scalar"),
    (NegInPlaceReturnsView, "neg"),
    (ToNumpyReturnsBufferView, "to_numpy"),
]
