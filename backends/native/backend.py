"""The native CPU backend: riftco's fast CPU backend, C kernels over numpy buffers.

The numpy ``cpu`` backend is the readable reference; every speed measure lives here.
Storage and transfers are the CPU backend's (flat numpy arrays), so the two exchange
nothing but pointers. Fused ops are one multi-threaded, vectorised pass each in C
(``kernels.c``, built on first use by ``build.py``; AVX2 and AVX-512 clones picked at
load time); matmul, linear layers, elementwise arithmetic, leading-axis sums, strided
copies and concatenation are in ``primitives.py``. Results come from a pool of recycled
buffers (``pool.py``), so a training step does not page-fault its memory back in.

float16 and bfloat16 are 2-byte storage (``half.py``, ``kernels_half.c``): cast and fill
convert in C (F16C where the CPU has it), the ops in ``low_precision_ops`` run on 2-byte
memory through the float32 kernels' own workers (``half_ops.py``, ``half_matmul.py`` and
their ``kernels_half_*.c``), and core widens every other op through float32 here.

Operands arrive as numpy-backed Tensors, possibly strided (``accepts_strided``): the
attention kernels read the model's permuted q, k, v views in place through their strides,
matmul reads transposed and column-sliced views in place; other kernels get a contiguous
copy only when their input is a view.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from riftco.backend import DeviceInfo
from riftco.backends.cpu.backend import CPUBackend
from riftco.backends.cpu.views import view
from riftco.env_values import choice, whole_number
from riftco.ops.fused.adam_multi import CLIP_EPS
from riftco.tensor import Storage, Tensor, dense_strides

from . import blas, build
from .attention import NativeAttention
from .half import HALF, use_f16c
from .half_matmul import NativeHalfMatmul
from .half_ops import NativeHalfOps
from .linear_gelu import NativeLinearGelu
from .pool import MIN_BYTES, BufferPool
from .primitives import NativePrimitives

#: MiB of freed result buffers kept for reuse (``RIFTCO_NATIVE_POOL_MB`` overrides).
POOL_MB = 256

_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_CTYPE = {np.dtype(np.float32): "float[]", np.dtype(np.float64): "double[]"}
_CTYPE.update(dict.fromkeys(HALF, "uint16_t[]"))  # 2-byte storage: the bits (half.py)


class _SingleThreadedBlas:
    """Context: OpenBLAS on one thread while our OpenMP team calls it (see blas.py)."""

    def __init__(self, found: blas.Blas | None) -> None:
        self._blas = found
        self._prev = 1

    def __enter__(self) -> None:
        if self._blas is not None:
            self._prev = self._blas.get_threads()
            if self._prev != 1:
                self._blas.set_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self._blas is not None and self._prev != 1:
            self._blas.set_threads(self._prev)


class NativeBackend(
    NativeHalfOps,
    NativeHalfMatmul,
    NativeAttention,
    NativeLinearGelu,
    NativePrimitives,
    CPUBackend,
):
    name: ClassVar[str] = "native"
    priority: ClassVar[int] = 5
    #: float16/bfloat16 as storage: the memory methods and ``cast`` here (half.py), every
    #: other op widened by core through float32 unless named in ``low_precision_ops``
    dtypes: ClassVar[frozenset[np.dtype]] = (
        frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64)) | HALF
    )
    #: ops run on 2-byte storage here, each passing conformance in float16 and bfloat16:
    #: float32 inside and one rounding (kernels_half_ops.c), or exact moves and selections
    #: of 2-byte values (numpy's, inherited); the rest are widened by core
    low_precision_ops: ClassVar[frozenset[str]] = frozenset(
        {"add", "sub", "mul", "div", "add_scalar", "mul_scalar", "matmul", "linear",
         "linear_backward", "linear_gelu", "linear_gelu_backward", "softmax",
         "softmax_backward", "layer_norm", "layer_norm_backward", "add_layer_norm",
         "add_layer_norm_backward", "gelu", "gelu_backward", "embedding", "cross_entropy",
         "cross_entropy_backward", "concatenate_last_axis", "split_last_axis", "where",
         "compare", "neg", "abs", "maximum", "minimum", "max", "argmax"}
    )  # fmt: skip
    #: named on the conformance certificate with their versions (an extra, not a requirement)
    libraries: ClassVar[tuple[str, ...]] = ("cffi",)

    def __init__(self, device_index: int = 0) -> None:
        super().__init__(device_index)
        mod = build.load()
        self._lib, self._ffi = mod.lib, mod.ffi
        self._f16c = use_f16c(self._lib)
        matmul = choice("RIFTCO_NATIVE_MATMUL", ("blas", "numpy"), "blas")
        found = None if matmul == "numpy" else blas.find()
        self._blas = found
        self._blas_guard = _SingleThreadedBlas(found)
        self._pool = BufferPool(whole_number("RIFTCO_NATIVE_POOL_MB", POOL_MB, "MiB") << 20)
        # the exact path a result's buffer takes when its last view dies
        self._pool.calibrate(lambda buf: Storage(buf, buf.size, self._release))
        self._allocated = self._peak = 0  # the probe was never a tensor
        self._fns: dict[tuple[str, np.dtype], Any] = {}
        self._gemm: dict[np.dtype, Any] = {}
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
        names = tuple(sorted(d.name for d in cls.dtypes))
        return [DeviceInfo(0, "host CPU (C kernels, OpenMP)", names, details)]

    # -- pointers ---------------------------------------------------------------------------
    def _fn(self, op: str, dtype: np.dtype) -> Any:
        fn = self._fns.get((op, dtype))
        if fn is None:
            fn = self._fns[op, dtype] = getattr(self._lib, f"{op}_{_SUFFIX[dtype]}")
        return fn

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

    def _out(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[Tensor, Any]:
        """A new dense result tensor (a recycled buffer when one fits) and its pointer.

        The tensor exists before the kernel runs, so a kernel that fails leaves nothing
        behind but a buffer that goes back to the pool."""
        n = math.prod(shape)
        flat = self._pool.take(dtype, n)
        allocated = self._allocated + flat.nbytes
        self._allocated = allocated
        if allocated > self._peak:
            self._peak = allocated
        tensor = Tensor(
            self, Storage(flat, n, self._release), shape, dense_strides(shape), 0, dtype
        )
        return tensor, self._ffi.from_buffer(_CTYPE[dtype], flat)

    def result(self, array: Any, dtype: np.dtype | None = None) -> Tensor:
        """Wrap a numpy result (of an op inherited from the CPU backend) as a tensor: the
        CPU backend's logic with the common case (a fresh, C-contiguous ndarray of the
        right dtype) first, since tiny ops spend a third of their time here."""
        arr = array
        if (
            type(arr) is not np.ndarray
            or (dtype is not None and arr.dtype != dtype)
            or not arr.flags.c_contiguous
        ):
            arr = np.asarray(arr, dtype=dtype, order="C")
        if arr.base is not None:  # a view of some input: never alias another tensor's buffer
            arr = arr.copy()
        flat = arr if arr.ndim == 1 else arr.reshape(-1)
        allocated = self._allocated + flat.nbytes
        self._allocated = allocated
        if allocated > self._peak:
            self._peak = allocated
        shape = arr.shape
        storage = Storage(flat, flat.size, self._release)
        return Tensor(self, storage, shape, dense_strides(shape), 0, arr.dtype)

    def _release(self, buffer: np.ndarray) -> None:
        nbytes = buffer.nbytes
        self._allocated -= nbytes
        if nbytes >= MIN_BYTES:
            self._pool.give(buffer)

    def _single_blas(self) -> _SingleThreadedBlas:
        return self._blas_guard

    # -- allocation -------------------------------------------------------------------------
    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> Tensor:
        if np.dtype(dtype) in self._gemm_dtypes or np.dtype(dtype) in HALF:
            return self._out(tuple(shape), np.dtype(dtype))[0]
        return super().allocate(shape, dtype)

    def memory_stats(self) -> dict[str, int]:
        return {**super().memory_stats(), "pooled_bytes": self._pool.held}

    def empty_cache(self) -> None:
        """Drop the recycled buffers (their memory goes back to the allocator)."""
        self._pool.clear()

    @staticmethod
    def _rows(x: Tensor) -> tuple[int, int]:
        """``(rows, cols)``: the row-wise kernels see ``x`` as rows of its last axis."""
        cols = x.shape[-1]
        return (x.size // cols if cols else 0), cols

    @staticmethod
    def _check(status: int, op: str) -> None:
        if status != 0:
            raise MemoryError(f"[{op}] the native kernel could not allocate its scratch memory")

    # -- elementwise fused ----------------------------------------------------------------------
    def gelu(self, x: Tensor, approximate: str) -> Tensor:
        if x.dtype in HALF:
            return self.half_gelu(x, approximate)
        y, yp = self._out(x.shape, x.dtype)
        self._fn("gelu", x.dtype)(self._in(x), yp, x.size, int(approximate == "tanh"))
        return y

    def gelu_backward(self, dy: Tensor, x: Tensor, approximate: str) -> Tensor:
        if x.dtype in HALF:
            return self.half_gelu_backward(dy, x, approximate)
        dx, p = self._out(x.shape, x.dtype)
        fn = self._fn("gelu_backward", x.dtype)
        fn(self._in(dy), self._in(x), p, x.size, int(approximate == "tanh"))
        return dx

    def softmax(self, x: Tensor) -> Tensor:
        if x.dtype in HALF:
            return self.half_softmax(x)
        y, p = self._out(x.shape, x.dtype)
        rows, cols = self._rows(x)
        self._fn("softmax", x.dtype)(self._in(x), p, rows, cols)
        return y

    def softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        if y.dtype in HALF:
            return self.half_softmax_backward(dy, y)
        dx, p = self._out(y.shape, y.dtype)
        rows, cols = self._rows(y)
        self._fn("softmax_backward", y.dtype)(self._in(dy), self._in(y), p, rows, cols)
        return dx

    def layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        if x.dtype in HALF:
            return self.half_layer_norm(x, gamma, beta, eps)
        dt, (rows, cols) = x.dtype, self._rows(x)
        y, yp = self._out(x.shape, dt)
        mean, mp = self._out(x.shape[:-1], dt)
        rstd, rp = self._out(x.shape[:-1], dt)
        fn = self._fn("layer_norm", dt)
        fn(self._in(x), self._in(gamma), self._in(beta), yp, mp, rp, rows, cols, eps)
        return y, mean, rstd

    def layer_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        if x.dtype in HALF:
            return self.half_ln_backward(dy, x, gamma, mean, rstd, None)
        dt, (rows, cols) = x.dtype, self._rows(x)
        dx, dxp = self._out(x.shape, dt)
        dg, dgp = self._out((cols,), dt)
        db, dbp = self._out((cols,), dt)
        args = (self._in(dy), self._in(x), self._in(gamma), self._in(mean), self._in(rstd))
        self._check(
            self._fn("layer_norm_backward", dt)(*args, dxp, dgp, dbp, rows, cols),
            "layer_norm_backward",
        )
        return dx, dg, db

    def add_layer_norm(
        self, x: Tensor, r: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        if x.dtype in HALF:
            return self.half_add_layer_norm(x, r, gamma, beta, eps)
        dt, (rows, cols) = x.dtype, self._rows(x)
        s, sp = self._out(x.shape, dt)
        y, yp = self._out(x.shape, dt)
        mean, mp = self._out(x.shape[:-1], dt)
        rstd, rp = self._out(x.shape[:-1], dt)
        ins = (self._in(x), self._in(r), self._in(gamma), self._in(beta))
        self._fn("add_layer_norm", dt)(*ins, sp, yp, mp, rp, rows, cols, eps)
        return s, y, mean, rstd

    def add_layer_norm_backward(
        self, dy: Tensor, ds: Tensor, s: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        if s.dtype in HALF:
            return self.half_ln_backward(dy, s, gamma, mean, rstd, ds)
        dt, (rows, cols) = s.dtype, self._rows(s)
        dsum, p = self._out(s.shape, dt)
        dg, dgp = self._out((cols,), dt)
        db, dbp = self._out((cols,), dt)
        ins = (self._in(dy), self._in(ds), self._in(s), self._in(gamma), self._in(mean),
               self._in(rstd))  # fmt: skip
        self._check(
            self._fn("add_layer_norm_backward", dt)(*ins, p, dgp, dbp, rows, cols),
            "add_layer_norm_backward",
        )
        return dsum, dg, db

    def rms_norm(self, x: Tensor, gamma: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        dt, (rows, cols) = x.dtype, self._rows(x)
        y, yp = self._out(x.shape, dt)
        rstd, rp = self._out(x.shape[:-1], dt)
        self._fn("rms_norm", dt)(self._in(x), self._in(gamma), yp, rp, rows, cols, eps)
        return y, rstd

    def rms_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor]:
        dt, (rows, cols) = x.dtype, self._rows(x)
        dx, dxp = self._out(x.shape, dt)
        dg, dgp = self._out((cols,), dt)
        ins = (self._in(dy), self._in(x), self._in(gamma), self._in(rstd))
        status = self._fn("rms_norm_backward", dt)(*ins, dxp, dgp, rows, cols)
        self._check(status, "rms_norm_backward")
        return dx, dg

    # -- embedding and cross-entropy --------------------------------------------------------
    def embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        if table.dtype in HALF:
            return self.half_embedding(table, ids)
        cols = table.shape[1]
        out, p = self._out((*ids.shape, cols), table.dtype)
        self._fn("embedding", table.dtype)(self._in(table), self._ids(ids), p, ids.size, cols)
        return out

    def embedding_backward(self, dy: Tensor, ids: Tensor, num_embeddings: int) -> Tensor:
        cols = dy.shape[-1]
        out, p = self._out((num_embeddings, cols), dy.dtype)
        fn = self._fn("embedding_backward", dy.dtype)
        status = fn(self._in(dy), self._ids(ids), p, ids.size, num_embeddings, cols)
        self._check(status, "embedding_backward")
        return out

    def cross_entropy(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        if logits.dtype in HALF:
            return self.half_cross_entropy(logits, targets)
        n, v = logits.shape
        loss, lp = self._out((n,), logits.dtype)
        lse, sp = self._out((n,), logits.dtype)
        self._fn("cross_entropy", logits.dtype)(self._in(logits), self._ids(targets), lp, sp, n, v)
        return loss, lse

    def cross_entropy_backward(
        self, dloss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
    ) -> Tensor:
        if logits.dtype in HALF:
            return self.half_cross_entropy_backward(dloss, logits, targets, lse)
        n, v = logits.shape
        g, gp = self._out((n, v), logits.dtype)
        dp = self._ptr(dloss.storage.buffer, dloss.offset)  # 1-D, any stride (often 0)
        fn = self._fn("cross_entropy_backward", logits.dtype)
        fn(dp, dloss.strides[0], self._in(logits), self._ids(targets), self._in(lse), gp, n, v)
        return g

    # -- attention ------------------------------------------------------------------------------
    def _views(self, *xs: Tensor) -> tuple[list[Any], Any]:
        ptrs, strides = [], []
        for x in xs:
            p, st = self._rows_view(x)
            ptrs.append(p)
            strides.extend(st)
        return ptrs, self._ffi.new("int64_t[]", strides)

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

    def adam_update_multi(
        self,
        params: list[Tensor],
        grads: list[Tensor],
        ms: list[Tensor],
        vs: list[Tensor],
        lr: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        step: int,
        grad_norm: Tensor | None,
        max_norm: float,
    ) -> None:
        """One C call over every tensor: one OpenMP team shares all their chunks, and the
        clip scale is computed from the norm in C. params, ms and vs are dense and own
        their storage (core's check); gradients may be views (this backend accepts them)."""
        dtype = params[0].dtype
        ctype = "float *[]" if dtype == np.float32 else "double *[]"
        # the pointer cdata (and any dense copy _in made of a strided gradient) must stay
        # referenced until the call returns: the pointer arrays hold bare addresses
        held = [[self._in(t) for t in ts] for ts in (params, grads, ms, vs)]
        ptrs = [self._ffi.new(ctype, h) for h in held]
        sizes = np.array([p.size for p in params], dtype=np.int64)
        norm = self._ffi.NULL if grad_norm is None else self._in(grad_norm)
        status = self._fn("adam_update_multi", dtype)(
            *ptrs, self._ffi.from_buffer("int64_t[]", sizes), len(params), lr, beta1, beta2,
            eps, weight_decay, 1.0 - beta1**step, 1.0 - beta2**step, norm, max_norm, CLIP_EPS,
        )  # fmt: skip
        self._check(status, "adam_update_multi")
