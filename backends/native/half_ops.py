"""Ops on float16/bfloat16 storage that compute in float32 and round once, row by row or
chunk by chunk (``kernels_half_ops.c``): elementwise arithmetic, softmax, GELU, LayerNorm,
cross-entropy and their backwards, and the embedding gather. Each gives the bits of core's
widened path (same float32 workers, same order) in one pass over 2-byte memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from riftco.backends.cpu.views import view
from riftco.tensor import Tensor

from .half import F32, HALF, KIND, NativeHalf, bits
from .primitives import row_stride

_BINARY = {
    "add": (0, np.add),
    "sub": (1, np.subtract),
    "mul": (2, np.multiply),
    "div": (3, np.divide),
}  # fmt: skip  (kernels_layout.c: RIFT_ADD ...)


class NativeHalfOps(NativeHalf):
    """Mixin for :class:`NativeBackend`; relies on its pointer and output helpers."""

    _rows: Any
    _ids: Any
    _ptr: Any

    def _half_binary(self, op: str, a: Tensor, b: Tensor) -> Tensor:
        code, ufunc = _BINARY[op]
        sa, sb = row_stride(a), row_stride(b)
        if a.shape != b.shape or sa is None or sb is None or a.size == 0:
            # layouts the row kernel does not take (a broadcast scalar): numpy in float32,
            # rounded once by the cast
            with np.errstate(all="ignore"):
                wide = ufunc(view(a).astype(F32), view(b).astype(F32))
                return self.result(wide.astype(a.dtype), a.dtype)
        cols = a.shape[-1]
        out, p = self._out(a.shape, a.dtype)
        self._lib.half_binary(
            code, self._at(a), sa, self._at(b), sb, p, a.size // cols, cols, KIND[a.dtype],
            self._f16c,
        )  # fmt: skip
        return out

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        if a.dtype in HALF:
            return self._half_binary("add", a, b)
        return super().add(a, b)  # type: ignore[misc]

    def sub(self, a: Tensor, b: Tensor) -> Tensor:
        if a.dtype in HALF:
            return self._half_binary("sub", a, b)
        return super().sub(a, b)  # type: ignore[misc]

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        if a.dtype in HALF:
            return self._half_binary("mul", a, b)
        return super().mul(a, b)  # type: ignore[misc]

    def div(self, a: Tensor, b: Tensor) -> Tensor:
        if a.dtype in HALF:
            return self._half_binary("div", a, b)
        return super().div(a, b)  # type: ignore[misc]

    def _half_scalar(self, op: str, x: Tensor, value: float) -> Tensor:
        """``value`` as float32 (what the widened path adds or multiplies), one rounding."""
        y, p = self._out(x.shape, x.dtype)
        v = float(np.float32(value))
        self._lib.half_scalar(_BINARY[op][0], self._in(x), p, x.size, v, KIND[x.dtype], self._f16c)
        return y

    def add_scalar(self, x: Tensor, value: float) -> Tensor:
        if x.dtype in HALF:
            return self._half_scalar("add", x, value)
        return super().add_scalar(x, value)  # type: ignore[misc]

    def mul_scalar(self, x: Tensor, value: float) -> Tensor:
        if x.dtype in HALF:
            return self._half_scalar("mul", x, value)
        return super().mul_scalar(x, value)  # type: ignore[misc]

    def half_softmax(self, x: Tensor) -> Tensor:
        y, p = self._out(x.shape, x.dtype)
        rows, cols = self._rows(x)
        status = self._lib.half_softmax(self._in(x), p, rows, cols, KIND[x.dtype], self._f16c)
        self._check(status, "softmax")
        return y

    def half_softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        dx, p = self._out(y.shape, y.dtype)
        rows, cols = self._rows(y)
        status = self._lib.half_softmax_backward(
            self._in(dy), self._in(y), p, rows, cols, KIND[y.dtype], self._f16c
        )
        self._check(status, "softmax_backward")
        return dx

    def half_gelu(self, x: Tensor, approximate: str) -> Tensor:
        y, p = self._out(x.shape, x.dtype)
        approx = int(approximate == "tanh")
        self._lib.half_gelu(self._in(x), p, x.size, approx, KIND[x.dtype], self._f16c)
        return y

    def half_gelu_backward(self, dy: Tensor, x: Tensor, approximate: str) -> Tensor:
        dx, p = self._out(x.shape, x.dtype)
        approx = int(approximate == "tanh")
        self._lib.half_gelu_backward(
            self._in(dy), self._in(x), p, x.size, approx, KIND[x.dtype], self._f16c
        )
        return dx

    def half_layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        """y in ``x.dtype``; mean and rstd in float32 (core/ops/fused specifications)."""
        rows, cols = self._rows(x)
        y, yp = self._out(x.shape, x.dtype)
        mean, mp = self._out(x.shape[:-1], F32)
        rstd, rp = self._out(x.shape[:-1], F32)
        status = self._lib.half_layer_norm(
            self._in(x), self._in(gamma), self._in(beta), yp, mp, rp, rows, cols, eps,
            KIND[x.dtype], self._f16c,
        )  # fmt: skip
        self._check(status, "layer_norm")
        return y, mean, rstd

    def half_add_layer_norm(
        self, x: Tensor, r: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """s and y in ``x.dtype`` (y normalises the float32 sum, not the rounded s, as the
        float32 op does); mean and rstd in float32."""
        rows, cols = self._rows(x)
        s, sp = self._out(x.shape, x.dtype)
        y, yp = self._out(x.shape, x.dtype)
        mean, mp = self._out(x.shape[:-1], F32)
        rstd, rp = self._out(x.shape[:-1], F32)
        ins = (self._in(x), self._in(r), self._in(gamma), self._in(beta))
        status = self._lib.half_add_layer_norm(
            *ins, sp, yp, mp, rp, rows, cols, eps, KIND[x.dtype], self._f16c
        )
        self._check(status, "add_layer_norm")
        return s, y, mean, rstd

    def half_ln_backward(
        self,
        dy: Tensor,
        x: Tensor,
        gamma: Tensor,
        mean: Tensor,
        rstd: Tensor,
        ds: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """layer_norm_backward (``ds`` None) or add_layer_norm_backward (``x`` is the sum
        s, the first result ``dsum = ds + dx``): 2-byte results, float32 statistics in."""
        rows, cols = self._rows(x)
        dx, dxp = self._out(x.shape, x.dtype)
        dg, dgp = self._out((cols,), x.dtype)
        db, dbp = self._out((cols,), x.dtype)
        dsp = self._ffi.NULL if ds is None else self._in(ds)
        ins = (self._in(dy), self._in(x), self._in(gamma), self._in(mean), self._in(rstd))
        status = self._lib.half_ln_backward(
            *ins, dsp, dxp, dgp, dbp, rows, cols, KIND[x.dtype], self._f16c
        )
        self._check(status, "layer_norm_backward" if ds is None else "add_layer_norm_backward")
        return dx, dg, db

    def half_cross_entropy(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        """Loss rows and lse in float32 (core/ops/fused specifications)."""
        n, v = logits.shape
        loss, lp = self._out((n,), F32)
        lse, sp = self._out((n,), F32)
        status = self._lib.half_cross_entropy(
            self._in(logits), self._ids(targets), lp, sp, n, v, KIND[logits.dtype], self._f16c
        )
        self._check(status, "cross_entropy")
        return loss, lse

    def half_cross_entropy_backward(
        self, dloss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
    ) -> Tensor:
        n, v = logits.shape
        g, gp = self._out((n, v), logits.dtype)
        dp = self._ptr(dloss.storage.buffer, dloss.offset)  # float32, 1-D, any stride
        status = self._lib.half_cross_entropy_backward(
            dp, dloss.strides[0], self._in(logits), self._ids(targets), self._in(lse), gp, n, v,
            KIND[logits.dtype], self._f16c,
        )  # fmt: skip
        self._check(status, "cross_entropy_backward")
        return g

    def half_embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        """Rows copied bit for bit: a gather rounds nothing."""
        rows = bits(np.ascontiguousarray(view(table)).reshape(-1)).reshape(table.shape)
        picked = np.take(rows, np.asarray(view(ids), dtype=np.int64), axis=0)
        return self.result(picked.view(table.dtype), table.dtype)
