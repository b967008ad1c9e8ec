"""Attention read from a fused q | k | v projection (op unit
``riftco.ops.fused.attention_qkv``).

q, k and v are read as strided head blocks of qkv, and the output (forward) or dq | dk |
dv (backward) written straight into head blocks of theirs, so no split, merge or
concatenation copy runs. Materialised: the products take (batch, head) strides (3
launches forward, 5 backward, where copies around ``attention`` take 7 and 13); flash: the
flash kernels take the row layouts (1 and 3 launches, were 5 and 12).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ops.fused.attention_qkv import heads_view
from .fused_attention import score_grads, softmax_scores
from .fused_flash_attention import flash_backward, flash_check, flash_forward
from .host import PlanBase
from .shader_defines import qkv_rows

if TYPE_CHECKING:
    from ..tensor import Tensor


class AttentionQkvPlan(PlanBase):
    """``attention_qkv`` and its backward, materialised or flash, without head copies."""

    def attention_qkv(
        self, qkv: Tensor, heads: int, scale: float, causal: bool, flash: bool
    ) -> tuple[Tensor, Tensor]:
        b, t, width = qkv.shape
        c = width // 3
        q, k, v = (heads_view(qkv, heads, i, 3) for i in range(3))
        out = self.empty((b, t, c), qkv.dtype)
        if flash:
            flash_check("attention_qkv", q)
            lse = self.empty((b, heads, t), qkv.dtype)
            if b * t:
                ints = (b * heads, t, c // heads, int(causal), *qkv_rows(t, c, heads))
                flash_forward(self, out, lse, qkv, qkv, qkv, ints, scale)
            return out, lse
        probs = self.empty((b, heads, t, t), qkv.dtype)
        if b * t == 0:
            return out, probs
        self.product(probs, q, k, False, True)  # q k^T, scaled and masked in place below
        softmax_scores(self, probs, causal, scale)
        self.product(heads_view(out, heads), probs, v, False, False)
        return out, probs

    def attention_qkv_backward(
        self,
        dout: Tensor,
        qkv: Tensor,
        out: Tensor,
        stat: Tensor,
        heads: int,
        scale: float,
        causal: bool,
        flash: bool,
    ) -> Tensor:
        b, t, width = qkv.shape
        dt = qkv.dtype
        q, k, v = (heads_view(qkv, heads, i, 3) for i in range(3))
        dqkv = self.empty(qkv.shape, dt)
        if flash:
            flash_check("attention_qkv_backward", q)
            if qkv.size:
                c = width // 3
                ints = (b * heads, t, c // heads, int(causal), *qkv_rows(t, c, heads))
                flash_backward(self, (dqkv,) * 3, dout, qkv, qkv, qkv, out, stat, ints, scale)
            return dqkv
        if qkv.size == 0:
            return dqkv
        dq, dk, dv = (heads_view(dqkv, heads, i, 3) for i in range(3))
        do = heads_view(dout, heads)
        self.product(dv, stat, do, True, False)  # P^T dO
        ds = self.empty((b, heads, t, t), dt)
        self.product(ds, do, v, False, True)  # dP = dO V^T, turned into scale * dS in place
        score_grads(self, ds, stat, scale)
        self.product(dq, ds, k, False, False)
        self.product(dk, ds, q, True, False)
        return dqkv
