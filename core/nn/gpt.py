"""A GPT-2-style decoder: token + position embeddings, pre-LN blocks, final LN, linear head.

Activations flow as rows ``(B*T, C)`` so every Linear is one plain 2-D matmul; only
attention sees ``(B, nh, T, hs)``. With ``recompute="block"`` each block keeps just its
input and recomputes its inside during backward (autograd's ``recompute`` primitive),
trading one extra block forward for the activation memory of every block.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import creation
from ..autograd import Variable, cross_entropy, recompute
from ..device import Device
from ..device import device as as_device
from ..errors import ShapeError
from ..tensor import Tensor
from .attention import ATTENTION_MODES, CausalSelfAttention
from .layers import MLP, Embedding, LayerNorm, Linear
from .module import Module

RECOMPUTE_MODES = ("none", "block")


@dataclass
class GPTConfig:
    vocab: int = 65
    context: int = 64
    layers: int = 4
    heads: int = 4
    width: int = 128
    attention: str = "materialized"  # or "flash"
    recompute: str = "none"  # or "block"

    def __post_init__(self) -> None:
        for name in ("vocab", "context", "layers", "heads", "width"):
            if int(getattr(self, name)) < 1:
                raise ShapeError(f"[GPTConfig] {name} must be positive; got {getattr(self, name)}")
        if self.width % self.heads:
            raise ShapeError(
                f"[GPTConfig] width {self.width} must be divisible by heads {self.heads}"
            )
        if self.attention not in ATTENTION_MODES:
            raise ValueError(
                f"[GPTConfig] attention must be one of {ATTENTION_MODES}; got {self.attention!r}"
            )
        if self.recompute not in RECOMPUTE_MODES:
            raise ValueError(
                f"[GPTConfig] recompute must be one of {RECOMPUTE_MODES}; got {self.recompute!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Block(Module):
    """Pre-LN residual block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, cfg: GPTConfig, *, rng: np.random.Generator, **kw: Any) -> None:
        # GPT-2: residual projections start smaller so the sum over 2*layers branches
        # keeps the residual stream's variance roughly constant with depth.
        proj_std = 0.02 / math.sqrt(2 * cfg.layers)
        self.ln1 = LayerNorm(cfg.width, **kw)
        self.attn = CausalSelfAttention(
            cfg.width, cfg.heads, mode=cfg.attention, proj_std=proj_std, rng=rng, **kw
        )
        self.ln2 = LayerNorm(cfg.width, **kw)
        self.mlp = MLP(cfg.width, proj_std=proj_std, rng=rng, **kw)

    def forward(self, x: Variable, B: int, T: int) -> Variable:  # noqa: N803 - x (B*T, C)
        """The block alone (a recompute region): its input's LayerNorm and its last
        residual add stay separate ops; the add before ``ln2`` is fused with it."""
        return self.chain(x, self.ln1(x), B, T, None)[0]

    def chain(
        self,
        x: Variable,
        h: Variable,
        B: int,  # noqa: N803
        T: int,  # noqa: N803
        after: LayerNorm | None,
    ) -> tuple[Variable, Variable | None]:
        """``(x', after(x'))`` from ``x`` and ``h = ln1(x)``: each residual add is fused
        with the LayerNorm that reads it (``ln2``, then ``after``: the next block's
        ``ln1`` or the final one), so the stream is written and normalised in one pass
        and its gradient folded into the LayerNorm's backward. ``after=None`` leaves the
        last add plain (the caller normalises part of the rows only)."""
        x, h2 = self.ln2.add_forward(x, self.attn(h, B, T))
        m = self.mlp(h2)
        if after is None:
            return x + m, None
        return after.add_forward(x, m)


class GPT(Module):
    def __init__(
        self,
        config: GPTConfig,
        device: str | Device | None = None,
        dtype: np.dtype | type = np.float32,
        seed: int = 0,
    ) -> None:
        self.config = config
        self.device = as_device(device)
        self.params_dtype = np.dtype(dtype)
        rng = np.random.default_rng(seed)
        kw: dict[str, Any] = {"device": self.device, "dtype": np.dtype(dtype)}
        self.wte = Embedding(config.vocab, config.width, rng=rng, **kw)
        self.wpe = Embedding(config.context, config.width, rng=rng, **kw)
        self.blocks = [Block(config, rng=rng, **kw) for _ in range(config.layers)]
        self.ln_f = LayerNorm(config.width, **kw)
        self.head = Linear(config.width, config.vocab, bias=False, rng=rng, **kw)
        self._positions: dict[tuple[int, np.dtype], Tensor] = {}

    def to(self, device: str | Device) -> GPT:
        super().to(device)
        self.device = as_device(device)
        self._positions.clear()
        return self

    def _hidden(self, idx: Tensor, final: bool = True) -> Variable:
        """The residual stream after the last block, ``(B*T, C)``, through the final
        LayerNorm when ``final`` (fused with the last residual add)."""
        if idx.ndim != 2:
            raise ShapeError(f"[GPT] token ids must be (B, T); got shape {idx.shape}")
        B, T = idx.shape  # noqa: N806
        C = self.config.width  # noqa: N806
        if T > self.config.context:
            raise ShapeError(
                f"[GPT] cannot forward a sequence of length {T}; the context is only "
                f"{self.config.context}"
            )
        pos = self._positions.get((T, idx.dtype))  # in the ids' dtype: the backend has it
        if pos is None:
            pos = creation.arange(T, dtype=idx.dtype, device=self.device)
            self._positions[(T, idx.dtype)] = pos
        tok = self.wte(idx)  # (B, T, C)
        x = (tok + self.wpe(pos).broadcast_to((B, T, C))).reshape(B * T, C)  # (B*T, C)
        if self.config.recompute == "block":  # regions meet at the stream: adds stay plain
            for block in self.blocks:
                x = recompute(lambda h, blk=block: blk(h, B, T), [x], block.parameters())
            return self.ln_f(x) if final else x
        h = self.blocks[0].ln1(x)
        for i, block in enumerate(self.blocks):
            nxt = self.blocks[i + 1].ln1 if i + 1 < len(self.blocks) else None
            after = nxt if nxt is not None else (self.ln_f if final else None)
            x, normed = block.chain(x, h, B, T, after)
            if normed is not None:
                h = normed
        return h if final else x

    def forward(self, idx: Tensor) -> Variable:
        """Logits ``(B*T, V)`` for every position of ``idx`` ``(B, T)``."""
        return self.head(self._hidden(idx))

    def loss(self, idx: Tensor, targets: Tensor) -> Variable:
        """Mean cross-entropy over targets ``(B, T)``; targets of -1 are ignored."""
        return cross_entropy(self(idx), targets.reshape(-1))

    def last_logits(self, idx: Tensor) -> Variable:
        """Logits ``(B, V)`` of the last position only (generation needs nothing else)."""
        B, T = idx.shape  # noqa: N806
        h = self._hidden(idx, final=False).reshape(B, T, self.config.width)[:, T - 1, :]
        return self.head(self.ln_f(h))  # (B, C)
