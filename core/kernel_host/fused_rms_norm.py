"""RMSNorm's launch plan (op unit ``riftco.ops.fused.rms_norm``; ``shaders/rms_norm.cl``, and
LayerNorm's dgamma stages in ``shaders/layer_norm.cl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fused_layer_norm import launch_param_sums
from .fused_plan import prod, row_plan
from .host import PlanBase

if TYPE_CHECKING:
    from ..tensor import Tensor


class RMSNormPlan(PlanBase):
    """RMSNorm over the last axis: one row launch forward; backward a row launch for dx and
    a two-stage column reduction (no atomics) for dgamma."""

    def rms_norm(self, x: Tensor, gamma: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        c = x.shape[-1]
        rows = prod(x.shape[:-1])
        y = self.empty(x.shape, x.dtype)
        rstd = self.empty(x.shape[:-1], x.dtype)
        if x.size:
            threads, width = row_plan(rows, c)
            self.launch(
                "rms_norm", "rms_norm_forward", x.dtype, threads,
                y, rstd, x, gamma, ints=(rows, c, width), floats=(eps,),
            )  # fmt: skip
        return y, rstd

    def rms_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor]:
        c, rows, dt = x.shape[-1], prod(x.shape[:-1]), x.dtype
        dx = self.empty(x.shape, dt)
        dgamma = self.empty((c,), dt)
        if not rows:
            if c:
                self.fill(dgamma, 0.0)
            return dx, dgamma
        threads, width = row_plan(rows, c)
        self.launch(
            "rms_norm", "rms_norm_backward_dx", dt, threads,
            dx, dy, x, gamma, rstd, ints=(rows, c, width),
        )  # fmt: skip
        # dgamma = column sums of dy * (x - 0) * rstd: LayerNorm's two stages with a zero
        # mean (its dbeta, the sums of dy, goes to a scratch buffer)
        zero_mean = self.empty(x.shape[:-1], dt)
        self.fill(zero_mean, 0.0)
        scratch = self.empty((c,), dt)
        launch_param_sums(self, dgamma, scratch, dy, x, zero_mean, rstd)
        return dx, dgamma
