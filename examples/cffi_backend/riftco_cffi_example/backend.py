"""A riftco backend whose kernels are C, called through cffi (API mode).

What it shows a backend author:

* buffers are C memory (``rc_alloc``), freed by a Python finalizer (``ffi.gc``);
* only the required primitives are written (float32 data, int32 indices); every fused op
  this class does not define runs as riftco's composite of these primitives;
* two fused ops (``softmax``, ``layer_norm``) are native C: defining a method named in
  ``riftco.backend.FUSED_OPS`` is all it takes;
* ``accepts_strided = False``: riftco hands every kernel dense operands, so the only
  strided code is ``copy_strided`` (and ``to_numpy`` of a view).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import riftco
from riftco.backend import BackendBase, DeviceInfo, ElementwiseByName
from riftco.tensor import Tensor, dense_strides

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
_UNARY = {"neg": 0, "exp": 1, "log": 2, "sqrt": 3, "rsqrt": 4, "tanh": 5, "abs": 6}
_BINARY = {"add": 0, "sub": 1, "mul": 2, "div": 3, "maximum": 4, "minimum": 5}
_COMPARE = {"lt": 0, "le": 1, "gt": 2, "ge": 3, "eq": 4, "ne": 5}


def _kernels() -> tuple[Any, Any]:
    from ._kernels import ffi, lib  # built at install time by cffi_modules

    return ffi, lib


class CBuffer:
    """C memory for one storage. ``ffi.gc`` calls ``rc_free`` when the buffer is collected."""

    __slots__ = ("ptr", "nbytes")

    def __init__(self, nbytes: int) -> None:
        ffi, lib = _kernels()
        raw = lib.rc_alloc(max(nbytes, 4))
        if raw == ffi.NULL:
            raise MemoryError(f"[cffi_example] could not allocate {nbytes} bytes")
        self.ptr = ffi.gc(raw, lib.rc_free)
        self.nbytes = nbytes


class CffiBackend(ElementwiseByName, BackendBase):
    name: ClassVar[str] = "cffi_example"
    priority: ClassVar[int] = -10  # an example: never chosen by "auto" over a real backend
    protocol_version: ClassVar[tuple[int, int]] = (1, 0)
    dtypes: ClassVar[frozenset[np.dtype]] = frozenset({F32, I32})
    accepts_strided: ClassVar[bool] = False
    #: Known skips/xfails for ``riftco conformance cffi_example`` (relative to this module).
    conformance_expectations: ClassVar[str] = "conformance_expectations.json"

    def __init__(self, device_index: int = 0) -> None:
        super().__init__(device_index)
        self.ffi, self.lib = _kernels()

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        try:
            _kernels()
        except ImportError as exc:  # never raise from a probe: report why instead
            return False, f"compiled kernels are missing ({exc}); reinstall riftco-cffi-example"
        return True, ""

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        if not cls.is_available()[0]:
            return []
        return [DeviceInfo(0, "host CPU (C kernels via cffi)", ("float32", "int32"))]

    # -- helpers ------------------------------------------------------------------------
    def _new(self, shape: Sequence[int], dtype: np.dtype) -> Tensor:
        shape = tuple(int(s) for s in shape)
        return self.wrap(CBuffer(math.prod(shape) * 4), shape, np.dtype(dtype))

    def _p(self, x: Tensor, ctype: str = "float *") -> Any:
        return self.ffi.cast(ctype, x.storage.buffer.ptr)

    def _i64(self, values: Sequence[int]) -> Any:
        return self.ffi.new("int64_t[]", [int(v) for v in values] or [0])

    # -- allocation and transfer --------------------------------------------------------
    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> Tensor:
        return self._new(shape, dtype)

    def from_numpy(self, array: np.ndarray) -> Tensor:
        arr = np.array(array, order="C", copy=True)
        if arr.dtype not in self.dtypes:
            raise riftco.DTypeError(
                f"[from_numpy] cffi_example holds float32/int32; got {arr.dtype}"
            )
        out = self._new(arr.shape, arr.dtype)
        if arr.size:
            self.ffi.memmove(out.storage.buffer.ptr, self.ffi.from_buffer(arr), arr.nbytes)
        return out

    def to_numpy(self, x: Tensor) -> np.ndarray:
        out = np.empty(x.shape, dtype=x.dtype)
        if x.size:
            self.lib.rc_copy_strided(
                self._p(x, "uint32_t *"),
                self.ffi.cast("uint32_t *", self.ffi.from_buffer(out)),
                x.ndim,
                self._i64(x.shape),
                self._i64(x.strides),
                x.offset,
            )
        return out

    def copy_strided(self, x: Tensor) -> Tensor:
        out = self._new(x.shape, x.dtype)
        if x.size:
            self.lib.rc_copy_strided(
                self._p(x, "uint32_t *"),
                self._p(out, "uint32_t *"),
                x.ndim,
                self._i64(x.shape),
                self._i64(x.strides),
                x.offset,
            )
        return out

    def fill(self, x: Tensor, value: float) -> None:
        if x.dtype == I32:
            self.lib.rc_fill_i32(self._p(x, "int32_t *"), x.size, int(value))
        else:
            self.lib.rc_fill_f32(self._p(x), x.size, float(value))

    def synchronize(self) -> None:
        return None  # every kernel runs synchronously

    def memory_stats(self) -> dict[str, int]:
        return {
            "allocated_bytes": int(self.lib.rc_allocated_bytes()),
            "peak_bytes": int(self.lib.rc_peak_bytes()),
        }

    # -- elementwise ----------------------------------------------------------------------
    # ElementwiseByName turns neg/exp/.../abs into unary(op) and add/.../minimum into
    # binary(op): one C entry point each, selected by an op code.
    def unary(self, op: str, x: Tensor) -> Tensor:
        out = self._new(x.shape, x.dtype)
        self.lib.rc_unary(_UNARY[op], self._p(x), self._p(out), x.size)
        return out

    def binary(self, op: str, a: Tensor, b: Tensor) -> Tensor:
        out = self._new(a.shape, a.dtype)
        self.lib.rc_binary(_BINARY[op], self._p(a), self._p(b), self._p(out), a.size)
        return out

    def _scalar(self, code: int, x: Tensor, value: float) -> Tensor:
        out = self._new(x.shape, x.dtype)
        self.lib.rc_scalar(code, self._p(x), float(value), self._p(out), x.size)
        return out

    def add_scalar(self, x: Tensor, value: float) -> Tensor:
        return self._scalar(0, x, value)

    def mul_scalar(self, x: Tensor, value: float) -> Tensor:
        return self._scalar(1, x, value)

    def pow_scalar(self, x: Tensor, value: float) -> Tensor:
        return self._scalar(2, x, value)

    def where(self, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
        out = self._new(a.shape, a.dtype)
        self.lib.rc_where(self._p(cond), self._p(a), self._p(b), self._p(out), a.size)
        return out

    def compare(self, a: Tensor, b: Tensor, op: str) -> Tensor:
        out = self._new(a.shape, a.dtype)
        self.lib.rc_compare(_COMPARE[op], self._p(a), self._p(b), self._p(out), a.size)
        return out

    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        out = self._new(x.shape, dtype)
        if np.dtype(dtype) == I32:
            self.lib.rc_cast_f32_i32(self._p(x), self._p(out, "int32_t *"), x.size)
        else:
            self.lib.rc_cast_i32_f32(self._p(x, "int32_t *"), self._p(out), x.size)
        return out

    # -- reductions -----------------------------------------------------------------------
    def _reduce(self, is_max: int, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        kept = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        kept_strides = iter(dense_strides(kept))
        out_strides = [0 if i in axes else next(kept_strides) for i in range(x.ndim)]
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keepdims else kept
        out = self._new(shape, x.dtype)
        self.lib.rc_reduce(
            is_max,
            self._p(x),
            self._p(out),
            x.ndim,
            self._i64(x.shape),
            self._i64(out_strides),
            math.prod(kept),
        )
        return out

    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        return self._reduce(0, x, axes, keepdims)

    def max(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        return self._reduce(1, x, axes, keepdims)

    def argmax(self, x: Tensor) -> Tensor:
        out = self._new(x.shape[:-1], I32)
        cols = x.shape[-1]
        self.lib.rc_argmax(self._p(x), self._p(out, "int32_t *"), x.size // cols, cols)
        return out

    # -- linear algebra and layout --------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        m = a.shape[-1] if transpose_a else a.shape[-2]
        k = a.shape[-2] if transpose_a else a.shape[-1]
        n = b.shape[-2] if transpose_b else b.shape[-1]
        batch = a.shape[:-2]
        out = self._new(batch + (m, n), a.dtype)
        self.lib.rc_matmul(
            self._p(a),
            self._p(b),
            self._p(out),
            math.prod(batch),
            m,
            k,
            n,
            int(transpose_a),
            int(transpose_b),
        )
        return out

    def concatenate_last_axis(self, xs: Sequence[Tensor]) -> Tensor:
        width = sum(x.shape[-1] for x in xs)
        out = self._new(xs[0].shape[:-1] + (width,), xs[0].dtype)
        rows, col = math.prod(xs[0].shape[:-1]), 0
        for x in xs:
            w = x.shape[-1]
            self.lib.rc_copy_block(
                self._p(x, "uint32_t *"), w, 0, self._p(out, "uint32_t *"), width, col, rows, w
            )
            col += w
        return out

    def split_last_axis(self, x: Tensor, sizes: Sequence[int]) -> list[Tensor]:
        rows, width, col, pieces = math.prod(x.shape[:-1]), x.shape[-1], 0, []
        for w in sizes:
            piece = self._new(x.shape[:-1] + (w,), x.dtype)
            self.lib.rc_copy_block(
                self._p(x, "uint32_t *"), width, col, self._p(piece, "uint32_t *"), w, 0, rows, w
            )
            pieces.append(piece)
            col += w
        return pieces

    # -- fused ops written in C (every other fused op uses riftco's composite) -------------
    def softmax(self, x: Tensor) -> Tensor:
        out = self._new(x.shape, x.dtype)
        cols = x.shape[-1]
        if x.size:
            self.lib.rc_softmax(self._p(x), self._p(out), x.size // cols, cols)
        return out

    def layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        cols = x.shape[-1]
        y = self._new(x.shape, x.dtype)
        mean, rstd = self._new(x.shape[:-1], x.dtype), self._new(x.shape[:-1], x.dtype)
        if x.size:
            self.lib.rc_layer_norm(
                self._p(x),
                self._p(gamma),
                self._p(beta),
                float(eps),
                self._p(y),
                self._p(mean),
                self._p(rstd),
                x.size // cols,
                cols,
            )
        return y, mean, rstd
