"""The native backend's matmul, linear-layer kernels and memory-bound primitives.

Matmul runs numpy's own OpenBLAS single-threaded on each thread of our OpenMP team (see
``blas.py`` for why) and reads operands in place whenever their last two axes have one
unit stride: transposed views, column slices of a wider matrix (the thirds of a fused
q, k, v projection) and batch axes of any stride cost no copy.

Elementwise add/sub/mul/div (a dense operand or a broadcast row), sums over leading axes,
strided copies and last-axis concatenation/split are single C passes split over the team
(``kernels_layout.c``, ``kernels_blas.c``). Small tensors and layouts these kernels do not
cover go to the numpy implementations inherited from the CPU backend.

:meth:`linear` and :meth:`linear_backward` are the entry points a fused linear protocol
op will call (issue 13, part 2): the bias is added while each thread's part of the
product is still in cache, and the backward produces dX, dW and db in one parallel region.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from riftco import ieee
from riftco.backends.cpu.views import view
from riftco.ieee import LOUD
from riftco.tensor import Tensor

_BINARY = {"add": 0, "sub": 1, "mul": 2, "div": 3}  # kernels_layout.c: RIFT_ADD ...
#: Below this many elements numpy's ufunc call is cheaper than ours (pointers, wrapping).
SMALL = 1 << 14
#: Below this many multiply-adds numpy's own matmul call is cheaper than ours.
SMALL_GEMM = 1 << 15


def dense_view(x: Tensor) -> np.ndarray:
    """``view(x)`` with the dense 1-D case (no reshape needed) first: tiny ops pay for it."""
    buf: np.ndarray = x.storage.buffer
    if x.offset == 0 and buf.shape == x.shape and x.strides == (1,):  # stride 0 fits too
        return buf
    return view(x)


def row_stride(x: Tensor) -> int | None:
    """Element distance between consecutive rows of ``x`` seen as (rows, last axis), when
    one uniform distance exists and the last axis is contiguous; else None. A dense tensor
    gives its row length, a row broadcast over leading axes (a bias) gives 0."""
    shape, strides = x.shape, x.strides
    if not shape:
        return None
    cols = shape[-1]
    if cols > 1 and strides[-1] != 1:
        return None
    lead = [(n, s) for n, s in zip(shape[:-1], strides[:-1], strict=True) if n > 1]
    if not lead:
        return cols
    step = lead[-1][1]
    expect = step
    for n, s in reversed(lead):
        if s != expect:
            return None
        expect = s * n
    if step and step < cols:  # overlapping rows: not a plain matrix
        return None
    return step


def matrix_layout(x: Tensor) -> tuple[int, bool] | None:
    """``(ld, stored_transposed)`` of the last two axes of ``x`` for BLAS, or None when
    neither axis has unit stride (the caller copies)."""
    r, c = x.shape[-2:]
    sr, sc = x.strides[-2:]
    if (sc == 1 or c == 1) and (r == 1 or sr >= max(c, 1)):
        return (sr if r > 1 else max(c, 1)), False
    if (sr == 1 or r == 1) and (c == 1 or sc >= max(r, 1)):
        return (sc if c > 1 else max(r, 1)), True
    return None


def batch_offsets(x: Tensor) -> np.ndarray:
    """Element offset of every matrix of ``x`` (batch axes flattened in C order)."""
    off = np.array([x.offset], dtype=np.int64)
    for n, s in zip(x.shape[:-2], x.strides[:-2], strict=True):
        off = (off[:, None] + np.arange(n, dtype=np.int64) * s).reshape(-1)
    return off


class NativePrimitives:
    """Mixin for :class:`NativeBackend`; relies on its pointer and output helpers."""

    _ffi: Any
    _gemm: dict[np.dtype, Any]
    _blas: Any

    _fn: Any
    _ptr: Any
    _out: Any
    result: Any
    _check: Any
    _single_blas: Any

    # -- matmul ---------------------------------------------------------------------------
    def _operand(self, x: Tensor) -> tuple[Tensor, int, bool]:
        layout = matrix_layout(x)
        if layout is None:
            x = self.copy_strided(x)
            layout = (x.shape[-1], False)
        return x, layout[0], layout[1]

    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        gemm = self._gemm.get(a.dtype)
        m = a.shape[-1] if transpose_a else a.shape[-2]
        k = a.shape[-2] if transpose_a else a.shape[-1]
        n = b.shape[-2] if transpose_b else b.shape[-1]
        if gemm is None or m * n * k < SMALL_GEMM:
            return super().matmul(a, b, transpose_a, transpose_b)  # type: ignore[misc]
        a, lda, sta = self._operand(a)
        b, ldb, stb = self._operand(b)
        ta, tb = transpose_a != sta, transpose_b != stb
        out, op = self._out((*a.shape[:-2], m, n), a.dtype)
        with self._single_blas():
            if a.ndim == 2:
                ap, bp = self._at(a), self._at(b)
                fn = self._fn("blas_matmul", a.dtype)
                fn(gemm, ta, tb, m, n, k, ap, lda, bp, ldb, op, n, self._ffi.NULL)
            else:
                aoff, boff = batch_offsets(a), batch_offsets(b)
                fn = self._fn("blas_matmul_batched", a.dtype)
                fn(gemm, ta, tb, aoff.size, m, n, k, self._ptr(a.storage.buffer), self._i64(aoff),
                   lda, self._ptr(b.storage.buffer), self._i64(boff), ldb, op)  # fmt: skip
        return out

    def linear(self, x: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
        """``x @ w + bias`` for 2-D ``x`` [M, K], ``w`` [K, N], ``bias`` [N] (or None), with
        the bias added per thread while that part of the product is in cache. Bit-identical
        to ``add(matmul(x, w), bias)``. Entry point for a fused linear protocol op."""
        gemm = self._gemm.get(x.dtype)
        if gemm is None or x.ndim != 2 or 0 in x.shape or 0 in w.shape:
            y = self.matmul(x, w, False, False)
            return y if bias is None else self.add(y, self.broadcast_row(bias, y.shape))
        x, lda, ta = self._operand(x)
        w, ldb, tb = self._operand(w)
        m, k, n = x.shape[0], x.shape[1], w.shape[1]
        out, op = self._out((m, n), x.dtype)
        bp = self._ffi.NULL if bias is None else self._dense_ptr(bias)
        with self._single_blas():
            self._fn("blas_matmul", x.dtype)(
                gemm, ta, tb, m, n, k, self._at(x), lda,
                self._at(w), ldb, op, n, bp,
            )  # fmt: skip
        return out

    def linear_backward(self, dy: Tensor, x: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The protocol method: all three gradients (see :meth:`linear_grads`)."""
        dx, dw, db = self.linear_grads(dy, x, w, (True, True, True))
        assert dx is not None and dw is not None and db is not None
        return dx, dw, db

    def linear_grads(
        self, dy: Tensor, x: Tensor, w: Tensor, need: tuple[bool, bool, bool]
    ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """``(dx, dw, db)`` of ``y = x @ w + b`` in one parallel region: dx = dy w^T,
        dw = x^T dy, db = column sums of dy (pairwise, deterministic). ``need`` skips any
        of the three. 2-D, row-major operands (others are copied)."""
        gemm = self._gemm.get(x.dtype)
        m, k = x.shape
        n = w.shape[1]
        if gemm is None or 0 in (m, k, n):
            return self._linear_backward_unfused(dy, x, w, need)
        (x, ldx), (w, ldw), (dy, ldy) = (self._row_major(t) for t in (x, w, dy))
        dx, dxp = self._out((m, k), x.dtype) if need[0] else (None, self._ffi.NULL)
        dw, dwp = self._out((k, n), x.dtype) if need[1] else (None, self._ffi.NULL)
        db, dbp = self._out((n,), x.dtype) if need[2] else (None, self._ffi.NULL)
        with self._single_blas():
            status = self._fn("linear_backward", x.dtype)(
                gemm, m, n, k, self._at(x), ldx, self._at(w), ldw, self._at(dy), ldy, dxp, dwp, dbp
            )
        self._check(status, "linear_backward")
        return dx, dw, db

    def _linear_backward_unfused(
        self, dy: Tensor, x: Tensor, w: Tensor, need: tuple[bool, bool, bool]
    ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        dx = self.matmul(dy, w, False, True) if need[0] else None
        dw = self.matmul(x, dy, True, False) if need[1] else None
        db = self.sum(dy, (0,), False) if need[2] else None
        return dx, dw, db

    # -- elementwise and reductions ---------------------------------------------------------
    def _binary(self, op: str, a: Tensor, b: Tensor) -> Tensor | None:
        """The C kernel when both operands are (rows, cols) matrices with a uniform row
        stride (dense, or one broadcast row); None to let numpy do it."""
        if a.dtype not in self._gemm_dtypes or a.shape != b.shape:
            return None
        sa, sb = row_stride(a), row_stride(b)
        if sa is None or sb is None:
            return None
        cols = a.shape[-1]
        out, op_ptr = self._out(a.shape, a.dtype)
        self._fn("binary", a.dtype)(
            _BINARY[op], self._at(a), sa,
            self._at(b), sb, op_ptr, a.size // cols, cols,
        )  # fmt: skip
        return out

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        out = self._binary("add", a, b) if a.size >= SMALL else None
        return out if out is not None else self._numpy(np.add, a, b)

    def sub(self, a: Tensor, b: Tensor) -> Tensor:
        out = self._binary("sub", a, b) if a.size >= SMALL else None
        return out if out is not None else self._numpy(np.subtract, a, b)

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        out = self._binary("mul", a, b) if a.size >= SMALL else None
        return out if out is not None else self._numpy(np.multiply, a, b)

    def _numpy(self, ufunc: Any, a: Tensor, b: Tensor) -> Tensor:
        """Small operands, and layouts the C kernel does not take (a broadcast scalar):
        numpy's ufunc (IEEE results, no warnings)."""
        va, vb = dense_view(a), dense_view(b)
        if a.size >= SMALL and a.dtype in self._gemm_dtypes:
            out = self._into(ufunc, a, va, vb)
            if out is not None:
                return out
        try:
            return self.result(ufunc(va, vb))
        except LOUD:  # see ``riftco.ieee``
            return self.result(ieee.call(ufunc, va, vb))

    def _into(self, ufunc: Any, like: Tensor, *operands: Any) -> Tensor | None:
        """``ufunc(*operands)`` written into a pooled result shaped like ``like``; None when
        numpy reports a floating-point event, for the caller's IEEE path.

        A fresh large numpy array is fresh pages from the kernel, faulted in on first write:
        at a million float32 elements that is 4x the arithmetic (1.3 ms against 0.3 ms for
        a product on the 2-core Xeon); pooled buffers are already mapped."""
        out, _ = self._out(like.shape, like.dtype)
        try:
            ufunc(*operands, out=out.storage.buffer.reshape(like.shape))
        except LOUD:
            return None
        return out

    def _unary(self, ufunc: Any, x: Tensor, inherited: Any) -> Tensor:
        if x.size >= SMALL and x.dtype in self._gemm_dtypes:
            out = self._into(ufunc, x, dense_view(x))
            if out is not None:
                return out
        return inherited(x)

    def neg(self, x: Tensor) -> Tensor:
        return self._unary(np.negative, x, super().neg)  # type: ignore[misc]

    def exp(self, x: Tensor) -> Tensor:
        return self._unary(np.exp, x, super().exp)  # type: ignore[misc]

    def log(self, x: Tensor) -> Tensor:
        return self._unary(np.log, x, super().log)  # type: ignore[misc]

    def sqrt(self, x: Tensor) -> Tensor:
        return self._unary(np.sqrt, x, super().sqrt)  # type: ignore[misc]

    def tanh(self, x: Tensor) -> Tensor:
        return self._unary(np.tanh, x, super().tanh)  # type: ignore[misc]

    def abs(self, x: Tensor) -> Tensor:
        return self._unary(np.abs, x, super().abs)  # type: ignore[misc]

    def _scalar_op(self, ufunc: Any, x: Tensor, value: float, inherited: Any) -> Tensor:
        if x.size >= SMALL and x.dtype in self._gemm_dtypes:
            out = self._into(ufunc, x, dense_view(x), x.dtype.type(value))
            if out is not None:
                return out
        return inherited(x, value)

    def add_scalar(self, x: Tensor, value: float) -> Tensor:
        return self._scalar_op(np.add, x, value, super().add_scalar)  # type: ignore[misc]

    def mul_scalar(self, x: Tensor, value: float) -> Tensor:
        return self._scalar_op(np.multiply, x, value, super().mul_scalar)  # type: ignore[misc]

    def maximum(self, a: Tensor, b: Tensor) -> Tensor:
        return self._numpy(np.maximum, a, b)

    def minimum(self, a: Tensor, b: Tensor) -> Tensor:
        return self._numpy(np.minimum, a, b)

    def div(self, a: Tensor, b: Tensor) -> Tensor:
        out = self._binary("div", a, b) if a.size >= SMALL else None
        return out if out is not None else super().div(a, b)  # type: ignore[misc]

    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        """Sums over leading axes (bias gradients) in C, pairwise in double; the rest by
        the CPU backend's pairwise numpy."""
        lead = len(axes)
        if lead == x.ndim and x.is_dense:  # everything: numpy sums contiguous data pairwise
            flat = dense_view(x).reshape(-1)
            try:
                total = np.add.reduce(flat)
            except LOUD:  # IEEE: inf + -inf = NaN
                total = ieee.call(np.add.reduce, flat)
            return self.result(total.reshape((1,) * lead) if keepdims else total, x.dtype)
        if x.dtype in self._gemm_dtypes and 0 < lead < x.ndim and axes == tuple(range(lead)):
            cols = math.prod(x.shape[lead:])
            rows = math.prod(x.shape[:lead])
            if x.is_dense and cols:
                shape = (1,) * lead + x.shape[lead:] if keepdims else x.shape[lead:]
                out, p = self._out(shape, x.dtype)
                status = self._fn("colsum", x.dtype)(self._at(x), rows, cols, cols, p)
                self._check(status, "sum")
                return out
        return super().sum(x, axes, keepdims)  # type: ignore[misc]

    # -- layout -------------------------------------------------------------------------------
    def copy_strided(self, x: Tensor) -> Tensor:
        if x.ndim > 4 or x.size < SMALL or x.dtype not in self._gemm_dtypes:
            return super().copy_strided(x)  # type: ignore[misc]
        pad = 4 - x.ndim
        shape = self._i64(np.array((1,) * pad + x.shape, dtype=np.int64))
        strides = self._i64(np.array((0,) * pad + x.strides, dtype=np.int64))
        out, p = self._out(x.shape, x.dtype)
        self._fn("copy_view", x.dtype)(self._at(x), shape, strides, p)
        return out

    def concatenate_last_axis(self, xs: Sequence[Tensor]) -> Tensor:
        first = xs[0]
        strides = [row_stride(x) for x in xs]
        total = sum(x.shape[-1] for x in xs)
        rows = math.prod(first.shape[:-1])
        if first.dtype not in self._gemm_dtypes or rows * total < SMALL or None in strides:
            return super().concatenate_last_axis(xs)  # type: ignore[misc]
        out, p = self._out((*first.shape[:-1], total), first.dtype)
        ctype = "float *[]" if first.dtype == np.float32 else "double *[]"
        src = self._ffi.new(ctype, [self._at(x) for x in xs])
        widths = self._i64(np.array([x.shape[-1] for x in xs], dtype=np.int64))
        lds = self._i64(np.array(strides, dtype=np.int64))
        self._fn("concat_cols", first.dtype)(len(xs), src, widths, lds, p, rows, total)
        return out

    def split_last_axis(self, x: Tensor, sizes: Sequence[int]) -> list[Tensor]:
        ld = row_stride(x)
        if x.dtype not in self._gemm_dtypes or x.size < SMALL or not ld:
            return super().split_last_axis(x, sizes)  # type: ignore[misc]
        rows = math.prod(x.shape[:-1])
        outs, ptrs = zip(*(self._out((*x.shape[:-1], s), x.dtype) for s in sizes), strict=True)
        ctype = "float *[]" if x.dtype == np.float32 else "double *[]"
        widths = self._i64(np.array(sizes, dtype=np.int64))
        self._fn("split_cols", x.dtype)(
            self._at(x), ld, rows, len(sizes), widths,
            self._ffi.new(ctype, list(ptrs)),
        )  # fmt: skip
        return list(outs)

    # -- helpers ------------------------------------------------------------------------------
    _gemm_dtypes = frozenset((np.dtype(np.float32), np.dtype(np.float64)))

    def _i64(self, arr: np.ndarray) -> Any:
        return self._ffi.from_buffer("int64_t[]", arr)

    def _dense_ptr(self, x: Tensor) -> Any:
        if x.is_dense:
            return self._ptr(x.storage.buffer)
        return self._ptr(np.ascontiguousarray(view(x)).reshape(-1))

    def _row_major(self, x: Tensor) -> tuple[Tensor, int]:
        """A 2-D operand with contiguous rows (a copy if ``x`` has none) and its row stride;
        the caller keeps the tensor alive while a kernel reads it."""
        ld = row_stride(x)
        if not ld:
            x = self.copy_strided(x)
            ld = x.shape[-1]
        return x, ld

    def _at(self, x: Tensor) -> Any:
        """Pointer to the first element of the view ``x``."""
        return self._ptr(x.storage.buffer, x.offset)

    def broadcast_row(self, row: Tensor, shape: tuple[int, ...]) -> Tensor:
        """``row`` [N] as a zero-stride view of ``shape`` [..., N] (no copy)."""
        strides = (0,) * (len(shape) - 1) + (row.strides[-1],)
        return Tensor(row.backend, row.storage, shape, strides, row.offset, row.dtype)
