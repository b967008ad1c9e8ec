"""Linear, LayerNorm, RMSNorm, Embedding, MLP: the small layers a GPT block is made of.

Initial values are drawn on the host from a caller-owned numpy Generator and uploaded
once, so a model built with the same seed is identical on every backend.
Linear weights are stored ``(in, out)``: the forward pass is ``x @ W`` with no transpose.
"""

from __future__ import annotations

import numpy as np

from ..autograd import (
    Variable,
    add_layer_norm,
    embedding,
    layer_norm,
    linear,
    linear_gelu,
    rms_norm,
)
from ..device import Device
from ..tensor import Tensor
from .module import Module, parameter


class Linear(Module):
    """``y = x @ W + b`` on rows ``x`` of shape ``(N, in)``."""

    def __init__(
        self,
        fan_in: int,
        fan_out: int,
        bias: bool = True,
        *,
        std: float = 0.02,
        rng: np.random.Generator,
        device: str | Device | None = None,
        dtype: np.dtype | type = np.float32,
    ) -> None:
        self.weight = parameter(rng.normal(0.0, std, (fan_in, fan_out)).astype(dtype), device)
        self.bias = parameter(np.zeros(fan_out, dtype), device) if bias else None

    def forward(self, x: Variable) -> Variable:
        if self.bias is None:
            return x @ self.weight  # (N, out)
        return linear(x, self.weight, self.bias)  # (N, out), bias added in the same call


class LayerNorm(Module):
    def __init__(
        self,
        width: int,
        eps: float = 1e-5,
        *,
        device: str | Device | None = None,
        dtype: np.dtype | type = np.float32,
    ) -> None:
        self.eps = eps
        self.weight = parameter(np.ones(width, dtype), device)
        self.bias = parameter(np.zeros(width, dtype), device)

    def forward(self, x: Variable) -> Variable:
        return layer_norm(x, self.weight, self.bias, self.eps)

    def add_forward(self, x: Variable, r: Variable) -> tuple[Variable, Variable]:
        """``(s, self(s))`` with ``s = x + r``: a residual add and this LayerNorm in one op
        (``add_layer_norm``), the same numbers as ``s = x + r; self(s)``."""
        return add_layer_norm(x, r, self.weight, self.bias, self.eps)


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis (LLaMA's norm): no centring,
    no bias."""

    def __init__(
        self,
        width: int,
        eps: float = 1e-6,
        *,
        device: str | Device | None = None,
        dtype: np.dtype | type = np.float32,
    ) -> None:
        self.eps = eps
        self.weight = parameter(np.ones(width, dtype), device)

    def forward(self, x: Variable) -> Variable:
        return rms_norm(x, self.weight, self.eps)


class Embedding(Module):
    """Rows of a ``(num, width)`` table, looked up by integer ids (tokens, positions)."""

    def __init__(
        self,
        num: int,
        width: int,
        *,
        std: float = 0.02,
        rng: np.random.Generator,
        device: str | Device | None = None,
        dtype: np.dtype | type = np.float32,
    ) -> None:
        self.weight = parameter(rng.normal(0.0, std, (num, width)).astype(dtype), device)

    def forward(self, ids: Tensor) -> Variable:  # ids (...,) int -> (..., width)
        return embedding(self.weight, ids)


class MLP(Module):
    """Width -> 4 x width -> GELU (tanh form, as GPT-2) -> width."""

    def __init__(
        self,
        width: int,
        *,
        proj_std: float,
        rng: np.random.Generator,
        device: str | Device | None = None,
        dtype: np.dtype | type = np.float32,
    ) -> None:
        self.fc = Linear(width, 4 * width, rng=rng, device=device, dtype=dtype)
        self.proj = Linear(4 * width, width, std=proj_std, rng=rng, device=device, dtype=dtype)

    def forward(self, x: Variable) -> Variable:  # x (N, C)
        # fc and GELU in one op (the GELU in the product's epilogue where the backend can);
        # the same values and gradients as ``self.fc(x).gelu("tanh")``
        fc = self.fc
        assert fc.bias is not None  # built with a bias above
        hidden = linear_gelu(x, fc.weight, fc.bias, "tanh")  # (N, 4C)
        return self.proj(hidden)  # (N, C)
