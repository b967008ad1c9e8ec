"""float16 and bfloat16 storage on the native backend: conversions in C (``kernels_half.c``).

A backend that declares the 2-byte dtypes runs the memory methods and ``cast`` on them
itself; core widens every other op through float32 with this ``cast``
(``riftco.ops.widen``; docs/DECISIONS.md, "Half precision"), so the conversion is on
every widened op's path twice and is worth a C pass: F16C (8 lanes per instruction)
where the CPU has it, vectorised bit arithmetic where not, rounding once to nearest even
from float32 or float64 alike.

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


F32 = np.dtype(np.float32)


class NativeHalf:
    """Mixin for :class:`NativeBackend`: ``cast`` and ``fill`` on the 2-byte dtypes, and
    ``_widened``, the float32 route of the ops' layouts the C kernels do not take."""

    _ffi: Any
    _lib: Any
    _out: Any
    _f16c: bool
    _at: Any
    _in: Any
    _check: Any
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

    def _widened(self, method: Any, *args: Any) -> Any:
        """``method`` (the float32 one) on float32 copies of the 2-byte tensor operands,
        its result (or each of its results) rounded once back: the layouts and sizes the C
        kernels do not take."""
        dtype = next(a.dtype for a in args if isinstance(a, Tensor))
        wide = [self.cast(a, F32) if isinstance(a, Tensor) else a for a in args]
        out = method(*wide)
        if isinstance(out, tuple):
            return tuple(self.cast(o, dtype) for o in out)
        return self.cast(out, dtype)
