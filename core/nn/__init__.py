"""Neural-network modules for the tiny transformer, built on ``riftco.autograd``."""

from .attention import CausalSelfAttention
from .gpt import GPT, Block, GPTConfig
from .layers import MLP, Embedding, LayerNorm, Linear, RMSNorm
from .module import Module, parameter

__all__ = [
    "Module", "parameter", "Linear", "LayerNorm", "RMSNorm", "Embedding", "MLP",
    "CausalSelfAttention", "Block", "GPT", "GPTConfig",
]  # fmt: skip
