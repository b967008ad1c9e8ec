"""Causal multi-head self-attention over rows ``(B*T, C)``.

One ``(C, 3C)`` projection makes q, k and v in a single matmul; heads are a reshape and a
permute (views, no copies) to ``(B, nh, T, hs)`` for the fused attention op, which runs
either the materialised ``(T, T)`` form or the flash (log-sum-exp, tiled) form.
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd import Variable, attention, split_last_axis
from ..device import Device
from ..errors import ShapeError
from .layers import Linear
from .module import Module

ATTENTION_MODES = ("materialized", "flash")


class CausalSelfAttention(Module):
    def __init__(
        self,
        width: int,
        heads: int,
        *,
        mode: str = "materialized",
        proj_std: float,
        rng: np.random.Generator,
        device: str | Device | None = None,
        dtype: np.dtype | type = np.float32,
    ) -> None:
        if width % heads:
            raise ShapeError(
                f"[CausalSelfAttention] width {width} is not divisible by heads {heads}"
            )
        if mode not in ATTENTION_MODES:
            raise ValueError(
                f"[CausalSelfAttention] attention must be one of {ATTENTION_MODES}; got {mode!r}"
            )
        self.width, self.heads, self.mode = width, heads, mode
        self.qkv = Linear(width, 3 * width, rng=rng, device=device, dtype=dtype)
        self.proj = Linear(width, width, std=proj_std, rng=rng, device=device, dtype=dtype)

    def forward(self, x: Variable, B: int, T: int) -> Variable:  # noqa: N803 - nanoGPT names
        C, nh = self.width, self.heads
        hs = C // nh
        q, k, v = split_last_axis(self.qkv(x), [C, C, C])  # 3 x (B*T, C)
        q = q.reshape(B, T, nh, hs).permute(0, 2, 1, 3)  # (B, nh, T, hs)
        k = k.reshape(B, T, nh, hs).permute(0, 2, 1, 3)  # (B, nh, T, hs)
        v = v.reshape(B, T, nh, hs).permute(0, 2, 1, 3)  # (B, nh, T, hs)
        y = attention(q, k, v, causal=True, scale=1.0 / math.sqrt(hs), mode=self.mode)
        y = y.permute(0, 2, 1, 3).reshape(B * T, C)  # (B, nh, T, hs) -> (B*T, C)
        return self.proj(y)
