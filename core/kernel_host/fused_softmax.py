"""Softmax's launch plan (op unit ``riftco.ops.fused.softmax``; ``shaders/softmax.cl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fused_plan import row_plan
from .host import KernelMixin

if TYPE_CHECKING:
    from ..tensor import Tensor


class SoftmaxKernels(KernelMixin):
    """Softmax over the last axis and its backward: one row-wise launch each."""

    def softmax(self, x: Tensor) -> Tensor:
        y = self.empty(x.shape, x.dtype)
        cols = x.shape[-1]
        rows = x.size // cols if cols else 0
        if x.size:
            threads, width = row_plan(rows, cols)
            ints = (rows, cols, width)
            self.launch("softmax", "softmax_forward", x.dtype, threads, y, x, ints=ints)
        return y

    def softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        dx = self.empty(y.shape, y.dtype)
        cols = y.shape[-1]
        rows = y.size // cols if cols else 0
        if y.size:
            threads, width = row_plan(rows, cols)
            ints = (rows, cols, width)
            self.launch("softmax", "softmax_backward", y.dtype, threads, dx, dy, y, ints=ints)
        return dx
