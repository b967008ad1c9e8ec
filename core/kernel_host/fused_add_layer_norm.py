"""The residual add fused with LayerNorm: launch plan (op unit
``riftco.ops.fused.add_layer_norm``; kernels in ``shaders/layer_norm.cl``).

Forward: one row launch writes ``s = x + r`` and normalises it from the values it just
wrote (the unfused pair is an add launch, then a LayerNorm launch reading ``s`` back).
Backward: one row launch writes ``ds + dx`` (the unfused graph adds in a third launch),
then LayerNorm's own two-stage column sums for dgamma and dbeta.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fused_layer_norm import backward, forward_outputs
from .fused_plan import row_plan
from .host import PlanBase

if TYPE_CHECKING:
    from ..tensor import Tensor


class AddLayerNormPlan(PlanBase):
    """``add_layer_norm`` and its backward (LayerNorm's param sums are reused)."""

    def add_layer_norm(
        self, x: Tensor, r: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        s = self.empty(x.shape, x.dtype)
        y, mean, rstd, rows, c = forward_outputs(self, x)
        if x.size:
            threads, width = row_plan(rows, c)
            self.launch(
                "layer_norm", "add_layer_norm_forward", x.dtype, threads,
                s, y, mean, rstd, x, r, gamma, beta, ints=(rows, c, width), floats=(eps,),
            )  # fmt: skip
        return s, y, mean, rstd

    def add_layer_norm_backward(
        self, dy: Tensor, ds: Tensor, s: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        return backward(self, "add_layer_norm_backward_dx", (dy, ds, s, gamma, mean, rstd))
