"""Matmul and the linear-layer family on float16/bfloat16 storage (``kernels_half_matmul.c``):
the operands widened once into pooled float32 buffers, the float32 BLAS parts, the results
rounded once (the forward while each 128-row tile is in cache, with bias and GELU applied
before the rounding).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from riftco.tensor import Tensor

from .half import F32, HALF, KIND, NativeHalf
from .primitives import SMALL_GEMM, matrix_layout


class NativeHalfMatmul(NativeHalf):
    """Mixin for :class:`NativeBackend`; relies on its pointer, output and BLAS helpers."""

    _gemm: dict[np.dtype, Any]
    _single_blas: Any
    _row_major: Any

    def _half_matmul(
        self, a: Tensor, b: Tensor, ta: bool, tb: bool, bias: Tensor | None, gelu: str = ""
    ) -> tuple[Tensor, Tensor | None] | None:
        """``(op(a) op(b) + bias, gelu of it or None)`` by the C kernel, for 2-D operands
        each with a unit stride; None otherwise. ``gelu``: "" none, else its form."""
        gemm = self._gemm.get(F32)
        la, lb = matrix_layout(a), matrix_layout(b)
        if gemm is None or a.ndim != 2 or b.ndim != 2 or la is None or lb is None:
            return None
        m = a.shape[1] if ta else a.shape[0]
        k = a.shape[0] if ta else a.shape[1]
        n = b.shape[0] if tb else b.shape[1]
        if m * n * k < SMALL_GEMM or 0 in (m, n, k):
            return None
        out, p = self._out((m, n), a.dtype)
        y, yp = self._out((m, n), a.dtype) if gelu else (None, self._ffi.NULL)
        bp = self._ffi.NULL if bias is None else self._in(bias)
        a_t, a32 = self._out((m * k,), F32)  # float32 copies of A and B (pooled scratch)
        b_t, b32 = self._out((k * n,), F32)
        with self._single_blas():
            status = self._lib.half_matmul(
                gemm, ta != la[1], tb != lb[1], m, n, k, self._at(a), la[0], self._at(b), lb[0],
                p, bp, a32, b32, yp, int(gelu == "tanh"), KIND[a.dtype], self._f16c,
            )  # fmt: skip
        del a32, b32  # the pointers first: the pool recycles only unreferenced buffers
        del a_t, b_t
        self._check(status, "linear_gelu" if gelu else "matmul" if bias is None else "linear")
        return out, y

    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        if a.dtype not in HALF:
            return super().matmul(a, b, transpose_a, transpose_b)  # type: ignore[misc]
        done = self._half_matmul(a, b, transpose_a, transpose_b, None)
        if done is not None:
            return done[0]
        wide = super().matmul  # type: ignore[misc]
        return self._widened(lambda x, y: wide(x, y, transpose_a, transpose_b), a, b)

    def linear(self, x: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
        if x.dtype not in HALF:
            return super().linear(x, w, bias)  # type: ignore[misc]
        done = self._half_matmul(x, w, False, False, bias)
        if done is not None:
            return done[0]
        wide = super().linear  # type: ignore[misc]
        if bias is None:
            return self._widened(lambda a, b: wide(a, b, None), x, w)
        return self._widened(wide, x, w, bias)

    def linear_gelu(
        self, x: Tensor, weight: Tensor, bias: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor]:
        """``(gelu(h), h)`` with ``h = x @ weight + bias`` in float32, each rounded once
        (GELU reads the float32 h, not the rounded one)."""
        if x.dtype not in HALF:
            return super().linear_gelu(x, weight, bias, approximate)  # type: ignore[misc]
        done = self._half_matmul(x, weight, False, False, bias, approximate)
        if done is not None:
            h, y = done
            assert y is not None
            return y, h
        wide = super().linear_gelu  # type: ignore[misc]
        return self._widened(lambda a, w, b: wide(a, w, b, approximate), x, weight, bias)

    def linear_backward(self, dy: Tensor, x: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if x.dtype not in HALF:
            return super().linear_backward(dy, x, w)  # type: ignore[misc]
        return self._half_linear_backward(dy, x, w, None, "")

    def linear_gelu_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor, h: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor, Tensor]:
        if x.dtype not in HALF:
            return super().linear_gelu_backward(dy, x, weight, h, approximate)  # type: ignore[misc]
        return self._half_linear_backward(dy, x, weight, h, approximate)

    def _half_linear_backward(
        self, dy: Tensor, x: Tensor, w: Tensor, h: Tensor | None, gelu: str
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dx, dw, db)`` of ``y = x @ w + b`` (``gelu``: of ``gelu(h)``, ``h`` that sum)
        in one C call: the float32 kernel's products on widened operands, X widened a chunk
        of columns at a time and dX written over the chunk once dW has read it, so neither
        is ever held in float32 whole (the two were most of a mixed-precision step's
        activation high-water mark). The scratch is pooled, so it counts like any tensor."""
        gemm = self._gemm.get(F32)
        m, k = x.shape
        n = w.shape[1]
        if gemm is None or 0 in (m, k, n):
            if gelu:
                wide = super().linear_gelu_backward  # type: ignore[misc]
                return self._widened(lambda d, a, b, c: wide(d, a, b, c, gelu), dy, x, w, h)
            return self._widened(super().linear_backward, dy, x, w)  # type: ignore[misc]
        (x, ldx), (w, ldw), (dy, ldy) = (self._row_major(t) for t in (x, w, dy))
        hp, ldh = self._ffi.NULL, 0
        if h is not None:
            h, ldh = self._row_major(h)
            hp = self._at(h)
        dx, dxp = self._out((m, k), x.dtype)
        dw, dwp = self._out((k, n), x.dtype)
        db, dbp = self._out((n,), x.dtype)
        form = int(gelu == "tanh") if gelu else -1
        floats = int(self._lib.half_linear_backward_floats(m, n, k, form))
        scratch, sp = self._out((floats,), F32)  # pooled: back to the pool below
        with self._single_blas():
            status = self._lib.half_linear_backward(
                gemm, m, n, k, self._at(x), ldx, self._at(w), ldw, self._at(dy), ldy, hp, ldh,
                dxp, dwp, dbp, sp, form, KIND[x.dtype],
                self._f16c,
            )  # fmt: skip
        del sp, scratch  # the pointer first: with it alive, the pool refuses the buffer
        self._check(status, "linear_gelu_backward" if gelu else "linear_backward")
        return dx, dw, db
