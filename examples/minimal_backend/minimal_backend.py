"""The smallest complete riftco backend: every required method, nothing fused.

Buffers are flat numpy arrays and the arithmetic is numpy, so the file shows the protocol
and nothing else; a real backend keeps the same shape with its own buffers and kernels.
docs/BACKENDS.md walks through it, and tests/plugins/test_minimal_backend.py runs the conformance
suite on it (every fused op then runs as core's composite of these primitives).

Try it: ``riftco.get_registry().register(minimal_backend, name="minimal")``, then
``riftco conformance minimal`` in the same process, or install it with an entry point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import riftco
from riftco import Tensor
from riftco.backend import BackendBase, DeviceInfo, ElementwiseByName

_UNARY = {"neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
          "tanh": np.tanh, "abs": np.abs, "rsqrt": lambda v: 1 / np.sqrt(v)}  # fmt: skip
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "maximum": np.maximum, "minimum": np.minimum}  # fmt: skip
_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}  # fmt: skip


class MinimalBackend(ElementwiseByName, BackendBase):
    name = "minimal"
    priority = -10  # never picked by "auto"
    dtypes = frozenset({np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32)})
    accepts_strided = False  # core hands every method dense operands (offset 0, C order)

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [DeviceInfo(0, "numpy on the host", ("float32", "float64", "int32"))]

    # -- buffers: a Tensor's storage.buffer is whatever the backend made (here a flat array)
    def _out(self, array: np.ndarray, dtype: np.dtype | None = None) -> Tensor:
        arr = np.asarray(array, dtype=dtype)  # a new array: results never alias inputs
        return self.wrap(np.array(arr.reshape(-1), copy=True), arr.shape, arr.dtype)

    @staticmethod
    def _in(x: Tensor) -> np.ndarray:
        """A dense operand as an array (core guarantees offset 0 and C order here)."""
        return x.storage.buffer[: x.size].reshape(x.shape)

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> Tensor:
        return self.wrap(np.empty(math.prod(shape), dtype), shape, dtype)

    def from_numpy(self, array: np.ndarray) -> Tensor:
        return self._out(array)

    def to_numpy(self, x: Tensor) -> np.ndarray:
        return np.array(self._view(x), copy=True)

    def copy_strided(self, x: Tensor) -> Tensor:
        return self._out(self._view(x))

    @staticmethod
    def _view(x: Tensor) -> np.ndarray:
        """Any view: strides and offset count elements, numpy wants bytes."""
        buf, item = x.storage.buffer, x.dtype.itemsize
        if x.size == 0:
            return np.empty(x.shape, x.dtype)
        strides = tuple(s * item for s in x.strides)
        return np.lib.stride_tricks.as_strided(buf[x.offset :], x.shape, strides)

    def fill(self, x: Tensor, value: float) -> None:
        x.storage.buffer[: x.size] = value

    def synchronize(self) -> None:
        pass

    def memory_stats(self) -> dict[str, int]:
        return {"allocated_bytes": 0, "peak_bytes": 0}  # not tracked here

    # -- elementwise (ElementwiseByName maps neg ... minimum onto these two) ----------------
    def unary(self, op: str, x: Tensor) -> Tensor:
        with np.errstate(all="ignore"):
            return self._out(_UNARY[op](self._in(x)), x.dtype)

    def binary(self, op: str, a: Tensor, b: Tensor) -> Tensor:
        with np.errstate(all="ignore"):
            return self._out(_BINARY[op](self._in(a), self._in(b)), a.dtype)

    def add_scalar(self, x: Tensor, value: float) -> Tensor:
        return self._out(self._in(x) + x.dtype.type(value))

    def mul_scalar(self, x: Tensor, value: float) -> Tensor:
        return self._out(self._in(x) * x.dtype.type(value))

    def pow_scalar(self, x: Tensor, value: float) -> Tensor:
        with np.errstate(all="ignore"):
            return self._out(np.power(self._in(x), x.dtype.type(value)), x.dtype)

    def where(self, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
        return self._out(np.where(self._in(cond) != 0, self._in(a), self._in(b)), a.dtype)

    def compare(self, a: Tensor, b: Tensor, op: str) -> Tensor:
        return self._out(_COMPARE[op](self._in(a), self._in(b)), a.dtype)

    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        v = self._in(x)
        if dtype.kind != "i":
            return self._out(v, dtype)
        info = np.iinfo(dtype)  # truncate toward zero, saturate, NaN -> 0
        t = np.nan_to_num(np.trunc(v.astype(np.float64)), nan=0.0)
        return self._out(np.clip(t, info.min, info.max), dtype)

    # -- reductions ---------------------------------------------------------------------------
    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        return self._out(np.sum(self._in(x), axis=axes, keepdims=keepdims), x.dtype)

    def max(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        return self._out(np.max(self._in(x), axis=axes, keepdims=keepdims), x.dtype)

    def argmax(self, x: Tensor) -> Tensor:
        return self._out(np.argmax(self._in(x), axis=-1), np.int32)

    # -- linear algebra and layout -----------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        av, bv = self._in(a), self._in(b)
        av = np.swapaxes(av, -1, -2) if transpose_a else av
        bv = np.swapaxes(bv, -1, -2) if transpose_b else bv
        return self._out(av @ bv, a.dtype)

    def concatenate_last_axis(self, xs: Sequence[Tensor]) -> Tensor:
        return self._out(np.concatenate([self._in(x) for x in xs], axis=-1))

    def split_last_axis(self, x: Tensor, sizes: Sequence[int]) -> list[Tensor]:
        cuts = np.cumsum(sizes)[:-1]
        return [self._out(p) for p in np.split(self._in(x), cuts, axis=-1)]


@riftco.hookimpl
def riftco_backends() -> list[type]:
    return [MinimalBackend]
