"""The native backend's ``linear_gelu`` and its backward (``kernels_linear_gelu.c``).

Forward: GELU in the product's epilogue, per thread while its part of ``h`` is in cache;
backward: ``dh = dy * gelu'(h)`` as the first phase of the linear backward's parallel
region. Both give the bits of ``linear`` + ``gelu`` (``gelu_backward`` +
``linear_backward``) on this backend; what the C kernels do not cover (no BLAS, an empty
dimension) runs exactly those methods.
"""

from __future__ import annotations

from typing import Any

from riftco.tensor import Tensor


class NativeLinearGelu:
    """Mixin for :class:`NativeBackend`; relies on its matmul and pointer helpers."""

    _ffi: Any
    _gemm: dict[Any, Any]
    _fn: Any
    _out: Any
    _at: Any
    _check: Any
    _operand: Any
    _row_major: Any
    _dense_ptr: Any
    _single_blas: Any
    linear: Any
    linear_backward: Any
    gelu: Any
    gelu_backward: Any

    def linear_gelu(
        self, x: Tensor, weight: Tensor, bias: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor]:
        gemm = self._gemm.get(x.dtype)
        if gemm is None or 0 in x.shape or 0 in weight.shape:
            h = self.linear(x, weight, bias)
            return self.gelu(h, approximate), h
        x, lda, ta = self._operand(x)
        weight, ldb, tb = self._operand(weight)
        m, k, n = x.shape[0], x.shape[1], weight.shape[1]
        h, hp = self._out((m, n), x.dtype)
        y, yp = self._out((m, n), x.dtype)
        with self._single_blas():
            self._fn("linear_gelu", x.dtype)(
                gemm, ta, tb, m, n, k, self._at(x), lda, self._at(weight), ldb,
                self._dense_ptr(bias), hp, yp, int(approximate == "tanh"),
            )  # fmt: skip
        return y, h

    def linear_gelu_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor, h: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor, Tensor]:
        gemm = self._gemm.get(x.dtype)
        m, k = x.shape
        n = weight.shape[1]
        if gemm is None or 0 in (m, k, n):
            return self.linear_backward(self.gelu_backward(dy, h, approximate), x, weight)
        (x, ldx), (w, ldw), (dy, ldy), (h, ldh) = (self._row_major(t) for t in (x, weight, dy, h))
        dh, dhp = self._out((m, n), x.dtype)  # scratch, back to the pool on return
        dx, dxp = self._out((m, k), x.dtype)
        dw, dwp = self._out((k, n), x.dtype)
        db, dbp = self._out((n,), x.dtype)
        with self._single_blas():
            status = self._fn("linear_gelu_backward", x.dtype)(
                gemm, m, n, k, self._at(x), ldx, self._at(w), ldw, self._at(dy), ldy,
                self._at(h), ldh, dhp, dxp, dwp, dbp, int(approximate == "tanh"),
            )  # fmt: skip
        self._check(status, "linear_gelu_backward")
        del dhp, dh  # the pointer holds the buffer too: with it alive, the pool refuses it
        return dx, dw, db
