"""Softmax's launch plan (op unit ``riftco.ops.fused.softmax``; ``shaders/softmax.cl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fused_plan import row_plan
from .host import PlanBase

if TYPE_CHECKING:
    from ..tensor import Tensor


class SoftmaxPlan(PlanBase):
    """Softmax over the last axis and its backward: one row-wise launch each."""

    def softmax(self, x: Tensor) -> Tensor:
        return self._softmax_rows("softmax_forward", x, x)

    def softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        return self._softmax_rows("softmax_backward", y, dy, y)

    def _softmax_rows(self, kernel: str, like: Tensor, *inputs: Tensor) -> Tensor:
        """A new tensor shaped like ``like``, written by one launch of ``kernel`` over its
        rows (the last axis) from ``inputs``: forward and backward share the row plan."""
        out = self.empty(like.shape, like.dtype)
        cols = like.shape[-1]
        rows = like.size // cols if cols else 0
        if like.size:
            threads, width = row_plan(rows, cols)
            ints = (rows, cols, width)
            self.launch("softmax", kernel, like.dtype, threads, out, *inputs, ints=ints)
        return out
