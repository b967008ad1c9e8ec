"""The native CPU backend: the numpy backend with fused ops in C and a steadier matmul.

Storage, transfers and most primitives are inherited from :class:`CPUBackend`. What numpy
does badly is the fused ops: each is a chain of full-size temporaries (GELU's tanh form
makes seven), so here each is one multi-threaded, vectorised pass in C (``kernels.c``,
built on first use by ``build.py``; AVX2 and AVX-512 clones picked at load time).

2-D matmul keeps numpy's own OpenBLAS kernel but calls it single-threaded from each thread
of our OpenMP team, one band of rows each (``blas.py`` says why: spinning BLAS threads
made the step bimodal on a busy machine). Batched matmul stays numpy's.

Operands arrive as numpy-backed Tensors, possibly strided (``accepts_strided``): the
attention kernels read the model's permuted q, k, v views in place through their strides;
every other kernel gets a contiguous copy only when its input is a view.

Deviation from the brief: no C elementwise primitive. Measured on the GPT step, the
remaining primitives (bias adds, bias-gradient sums, concatenations, strided copies) take
about 10% of the time and numpy's ufuncs are already vectorised single passes; what is left
is BLAS matmul (~60%) and per-op Python in core (~6-9%), which C primitives do not change.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
from riftco.backend import DeviceInfo
from riftco.backends.cpu.backend import CPUBackend, view
from riftco.tensor import Tensor

from . import blas, build

_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_CTYPE = {np.dtype(np.float32): "float[]", np.dtype(np.float64): "double[]"}


class NativeBackend(CPUBackend):
    name: ClassVar[str] = "native"
    priority: ClassVar[int] = 5

    def __init__(self, device_index: int = 0) -> None:
        super().__init__(device_index)
        mod = build.load()
        self._lib, self._ffi = mod.lib, mod.ffi
        found = None if os.environ.get("RIFTCO_NATIVE_MATMUL") == "numpy" else blas.find()
        self._blas = found
        self._gemm = {}
        if found is not None:
            self._gemm = {
                np.dtype(np.float32): self._ffi.cast("void *", found.sgemm),
                np.dtype(np.float64): self._ffi.cast("void *", found.dgemm),
            }

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        try:
            build.load()
        except Exception as exc:  # BuildError, or anything odd: a probe never raises
            return False, str(exc)
        return True, ""

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        threads = 1
        try:
            threads = int(build.load().lib.rift_num_threads())
        except Exception:
            return []
        details = {"threads": threads, "flags": " ".join(build.build_flags())}
        return [
            DeviceInfo(
                0, "host CPU (C kernels, OpenMP)", ("float32", "float64", "int32", "int64"), details
            )
        ]

    # -- pointers ---------------------------------------------------------------------------
    def _fn(self, op: str, dtype: np.dtype) -> Any:
        return getattr(self._lib, f"{op}_{_SUFFIX[dtype]}")

    def _ptr(self, arr: np.ndarray, offset: int = 0) -> Any:
        """Pointer to element ``offset`` of a C-contiguous (flat storage) numpy array."""
        p = self._ffi.from_buffer(_CTYPE[arr.dtype], arr)
        return p + offset if offset else p

    def _in(self, x: Tensor) -> Any:
        """Pointer to a dense copy of ``x`` (no copy when ``x`` already is dense)."""
        if x.is_dense:
            return self._ptr(x.storage.buffer)
        return self._ptr(np.ascontiguousarray(view(x)))

    def _rows_view(self, x: Tensor) -> tuple[Any, list[int]]:
        """Pointer and (b, h, t) element strides of a [B, H, T, D] view, whose last axis the
        kernels need contiguous (a copy makes it so otherwise)."""
        if x.strides[-1] == 1 or x.shape[-1] == 1:
            return self._ptr(x.storage.buffer, x.offset), list(x.strides[:3])
        arr = np.ascontiguousarray(view(x))
        return self._ptr(arr.reshape(-1)), [s // arr.itemsize for s in arr.strides[:3]]

    def _ids(self, ids: Tensor) -> Any:
        arr = np.ascontiguousarray(view(ids), dtype=np.int64).reshape(-1)
        return self._ffi.from_buffer("int64_t[]", arr)

    def _new(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, Any]:
        arr = np.empty(shape, dtype=dtype)
        return arr, self._ptr(arr.reshape(-1))

    @staticmethod
    def _rows(x: Tensor) -> tuple[int, int]:
        """``(rows, cols)``: the row-wise kernels see ``x`` as rows of its last axis."""
        cols = x.shape[-1]
        return (x.size // cols if cols else 0), cols

    @staticmethod
    def _check(status: int, op: str) -> None:
        if status != 0:
            raise MemoryError(f"[{op}] the native kernel could not allocate its scratch memory")

    # -- matmul -------------------------------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        """2-D products in bands of rows, one single-threaded BLAS call per OpenMP thread
        (see ``blas.py`` for why); batched products keep numpy's matmul."""
        gemm = self._gemm.get(a.dtype)
        if gemm is None or a.ndim != 2 or 0 in a.shape or 0 in b.shape:
            return super().matmul(a, b, transpose_a, transpose_b)
        m, k = (a.shape[1], a.shape[0]) if transpose_a else a.shape
        n = b.shape[0] if transpose_b else b.shape[1]
        out, op = self._new((m, n), a.dtype)
        ap, bp = self._in(a), self._in(b)
        fn = self._fn("blas_matmul", a.dtype)
        assert self._blas is not None  # a gemm exists only where the BLAS loaded
        prev = self._blas.get_threads()
        self._blas.set_threads(1)
        try:
            fn(
                gemm,
                int(transpose_a),
                int(transpose_b),
                m,
                n,
                k,
                ap,
                a.shape[1],
                bp,
                b.shape[1],
                op,
                n,
            )
        finally:
            self._blas.set_threads(prev)
        return self.result(out)

    # -- elementwise fused ----------------------------------------------------------------------
    def gelu(self, x: Tensor, approximate: str) -> Tensor:
        y, yp = self._new(x.shape, x.dtype)
        self._fn("gelu", x.dtype)(self._in(x), yp, x.size, int(approximate == "tanh"))
        return self.result(y)

    def gelu_backward(self, dy: Tensor, x: Tensor, approximate: str) -> Tensor:
        dx, p = self._new(x.shape, x.dtype)
        fn = self._fn("gelu_backward", x.dtype)
        fn(self._in(dy), self._in(x), p, x.size, int(approximate == "tanh"))
        return self.result(dx)

    def softmax(self, x: Tensor) -> Tensor:
        y, p = self._new(x.shape, x.dtype)
        rows, cols = self._rows(x)
        self._fn("softmax", x.dtype)(self._in(x), p, rows, cols)
        return self.result(y)

    def softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        dx, p = self._new(y.shape, y.dtype)
        rows, cols = self._rows(y)
        self._fn("softmax_backward", y.dtype)(self._in(dy), self._in(y), p, rows, cols)
        return self.result(dx)

    def layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        dt, (rows, cols) = x.dtype, self._rows(x)
        y, yp = self._new(x.shape, dt)
        mean, mp = self._new(x.shape[:-1], dt)
        rstd, rp = self._new(x.shape[:-1], dt)
        fn = self._fn("layer_norm", dt)
        fn(self._in(x), self._in(gamma), self._in(beta), yp, mp, rp, rows, cols, eps)
        return self.result(y), self.result(mean), self.result(rstd)

    def layer_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        dt, (rows, cols) = x.dtype, self._rows(x)
        dx, dxp = self._new(x.shape, dt)
        dg, dgp = self._new((cols,), dt)
        db, dbp = self._new((cols,), dt)
        args = (self._in(dy), self._in(x), self._in(gamma), self._in(mean), self._in(rstd))
        self._check(
            self._fn("layer_norm_backward", dt)(*args, dxp, dgp, dbp, rows, cols),
            "layer_norm_backward",
        )
        return self.result(dx), self.result(dg), self.result(db)

    # -- embedding and cross-entropy --------------------------------------------------------
    def embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        cols = table.shape[1]
        out, p = self._new((*ids.shape, cols), table.dtype)
        self._fn("embedding", table.dtype)(self._in(table), self._ids(ids), p, ids.size, cols)
        return self.result(out)

    def embedding_backward(self, dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
        cols = dy.shape[-1]
        out, p = self._new((num_embeddings, cols), dy.dtype)
        fn = self._fn("embedding_backward", dy.dtype)
        fn(self._in(dy), self._ids(ids), p, ids.size, num_embeddings, cols)
        return self.result(out)

    def cross_entropy(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        n, v = logits.shape
        loss, lp = self._new((n,), logits.dtype)
        lse, sp = self._new((n,), logits.dtype)
        self._fn("cross_entropy", logits.dtype)(self._in(logits), self._ids(targets), lp, sp, n, v)
        return self.result(loss), self.result(lse)

    def cross_entropy_backward(
        self, dloss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
    ) -> Tensor:
        n, v = logits.shape
        g, gp = self._new((n, v), logits.dtype)
        dp = self._ptr(dloss.storage.buffer, dloss.offset)  # 1-D, any stride (often 0)
        fn = self._fn("cross_entropy_backward", logits.dtype)
        fn(dp, dloss.strides[0], self._in(logits), self._ids(targets), self._in(lse), gp, n, v)
        return self.result(g)

    # -- attention ------------------------------------------------------------------------------
    def _views(self, *xs: Tensor) -> tuple[list[Any], Any]:
        ptrs, strides = [], []
        for x in xs:
            p, st = self._rows_view(x)
            ptrs.append(p)
            strides.extend(st)
        return ptrs, self._ffi.new("int64_t[]", strides)

    def _attention_forward(
        self, op: str, q: Tensor, k: Tensor, v: Tensor, stat_shape: tuple[int, ...],
        scale: float, causal: bool,
    ) -> tuple[Tensor, Tensor]:  # fmt: skip
        """Both forward kernels take q, k, v views and write ``out`` plus one statistic
        (``probs`` or ``lse``); only the statistic's shape differs."""
        b, h, t, d = q.shape
        (qp, kp, vp), st = self._views(q, k, v)
        out, outp = self._new(q.shape, q.dtype)
        stat, sp = self._new(stat_shape, q.dtype)
        status = self._fn(op, q.dtype)(qp, kp, vp, st, outp, sp, b, h, t, d, scale, int(causal))
        self._check(status, op)
        return self.result(out), self.result(stat)

    def attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        b, h, t, _ = q.shape
        return self._attention_forward("attention", q, k, v, (b, h, t, t), scale, causal)

    def attention_backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        b, h, t, d = q.shape
        (dop, qp, kp, vp), st = self._views(dout, q, k, v)
        dq, dqp = self._new(q.shape, q.dtype)
        dk, dkp = self._new(q.shape, q.dtype)
        dv, dvp = self._new(q.shape, q.dtype)
        status = self._fn("attention_backward", q.dtype)(
            dop, qp, kp, vp, st, self._in(probs), dqp, dkp, dvp, b, h, t, d, scale
        )
        self._check(status, "attention_backward")
        return self.result(dq), self.result(dk), self.result(dv)

    def flash_attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        return self._attention_forward("flash_attention", q, k, v, q.shape[:-1], scale, causal)

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
        b, h, t, d = q.shape
        (dop, qp, kp, vp, op), st = self._views(dout, q, k, v, out)
        dq, dqp = self._new(q.shape, q.dtype)
        dk, dkp = self._new(q.shape, q.dtype)
        dv, dvp = self._new(q.shape, q.dtype)
        status = self._fn("flash_attention_backward", q.dtype)(
            dop, qp, kp, vp, op, st, self._in(lse), dqp, dkp, dvp, b, h, t, d, scale, int(causal)
        )
        self._check(status, "flash_attention_backward")
        return self.result(dq), self.result(dk), self.result(dv)

    # -- optimizer ------------------------------------------------------------------------------
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
        # core guarantees param, m, v dense and owning their storage
        self._fn("adam_update", param.dtype)(
            self._ptr(param.storage.buffer),
            self._in(grad),
            self._ptr(m.storage.buffer),
            self._ptr(v.storage.buffer),
            param.size,
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            1.0 - beta1**step,
            1.0 - beta2**step,
        )
