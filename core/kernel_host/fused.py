"""Fused operations of every kernel backend: host-side launch plans over ``shaders/``.

``FusedPlans`` gathers one launch plan per optional (fused) op unit, each in its own
module named as the op unit it implements (``fused_gelu.py`` for ``riftco.ops.fused.gelu``,
...; AdamW lives with the primitives, in ``primitives.py``; its multi-tensor form in
``fused_adam_multi.py``). The plans need only what
``host.KernelHost`` declares: ``empty``, ``fill``, ``launch``, the products, ``sum`` and
the runtime's capabilities. Defining a method in one of them makes that fused op native
on every kernel backend (OpenCL, Metal, CUDA, and any runtime added later). Every launch is
asynchronous: no method reads a result back.
"""

from __future__ import annotations

from .fused_adam_multi import AdamMultiPlan
from .fused_add_layer_norm import AddLayerNormPlan
from .fused_attention import AttentionPlan
from .fused_attention_qkv import AttentionQkvPlan
from .fused_cross_entropy import CrossEntropyPlan
from .fused_embedding import EmbeddingPlan
from .fused_flash_attention import FlashAttentionPlan
from .fused_gelu import GeluPlan
from .fused_layer_norm import LayerNormPlan
from .fused_linear import LinearPlan
from .fused_linear_gelu import LinearGeluPlan
from .fused_rms_norm import RMSNormPlan
from .fused_softmax import SoftmaxPlan
from .half_linear import HalfLinearPlan
from .shader_defines import FLASH_MAX_HEAD_DIM

__all__ = ["FLASH_MAX_HEAD_DIM", "FusedPlans"]


class FusedPlans(
    HalfLinearPlan,  # first: its half path comes before LinearGeluPlan's and LinearPlan's
    LinearGeluPlan,  # first: it extends GeluPlan (its backward starts with gelu_backward)
    GeluPlan,
    SoftmaxPlan,
    LayerNormPlan,
    EmbeddingPlan,
    LinearPlan,
    CrossEntropyPlan,
    AttentionPlan,
    FlashAttentionPlan,
    AttentionQkvPlan,
    AdamMultiPlan,
    AddLayerNormPlan,
    RMSNormPlan,
):
    """Native fused ops for kernel backends (semantics: each op unit in ``riftco.ops.fused``)."""
