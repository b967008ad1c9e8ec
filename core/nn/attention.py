"""Causal multi-head self-attention over rows ``(B*T, C)``.

One ``(C, 3C)`` projection makes q, k and v in a single matmul; ``attention_qkv`` reads
them, head by head, straight from its ``(B, T, 3C)`` output and writes ``(B, T, C)`` rows
for the output projection, in either the materialised ``(T, T)`` form or the flash
(log-sum-exp, tiled) form. A backend that reads and writes through strides (native) makes
no head split, permute or merge copies; others run the op's composite.
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd import Variable, attention_qkv
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
        qkv = self.qkv(x).reshape(B, T, 3 * C)  # q | k | v blocks, nh heads of hs columns each
        y = attention_qkv(qkv, nh, causal=True, scale=1.0 / math.sqrt(C // nh), mode=self.mode)
        return self.proj(y.reshape(B * T, C))  # (B, T, C): heads side by side
