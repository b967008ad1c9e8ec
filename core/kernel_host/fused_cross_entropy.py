"""Cross entropy's launch plan (op unit ``riftco.ops.fused.cross_entropy``;
``shaders/cross_entropy.cl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..dtypes import compute_dtype
from .fused_plan import flat_threads, row_plan
from .host import PlanBase

if TYPE_CHECKING:
    from ..tensor import Tensor


class CrossEntropyPlan(PlanBase):
    """Per-row loss and log-sum-exp forward, one thread per logit backward; targets out of
    range are clamped and flagged in the device status buffer."""

    def cross_entropy(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        n, v = logits.shape
        loss = self.empty((n,), compute_dtype(logits.dtype))  # float32 for half logits
        lse = self.empty((n,), compute_dtype(logits.dtype))
        if n and v:
            threads, width = row_plan(n, v)
            self.launch(
                "cross_entropy", "cross_entropy_forward", logits.dtype, threads,
                loss, lse, logits, targets, ints=(n, v, width), index_dtype=targets.dtype,
                status=("cross_entropy", v),
            )  # fmt: skip
        return loss, lse

    def cross_entropy_backward(
        self, dloss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor
    ) -> Tensor:
        n, v = logits.shape
        dlogits = self.empty((n, v), logits.dtype)
        if n and v:
            self.launch(
                "cross_entropy", "cross_entropy_backward", logits.dtype, flat_threads(n * v),
                dlogits, dloss, logits, targets, lse, ints=(n, v), index_dtype=targets.dtype,
                status=("cross_entropy_backward", v),
            )  # fmt: skip
        return dlogits
