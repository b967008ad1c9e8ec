"""Attention on the native backend: the four protocol ops, and the fused-projection forms.

The C kernels (``kernels_attention.c``) read q, k, v (and dout, out) through (b, h, t)
strides and write their outputs through strides too. So besides the protocol ops on
[B, H, T, D] tensors there are :meth:`attention_qkv` and :meth:`attention_qkv_backward`:
q, k, v are read straight from a fused projection's output ``qkv`` [B, T, 3C] (C = H*D,
q | k | v along the last axis), the output is written as [B, T, C] rows the output
projection reads, and the backward writes dq | dk | dv into one [B, T, 3C] gradient: no
head split, head merge or concatenation copies. These are the entry points of issue 13's
part-2 attention op; their composite is ``split -> reshape -> permute -> attention ->
permute -> reshape`` (tests/backends/native/test_native_attention_qkv.py checks exactly that).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from riftco.ops.fused.attention_qkv import heads_view
from riftco.tensor import Tensor


class NativeAttention:
    """Mixin for :class:`NativeBackend`; relies on its pointer and output helpers."""

    _ffi: Any
    _fn: Any
    _out: Any
    _check: Any
    _in: Any
    _views: Any

    # -- helpers ----------------------------------------------------------------------------
    def _dense_bhtd(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[Tensor, Any, list]:
        """A new dense [B, H, T, D] result, its pointer and its (b, h, t) strides."""
        _, h, t, d = shape
        out, p = self._out(shape, dtype)
        return out, p, [h * t * d, t * d, d]

    def _forward(
        self, op: str, q: Tensor, k: Tensor, v: Tensor, stat_shape: tuple[int, ...],
        scale: float, causal: bool, out: tuple[Tensor, Any, list] | None = None,
    ) -> tuple[Tensor, Tensor]:  # fmt: skip
        """Both forward kernels take q, k, v views and write ``out`` (through its strides)
        plus one dense statistic (``probs`` or ``lse``)."""
        b, h, t, d = q.shape
        (qp, kp, vp), st = self._views(q, k, v)
        res, outp, ost = out or self._dense_bhtd(q.shape, q.dtype)
        stat, sp = self._out(stat_shape, q.dtype)
        status = self._fn(op, q.dtype)(
            qp, kp, vp, st, outp, self._ffi.new("int64_t[]", ost), sp, b, h, t, d, scale,
            int(causal),
        )  # fmt: skip
        self._check(status, op)
        return res, stat

    def _grads(self, q: Tensor) -> tuple[tuple[Tensor, Tensor, Tensor], list[Any], Any]:
        """Dense dq, dk, dv results, their pointers and their strides (for the kernel)."""
        outs = [self._dense_bhtd(q.shape, q.dtype) for _ in range(3)]
        strides = self._ffi.new("int64_t[]", [s for o in outs for s in o[2]])
        return (outs[0][0], outs[1][0], outs[2][0]), [o[1] for o in outs], strides

    # -- protocol ops ----------------------------------------------------------------------------
    def attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        b, h, t, _ = q.shape
        return self._forward("attention", q, k, v, (b, h, t, t), scale, causal)

    def attention_backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        grads, ptrs, ost = self._grads(q)
        self._backward(dout, q, k, v, probs, scale, False, None, ptrs, ost)
        return grads

    def flash_attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        return self._forward("flash_attention", q, k, v, q.shape[:-1], scale, causal)

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
        grads, ptrs, ost = self._grads(q)
        self._backward(dout, q, k, v, lse, scale, causal, out, ptrs, ost)
        return grads

    def _backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, stat: Tensor, scale: float,
        causal: bool, out: Tensor | None, ptrs: list[Any], ost: Any,
    ) -> None:  # fmt: skip
        """The materialised backward (``out`` None, ``stat`` = probs) or the flash one
        (``stat`` = lse), writing dq, dk, dv through ``ptrs`` and strides ``ost``."""
        b, h, t, d = q.shape
        if out is None:
            (dop, qp, kp, vp), st = self._views(dout, q, k, v)
            status = self._fn("attention_backward", q.dtype)(
                dop, qp, kp, vp, st, self._in(stat), *ptrs, ost, b, h, t, d, scale
            )
            self._check(status, "attention_backward")
            return
        (dop, qp, kp, vp, op), st = self._views(dout, q, k, v, out)
        status = self._fn("flash_attention_backward", q.dtype)(
            dop, qp, kp, vp, op, st, self._in(stat), *ptrs, ost, b, h, t, d, scale, int(causal)
        )
        self._check(status, "flash_attention_backward")

    # -- straight from a fused q, k, v projection ------------------------------------------
    def attention_qkv(
        self, qkv: Tensor, heads: int, scale: float, causal: bool, flash: bool
    ) -> tuple[Tensor, Tensor]:
        """``(out [B, T, C], probs [B, H, T, T] or lse [B, H, T])`` from ``qkv`` [B, T, 3C]
        (any strides with a contiguous last axis), heads read and merged in place."""
        b, t, width = qkv.shape
        c = width // 3
        q, k, v = (heads_view(qkv, heads, i, 3) for i in range(3))
        out, p = self._out((b, t, c), qkv.dtype)
        target = (out, p, [t * c, c // heads, c])  # (b, h, t) strides of [B, T, H, D] rows
        if flash:
            return self._forward("flash_attention", q, k, v, (b, heads, t), scale, causal,
                                 target)  # fmt: skip
        return self._forward("attention", q, k, v, (b, heads, t, t), scale, causal, target)

    def attention_qkv_backward(
        self, dout: Tensor, qkv: Tensor, out: Tensor, stat: Tensor, heads: int, scale: float,
        causal: bool, flash: bool,
    ) -> Tensor:  # fmt: skip
        """``dqkv`` [B, T, 3C] for :meth:`attention_qkv`'s output gradient ``dout``
        [B, T, C]; ``stat`` is its probs (materialised) or lse (flash)."""
        b, t, width = qkv.shape
        c, d = width // 3, width // 3 // heads
        q, k, v = (heads_view(qkv, heads, i, 3) for i in range(3))
        dqkv, p = self._out((b, t, width), qkv.dtype)
        ptrs = [p + i * c if i else p for i in range(3)]  # dq | dk | dv thirds of each row
        ost = self._ffi.new("int64_t[]", [t * width, d, width] * 3)
        do = heads_view(dout, heads)
        self._backward(do, q, k, v, stat, scale, causal,
                       heads_view(out, heads) if flash else None, ptrs, ost)  # fmt: skip
        return dqkv
