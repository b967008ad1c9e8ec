"""Materialised attention's launch plan (op unit ``riftco.ops.fused.attention``;
``shaders/attention.cl``): the products go through the backend's own matmul, and row
kernels fuse what lies between them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fused_plan import row_plan
from .host import KernelHost, PlanBase

if TYPE_CHECKING:
    from ..tensor import Tensor


def softmax_scores(host: KernelHost, probs: Tensor, causal: bool, scale: float) -> None:
    """Scale, mask and softmax the [B, H, T, T] products q kᵀ in place, one row kernel:
    attention and attention_qkv (which writes its products from head views) share it."""
    b, h, t, _ = probs.shape
    rows = b * h * t
    threads, width = row_plan(rows, t)
    host.launch(
        "attention", "attention_softmax", probs.dtype, threads,
        probs, ints=(rows, t, width, int(causal)), floats=(scale,),
    )  # fmt: skip


def score_grads(host: KernelHost, ds: Tensor, probs: Tensor, scale: float) -> None:
    """Turn dP = dO vᵀ [B, H, T, T] into scale * dS in place (dS = P (dP - rowsum(dP P)))."""
    b, h, t, _ = ds.shape
    rows = b * h * t
    threads, width = row_plan(rows, t)
    host.launch(
        "attention", "attention_backward_ds", ds.dtype, threads,
        ds, probs, ints=(rows, t, width), floats=(scale,),
    )  # fmt: skip


class AttentionPlan(PlanBase):
    """Attention with the [B, H, T, T] probabilities kept for the backward."""

    def attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        b, h, t, d = q.shape
        if b * h * t == 0:
            return self.empty(q.shape, q.dtype), self.empty((b, h, t, t), q.dtype)
        # D = 0 (core rejects it) still runs: scores are 0, probs uniform over visible keys.
        probs = self.matmul(q, k, False, True)  # q k^T, scaled and masked in place below
        softmax_scores(self, probs, causal, scale)
        return self.matmul(probs, v, False, False), probs

    def attention_backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        b, h, t, d = q.shape
        if q.size == 0:
            return (
                self.empty(q.shape, q.dtype),
                self.empty(q.shape, q.dtype),
                self.empty(q.shape, q.dtype),
            )
        dv = self.matmul(probs, dout, True, False)  # P^T dO
        ds = self.matmul(dout, v, False, True)  # dP = dO V^T, turned into scale * dS in place
        score_grads(self, ds, probs, scale)
        dq = self.matmul(ds, k, False, False)
        dk = self.matmul(ds, q, True, False)
        return dq, dk, dv
