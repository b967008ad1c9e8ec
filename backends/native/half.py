"""float16 and bfloat16 storage on the native backend: conversions in C (``kernels_half.c``).

A backend that declares the 2-byte dtypes runs the memory methods and ``cast`` on them
itself; core widens every other op through float32 with this ``cast`` (HALF_SPEC,
``riftco.ops.widen``), so the conversion is on every widened op's path twice and is worth
a C pass: F16C (8 lanes per instruction) where the CPU has it, vectorised bit arithmetic
where not, rounding once to nearest even from float32 or float64 alike.

``RIFTCO_NATIVE_HALF=portable`` forces the bit-arithmetic path on a CPU with F16C (the
tests compare the two; the bench times both); ``auto`` (the default) asks cpuid once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from riftco.backends.cpu.views import view
from riftco.dtypes import LOW_PRECISION, bfloat16, float16
from riftco.env_values import choice
from riftco.tensor import Tensor

from .primitives import SMALL_GEMM, matrix_layout, row_stride

#: kernels_half.c's `kind` of each 2-byte dtype (RIFT_F16, RIFT_BF16); bfloat16 only where
#: ml_dtypes imports (riftco.dtypes says)
KIND: dict[np.dtype, int] = {float16: 0}
if bfloat16 is not None:
    KIND[bfloat16] = 1
HALF = frozenset(KIND)
assert HALF == LOW_PRECISION, "a low-precision dtype the native kernels do not know"
_WIDE = {np.dtype(np.float32): ("half_from_f32", "half_to_f32", "float[]"),
         np.dtype(np.float64): ("half_from_f64", "half_to_f64", "double[]")}  # fmt: skip


def use_f16c(lib: Any) -> bool:
    """Whether conversions take the F16C instructions: the CPU (and OS) support them and
    ``RIFTCO_NATIVE_HALF`` does not say ``portable``."""
    path = choice("RIFTCO_NATIVE_HALF", ("auto", "portable"), "auto")
    return path == "auto" and bool(lib.rift_half_f16c())


def bits(arr: np.ndarray) -> np.ndarray:
    """The 2-byte elements of a flat array as uint16 (what the C side reads and writes)."""
    return arr.view(np.uint16)


_BINARY = {
    "add": (0, np.add),
    "sub": (1, np.subtract),
    "mul": (2, np.multiply),
    "div": (3, np.divide),
}  # fmt: skip  (kernels_layout.c: RIFT_ADD ...)
_F32 = np.dtype(np.float32)


class NativeHalf:
    """Mixin for :class:`NativeBackend`: ``cast`` and ``fill`` on the 2-byte dtypes, and
    the ops it runs on them natively (``low_precision_ops``), each computing in float32
    and rounding once."""

    _ffi: Any
    _lib: Any
    _out: Any
    _f16c: bool
    _at: Any
    _in: Any
    _check: Any
    _rows: Any
    _ids: Any
    _ptr: Any
    _gemm: dict[np.dtype, Any]
    _single_blas: Any
    _row_major: Any
    result: Any

    def _u16(self, arr: np.ndarray) -> Any:
        return self._ffi.from_buffer("uint16_t[]", bits(arr))

    def convert(self, src: np.ndarray, dst: np.ndarray) -> None:
        """``dst[:] = src`` rounded once (flat, C-contiguous arrays of equal size), where
        one of the two is float16/bfloat16 and the other float32, float64 or 2-byte."""
        n = dst.size
        if src.size != n or not (src.flags.c_contiguous and dst.flags.c_contiguous):
            raise ValueError(f"[cast] convert needs flat arrays of one size, not {src.size}, {n}")
        if src.dtype in HALF and dst.dtype in HALF:
            self._lib.half_to_half(self._u16(src), self._u16(dst), n, KIND[src.dtype], self._f16c)
        elif dst.dtype in HALF:
            name, _, ctype = _WIDE[src.dtype]
            wide = self._ffi.from_buffer(ctype, src)
            getattr(self._lib, name)(wide, self._u16(dst), n, KIND[dst.dtype], self._f16c)
        else:
            _, name, ctype = _WIDE[dst.dtype]
            wide = self._ffi.from_buffer(ctype, dst)
            getattr(self._lib, name)(self._u16(src), wide, n, KIND[src.dtype], self._f16c)

    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        dtype = np.dtype(dtype)
        pair = {x.dtype, dtype}
        if pair.isdisjoint(HALF) or not pair <= HALF | _WIDE.keys():
            return super().cast(x, dtype)  # type: ignore[misc]
        out, _ = self._out(x.shape, dtype)
        if x.dtype == dtype:  # a copy; view(x) may be strided
            out.storage.buffer.reshape(x.shape)[...] = view(x)
            return out
        # a dense tensor may be the first x.size elements of a longer buffer
        dense = x.is_dense
        src = x.storage.buffer[: x.size] if dense else np.ascontiguousarray(view(x)).reshape(-1)
        self.convert(src, out.storage.buffer)
        return out

    def fill(self, x: Tensor, value: float) -> None:
        if x.dtype not in HALF:
            return super().fill(x, value)  # type: ignore[misc]
        one = np.empty(1, dtype=x.dtype)
        self.convert(np.array([value], dtype=np.float64), one)  # one rounding, from double
        bits(x.storage.buffer)[x.offset : x.offset + x.size] = bits(one)[0]
        return None

    # -- ops in 2-byte storage ---------------------------------------------------------------
    def _half_binary(self, op: str, a: Tensor, b: Tensor) -> Tensor:
        code, ufunc = _BINARY[op]
        sa, sb = row_stride(a), row_stride(b)
        if a.shape != b.shape or sa is None or sb is None or a.size == 0:
            # layouts the row kernel does not take (a broadcast scalar): numpy in float32,
            # rounded once by the cast
            with np.errstate(all="ignore"):
                wide = ufunc(view(a).astype(_F32), view(b).astype(_F32))
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
        """y in ``x.dtype``; mean and rstd in float32 (HALF_SPEC)."""
        rows, cols = self._rows(x)
        y, yp = self._out(x.shape, x.dtype)
        mean, mp = self._out(x.shape[:-1], _F32)
        rstd, rp = self._out(x.shape[:-1], _F32)
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
        mean, mp = self._out(x.shape[:-1], _F32)
        rstd, rp = self._out(x.shape[:-1], _F32)
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
        """Loss rows and lse in float32 (HALF_SPEC)."""
        n, v = logits.shape
        loss, lp = self._out((n,), _F32)
        lse, sp = self._out((n,), _F32)
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

    def _widened(self, method: Any, *args: Any) -> Any:
        """``method`` (the float32 one) on float32 copies of the 2-byte tensor operands,
        its result (or each of its results) rounded once back: the layouts and sizes the C
        kernels do not take."""
        dtype = next(a.dtype for a in args if isinstance(a, Tensor))
        wide = [self.cast(a, _F32) if isinstance(a, Tensor) else a for a in args]
        out = method(*wide)
        if isinstance(out, tuple):
            return tuple(self.cast(o, dtype) for o in out)
        return self.cast(out, dtype)

    def _half_matmul(
        self, a: Tensor, b: Tensor, ta: bool, tb: bool, bias: Tensor | None, gelu: str = ""
    ) -> tuple[Tensor, Tensor | None] | None:
        """``(op(a) op(b) + bias, gelu of it or None)`` by the C kernel, for 2-D operands
        each with a unit stride; None otherwise. ``gelu``: "" none, else its form."""
        gemm = self._gemm.get(_F32)
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
        a_t, a32 = self._out((m * k,), _F32)  # float32 copies of A and B (pooled scratch)
        b_t, b32 = self._out((k * n,), _F32)
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
        """``(dx, dw, db)`` of ``y = x @ w + b`` (``gelu``: of ``gelu(h)``, ``h`` that sum):
        the float32 kernel on float32 copies made in one C call, the gradients rounded
        once. Nothing saved but the casts' dispatch: the passes over memory are the
        widened path's, and so are the bits."""
        gemm = self._gemm.get(_F32)
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
        floats = 2 * m * k + 2 * k * n + m * n + n + (2 * m * n if gelu else 0)
        scratch, sp = self._out((floats,), _F32)  # pooled: back to the pool below
        with self._single_blas():
            status = self._lib.half_linear_backward(
                gemm, m, n, k, self._at(x), ldx, self._at(w), ldw, self._at(dy), ldy, hp, ldh,
                dxp, dwp, dbp, sp, int(gelu == "tanh") if gelu else -1, KIND[x.dtype],
                self._f16c,
            )  # fmt: skip
        del sp, scratch  # the pointer first: with it alive, the pool refuses the buffer
        self._check(status, "linear_gelu_backward" if gelu else "linear_backward")
        return dx, dw, db
