"""The numpy CPU backend: the living definition of every riftco operation.

Short, obvious numpy with no cleverness: every method is the textbook formula, so a
reader checks it against the math, and the conformance suite runs it in float64 as the
reference every other backend is checked against. Speed is the ``native`` backend's job.
Buffers are flat numpy arrays; views reach kernels as ``as_strided`` arrays, so this
backend accepts strided input and never needs a copy for a transpose or a broadcast.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from riftco import ieee
from riftco.backend import BackendBase, DeviceInfo
from riftco.dtypes import LOW_PRECISION
from riftco.ieee import LOUD, quiet
from riftco.tensor import Storage, Tensor, dense_strides

from .fused import FusedOps
from .optim import OptimOps
from .reductions import pairwise_sum
from .views import view

__all__ = ["CPUBackend", "view"]  # view is imported from here by code written before views.py

_COMPARE = {
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}


def _rsqrt(v: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(v)


def _plus(v: np.ndarray, value: float) -> np.ndarray:
    return v + v.dtype.type(value)  # the scalar in the tensor's dtype


def _times(v: np.ndarray, value: float) -> np.ndarray:
    return v * v.dtype.type(value)


def _ieee(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` with numpy's floating-point warnings off. IEEE results (inf, NaN) are what
    every op's spec asks for, so they are not news; and under ``-W error`` a warning would
    become an exception that stops an op half way."""

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        with quiet():
            return method(*args, **kwargs)

    return run


class CPUBackend(FusedOps, OptimOps, BackendBase):
    name: ClassVar[str] = "cpu"
    priority: ClassVar[int] = 0
    #: float16 and bfloat16 (with ml_dtypes) as storage: the memory methods and ``cast``
    #: run here, every other op in float32 rounded once (core's ``riftco.ops.widen``).
    dtypes: ClassVar[frozenset[np.dtype]] = (
        frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64)) | LOW_PRECISION
    )
    accepts_strided: ClassVar[bool] = True

    def __init__(self, device_index: int = 0) -> None:
        super().__init__(device_index)
        self._allocated = 0
        self._peak = 0

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [
            DeviceInfo(
                0,
                "host CPU (numpy)",
                tuple(sorted(d.name for d in cls.dtypes)),
                {"threads": os.cpu_count() or 1},
            )
        ]

    # -- helpers ------------------------------------------------------------------------
    def _release(self, buffer: np.ndarray) -> None:
        self._allocated -= buffer.nbytes

    def result(self, array: Any, dtype: np.dtype | None = None) -> Tensor:
        """Wrap a numpy result as a dense tensor of this backend (copying only if needed).

        Builds the Storage and Tensor itself: the generic ``wrap`` imports inside the call
        and costs ~2 us more, most of a tiny op's whole dispatch."""
        # NOTE: np.asarray with order="C", not np.ascontiguousarray, which turns 0-d into (1,)
        arr = np.asarray(array, dtype=dtype, order="C")
        if arr.base is not None:  # a view of some input: never alias another tensor's buffer
            arr = arr.copy()
        flat = arr.reshape(-1)
        self._allocated += flat.nbytes
        self._peak = max(self._peak, self._allocated)
        shape = arr.shape
        storage = Storage(flat, flat.size, self._release)
        return Tensor(self, storage, shape, dense_strides(shape), 0, arr.dtype)

    # -- allocation and transfer ------------------------------------------------------------
    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> Tensor:
        return self.result(np.empty(shape, dtype=dtype))

    def from_numpy(self, array: np.ndarray) -> Tensor:
        return self.result(np.array(array, copy=True, order="C"))

    def to_numpy(self, x: Tensor) -> np.ndarray:
        return np.array(view(x), copy=True, order="C")

    def copy_strided(self, x: Tensor) -> Tensor:
        return self.result(np.array(view(x), copy=True, order="C"))

    def fill(self, x: Tensor, value: float) -> None:
        x.storage.buffer[x.offset : x.offset + x.size] = value

    def synchronize(self) -> None:
        return None

    def memory_stats(self) -> dict[str, int]:
        return {"allocated_bytes": self._allocated, "peak_bytes": self._peak}

    def reset_peak(self) -> None:
        self._peak = self._allocated

    # -- elementwise --------------------------------------------------------------------------
    def neg(self, x: Tensor) -> Tensor:
        return self.result(-view(x))

    def exp(self, x: Tensor) -> Tensor:
        v = view(x)
        try:
            return self.result(np.exp(v))
        except LOUD:  # see ``riftco.ieee``: IEEE is the answer, not an error
            return self.result(ieee.call(np.exp, v))

    def log(self, x: Tensor) -> Tensor:
        v = view(x)
        try:
            return self.result(np.log(v))
        except LOUD:  # see ``riftco.ieee``: IEEE is the answer, not an error
            return self.result(ieee.call(np.log, v))

    def sqrt(self, x: Tensor) -> Tensor:
        v = view(x)
        try:
            return self.result(np.sqrt(v))
        except LOUD:  # see ``riftco.ieee``: IEEE is the answer, not an error
            return self.result(ieee.call(np.sqrt, v))

    def rsqrt(self, x: Tensor) -> Tensor:
        v = view(x)
        try:
            return self.result(_rsqrt(v), x.dtype)
        except LOUD:
            return self.result(ieee.call(_rsqrt, v), x.dtype)

    def tanh(self, x: Tensor) -> Tensor:
        return self.result(np.tanh(view(x)))

    def abs(self, x: Tensor) -> Tensor:
        return self.result(np.abs(view(x)))

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        va, vb = view(a), view(b)
        try:
            return self.result(np.add(va, vb))
        except LOUD:
            return self.result(ieee.call(np.add, va, vb))

    def sub(self, a: Tensor, b: Tensor) -> Tensor:
        va, vb = view(a), view(b)
        try:
            return self.result(np.subtract(va, vb))
        except LOUD:
            return self.result(ieee.call(np.subtract, va, vb))

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        va, vb = view(a), view(b)
        try:
            return self.result(np.multiply(va, vb))
        except LOUD:
            return self.result(ieee.call(np.multiply, va, vb))

    def div(self, a: Tensor, b: Tensor) -> Tensor:
        va, vb = view(a), view(b)
        try:
            return self.result(np.divide(va, vb))
        except LOUD:
            return self.result(ieee.call(np.divide, va, vb))

    def maximum(self, a: Tensor, b: Tensor) -> Tensor:
        return self.result(np.maximum(view(a), view(b)))

    def minimum(self, a: Tensor, b: Tensor) -> Tensor:
        return self.result(np.minimum(view(a), view(b)))

    def add_scalar(self, x: Tensor, value: float) -> Tensor:
        v = view(x)
        try:
            return self.result(v + x.dtype.type(value))  # 1e308 is inf in float32
        except LOUD:
            return self.result(ieee.call(_plus, v, value))

    def mul_scalar(self, x: Tensor, value: float) -> Tensor:
        v = view(x)
        try:
            return self.result(v * x.dtype.type(value))  # 1e308 is inf in float32
        except LOUD:
            return self.result(ieee.call(_times, v, value))

    def pow_scalar(self, x: Tensor, value: float) -> Tensor:
        with quiet():
            if float(value).is_integer() and value >= 0:
                return self.result(np.power(view(x), int(value)), x.dtype)
            return self.result(np.power(view(x), x.dtype.type(value)))

    def where(self, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
        return self.result(np.where(view(cond) != 0, view(a), view(b)), a.dtype)

    def compare(self, a: Tensor, b: Tensor, op: str) -> Tensor:
        return self.result(_COMPARE[op](view(a), view(b)), a.dtype)

    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        v = view(x)
        if dtype.kind != "i":  # to float: round to nearest, overflow to +-inf
            with quiet():
                return self.result(v.astype(dtype))
        # to int: truncate toward zero, saturate to the range, NaN -> 0
        info = np.iinfo(dtype)
        t = np.trunc(v) if v.dtype.kind == "f" else v
        out = np.zeros(v.shape, dtype=dtype)
        with quiet():
            out[t >= info.max] = info.max
            out[t <= info.min] = info.min
            inside = (t > info.min) & (t < info.max)  # False for NaN
        out[inside] = t[inside].astype(dtype)
        return self.result(out)

    # -- reductions -----------------------------------------------------------------------------
    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        return self.result(pairwise_sum(view(x), axes, keepdims), x.dtype)

    def max(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        return self.result(np.max(view(x), axis=axes, keepdims=keepdims), x.dtype)

    def argmax(self, x: Tensor) -> Tensor:
        return self.result(np.argmax(view(x), axis=-1), np.int32)

    # -- linear algebra and layout -----------------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        av, bv = view(a), view(b)
        if transpose_a:
            av = np.swapaxes(av, -1, -2)
        if transpose_b:
            bv = np.swapaxes(bv, -1, -2)
        try:
            return self.result(np.matmul(av, bv))
        except LOUD:
            return self.result(ieee.call(np.matmul, av, bv))

    def concatenate_last_axis(self, xs: Sequence[Tensor]) -> Tensor:
        return self.result(np.concatenate([view(x) for x in xs], axis=-1))

    def split_last_axis(self, x: Tensor, sizes: Sequence[int]) -> list[Tensor]:
        cuts = np.cumsum(sizes)[:-1]
        return [self.result(p) for p in np.split(view(x), cuts, axis=-1)]


# Every fused op is several numpy expressions, any of which may overflow on huge inputs
# (the primitives above use ``quiet`` where numpy can warn, and only there).
for _name, _method in [*vars(FusedOps).items(), *vars(OptimOps).items()]:
    if callable(_method) and not _name.startswith("_"):
        setattr(CPUBackend, _name, _ieee(_method))
