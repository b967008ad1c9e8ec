"""Host side of the primitive kernels: each method sizes its output and queues launches.

Mixed into :class:`~riftco.kernel_host.backend.KernelBackend`, which provides ``launch``,
``empty`` and the rest of ``host.KernelHost``; kernel shapes follow the runtime's declared
capabilities. Operands arrive dense (core copies views first); results are fresh dense
tensors. Nothing here waits for the device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..backend import ElementwiseByName
from ..dtypes import is_float
from ..errors import ShapeError
from .half_storage import cast_defines, is_half
from .host import PlanBase
from .layout import reduction_groups
from .sources import c_type

if TYPE_CHECKING:
    from ..tensor import Tensor

#: Rows at most this long are reduced by one thread each; longer ones by a threadgroup.
_SMALL_ROW = 64
#: Tile of ``matmul_tiled`` (must match shaders/matmul.cl) and its threads per tile.
_TILE_M, _TILE_N, _TILE_THREADS = 64, 64, 256
#: Outputs per thread of ``matmul_panel`` (MP_WM x MP_WN in shaders/matmul.cl), used on
#: runtimes whose capabilities say ``is_cpu`` (PoCL): registers, not threadgroup memory
#: and barriers.
_PANEL_M, _PANEL_N = 8, 16
#: Tile of ``matmul_wide`` (MW_TM x MW_TN in shaders/matmul.cl), 256 threads each: chosen
#: when the runtime's ``matmul_wide_min_tiles`` (CUDA: enough tiles for every multiprocessor)
#: is reached; runtimes that declare ``math.inf`` never take it.
_WIDE_M, _WIDE_N = 128, 128
#: Column reductions split the reduced axis until about this many threads run.
_COLUMN_THREADS = 16384


def _batch(x: Tensor, split: bool) -> tuple[int, int, int]:
    """(outer stride, inner stride, offset) of ``x``'s matrices: a ``[B, H, rows, cols]``
    view's own strides when the batch splits in two, else the matrix size of a contiguous
    operand whose batch axes flatten into one."""
    if split:
        return x.strides[0], x.strides[1], x.offset
    assert x.is_contiguous, "product: operands with one batch axis must be contiguous"
    return x.shape[-2] * x.shape[-1], 0, x.offset


class PrimitivePlans(ElementwiseByName, PlanBase):
    """The required primitives (plus AdamW) as launches of ``shaders/`` kernels."""

    # -- elementwise --------------------------------------------------------------------------
    def unary(self, op: str, x: Tensor) -> Tensor:
        out = self.empty(x.shape, x.dtype)
        self.launch("elementwise", f"unary_{op}", x.dtype, x.size, out, x, ints=[x.size])
        return out

    def binary(self, op: str, a: Tensor, b: Tensor) -> Tensor:
        return self._binary(f"binary_{op}", a, b)

    def _binary(self, kernel: str, a: Tensor, b: Tensor) -> Tensor:
        out = self.empty(a.shape, a.dtype)
        self.launch("elementwise", kernel, a.dtype, a.size, out, a, b, ints=[a.size])
        return out

    def compare(self, a: Tensor, b: Tensor, op: str) -> Tensor:
        return self._binary(f"cmp_{op}", a, b)

    def _scalar(self, op: str, x: Tensor, ints: Sequence[int], value: float) -> Tensor:
        out = self.empty(x.shape, x.dtype)
        self.launch("elementwise", op, x.dtype, x.size, out, x, ints=ints, floats=[value])
        return out

    def add_scalar(self, x: Tensor, value: float) -> Tensor:
        return self._scalar("scalar_add", x, [x.size], value)

    def mul_scalar(self, x: Tensor, value: float) -> Tensor:
        return self._scalar("scalar_mul", x, [x.size], value)

    def pow_scalar(self, x: Tensor, value: float) -> Tensor:
        # Small integral exponents multiply exactly (and keep the sign of negative bases,
        # which Metal's fast-math pow would turn into NaN); the rest use pow(), told whether
        # the exponent is an even or odd integer (IEEE's answers for negative bases).
        v = float(value)
        integer = v.is_integer()  # False for inf and NaN
        if integer and abs(v) <= 64:
            kind, e = 1, int(v)
        else:
            kind, e = (2 + int(v % 2 == 1) if integer else 0), 0
        return self._scalar("scalar_pow", x, [x.size, kind, e], value)

    def where(self, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
        out = self.empty(a.shape, a.dtype)
        self.launch("elementwise", "where_select", a.dtype, a.size, out, cond, a, b, ints=[a.size])
        return out

    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        dtype = np.dtype(dtype)
        out = self.empty(x.shape, dtype)
        defines = {"SRC": c_type(x.dtype)}
        if is_half(x.dtype) or is_half(dtype):  # half.h's conversions (rounded once)
            defines |= cast_defines(x.dtype, dtype)
        elif is_float(x.dtype) and dtype.kind == "i":  # saturating, NaN -> 0 (cast.cl)
            bits = dtype.itemsize * 8 - 1
            top = f"{2**bits - 1}{'L' if bits > 31 else ''}"
            defines |= {"CAST_LIMIT": repr(2.0**bits), "CAST_MAX": top, "CAST_MIN": f"(-{top} - 1)"}
        self.launch("cast", "cast_copy", dtype, x.size, out, x, ints=[x.size], defines=defines)
        return out

    # -- reductions -------------------------------------------------------------------------------
    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        return self._reduce("sum", x, axes, keepdims)

    def max(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        return self._reduce("max", x, axes, keepdims)

    def _reduce(self, op: str, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        kept = [d for i, d in enumerate(x.shape) if i not in axes]
        shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keepdims else kept
        out = self.empty(shape, x.dtype)
        if out.size == 0:
            return out
        if x.size == 0:  # sum over an empty axis (core rejects max over one)
            self.fill(out, 0.0)
            return out
        runs = reduction_groups(x.shape, axes)
        flags = [r for _, r in runs]
        if True not in flags:  # every reduced axis has size 1: a plain copy
            self.launch(
                "copy", "copy_strided", x.dtype, x.size, out, x, ints=[x.size, 1, 0, x.size, 1]
            )
        elif flags == [True]:
            self._reduce_rows(op, out, x, 1, x.size)
        elif flags == [False, True]:
            self._reduce_rows(op, out, x, runs[0][0], runs[1][0])
        elif flags == [True, False]:
            self._reduce_cols(op, out, x, runs[0][0], runs[1][0])
        else:  # interleaved: move reduced axes last with one strided copy
            order = [i for i in range(x.ndim) if i not in axes] + list(axes)
            dense = self.copy_strided(x.permute(order))
            cols = math.prod(x.shape[a] for a in axes)
            self._reduce_rows(op, out, dense, x.size // cols, cols)
        return out

    def _reduce_rows(self, op: str, out: Tensor, x: Tensor, rows: int, cols: int) -> None:
        # CPU devices (PoCL) run a whole row per work-item far faster than a barrier tree.
        serial = self.runtime.capabilities.serial_rows and rows >= 64
        if cols <= _SMALL_ROW or serial:
            self.launch("reduce", f"{op}_rows_small", x.dtype, rows, out, x, ints=[rows, cols])
        else:
            threads = rows * self._row_threads()
            self.launch("reduce", f"{op}_rows", x.dtype, threads, out, x, ints=[rows, cols])

    def _reduce_cols(self, op: str, out: Tensor, x: Tensor, rows: int, cols: int) -> None:
        """Reduce ``x[rows, cols]`` over rows; split the rows until enough threads run."""
        splits = max(1, min(_COLUMN_THREADS // cols, rows // 16))
        if splits == 1:
            self.launch("reduce", f"{op}_cols", x.dtype, cols, out, x, ints=[rows, cols, rows])
            return
        chunk = -(-rows // splits)
        splits = -(-rows // chunk)
        partial = self.empty((splits, cols), x.dtype)
        self.launch(
            "reduce", f"{op}_cols", x.dtype, splits * cols, partial, x, ints=[rows, cols, chunk]
        )
        self._reduce_cols(op, out, partial, splits, cols)

    def _row_threads(self) -> int:
        """Threads per row for threadgroup-per-row kernels: the runtime's group size when
        it is known (OpenCL, CUDA), else 256 (Metal picks its own; kernels loop either way)."""
        return int(self.runtime.capabilities.group_size_hint or 256)

    def argmax(self, x: Tensor) -> Tensor:
        cols = x.shape[-1]
        if cols == 0:  # core rejects this first; the kernel starts from element 0 of a row
            raise ShapeError(f"[argmax] needs a non-empty last axis; got shape {x.shape}")
        rows = x.size // cols
        out = self.empty(x.shape[:-1], np.dtype(np.int32))
        if rows == 0:
            return out
        threads = rows * self._row_threads()
        self.launch("reduce", "argmax_rows", x.dtype, threads, out, x, ints=[rows, cols])
        return out

    # -- linear algebra and layout -------------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        a_rows, a_cols = a.shape[-2:]
        m, k = (a_cols, a_rows) if transpose_a else (a_rows, a_cols)
        n = b.shape[-2] if transpose_b else b.shape[-1]
        out = self.empty((*a.shape[:-2], m, n), a.dtype)
        self.product(out, a, b, transpose_a, transpose_b)
        return out

    def product(
        self, out: Tensor, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool
    ) -> None:
        """``out[..., m, n] = op(a) @ op(b)``, writing through ``out``'s strides.

        Dense operands of any batch rank (the protocol's ``matmul``), or ``[B, H, rows,
        cols]`` views with any strides and offsets (a head block of a fused q | k | v
        projection, written into another): the kernels address each operand as offset +
        outer * s0 + inner * s1 + row * s_row + col * s_col, so views cost no copy. ``out``'s
        last axis must be contiguous."""
        m, n = out.shape[-2:]
        k = a.shape[-1] if not transpose_a else a.shape[-2]
        batch = math.prod(out.shape[:-2])
        if out.size == 0:
            return
        if k == 0:
            if not out.is_dense:
                raise ShapeError(f"[matmul] an empty product into a view {out.shape}")
            self.fill(out, 0.0)
            return
        assert out.strides[-1] == 1 or n == 1, "product: out's last axis must be contiguous"
        # Logical A[m, k] and B[k, n] as strides into the operands.
        sar, sac = a.strides[-2:]
        sam, sak = (sac, sar) if transpose_a else (sar, sac)
        caps = self.runtime.capabilities
        panel = caps.is_cpu and m >= 8 and n >= 8
        sbr, sbc = b.strides[-2:]
        sbk, sbn = (sbc, sbr) if transpose_b else (sbr, sbc)
        if panel and sbn != 1:  # matmul_panel reads rows of B: pack B once (O(kn))
            b = self.copy_strided(b.transpose(-1, -2) if transpose_b else b)
            sbk, sbn = n, 1
        split = out.ndim == 4  # (batch, head) pairs: two strides
        inner = out.shape[1] if split else 1
        sab, sai, aoff = _batch(a, split)
        sbb, sbi, boff = _batch(b, split)
        scb, sci, coff = _batch(out, split)
        ints = [m, n, k, batch, sab, sam, sak, sbb, sbk, sbn,
                inner, sai, aoff, sbi, boff, scb, sci, out.strides[-2], coff]  # fmt: skip
        wide_tiles = batch * -(-m // _WIDE_M) * -(-n // _WIDE_N)
        if m < 8 or n < 8:  # thin products waste most of a 64x64 tile
            self.launch("matmul", "matmul_small", a.dtype, out.size, out, a, b, ints=ints)
        elif wide_tiles >= caps.matmul_wide_min_tiles:
            threads = wide_tiles * _TILE_THREADS
            self.launch("matmul", "matmul_wide", a.dtype, threads, out, a, b, ints=ints)
        elif panel:
            threads = batch * -(-m // _PANEL_M) * -(-n // _PANEL_N)
            self.launch("matmul", "matmul_panel", a.dtype, threads, out, a, b, ints=ints)
        else:
            threads = batch * -(-m // _TILE_M) * -(-n // _TILE_N) * _TILE_THREADS
            self.launch("matmul", "matmul_tiled", a.dtype, threads, out, a, b, ints=ints)

    def concatenate_last_axis(self, xs: Sequence[Tensor]) -> Tensor:
        width = sum(x.shape[-1] for x in xs)
        out = self.empty((*xs[0].shape[:-1], width), xs[0].dtype)
        rows = math.prod(xs[0].shape[:-1])
        offset = 0
        for x in xs:
            w = x.shape[-1]
            ints = [rows, w, w, 0, width, offset]
            self.launch("copy", "copy_cols", x.dtype, rows * w, out, x, ints=ints)
            offset += w
        return out

    def split_last_axis(self, x: Tensor, sizes: Sequence[int]) -> list[Tensor]:
        width = x.shape[-1]
        rows = math.prod(x.shape[:-1])
        pieces, offset = [], 0
        for w in sizes:
            piece = self.empty((*x.shape[:-1], w), x.dtype)
            ints = [rows, w, width, offset, w, 0]
            self.launch("copy", "copy_cols", x.dtype, rows * w, piece, x, ints=ints)
            pieces.append(piece)
            offset += w
        return pieces

    # -- optimizer ---------------------------------------------------------------------------------
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
        # Bias corrections and 1 - beta in float64 on the host (shaders/adam.cl says why).
        floats = [lr, beta1, beta2, eps, weight_decay, 1.0 - beta1**step, 1.0 - beta2**step,
                  1.0 - beta1, 1.0 - beta2]  # fmt: skip
        n = param.size
        self.launch(
            "adam",
            "adamw_update",
            param.dtype,
            n,
            param,
            grad,
            m,
            v,
            ints=[n],
            floats=floats,
            guarded=True,  # writes nothing after a kernel flagged a bad id (DECISIONS)
            per_call=True,  # lr and the bias corrections change every step
        )
