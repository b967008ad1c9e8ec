"""Fused operations of every kernel backend: host-side launch plans over ``shaders/``.

``FusedKernels`` gathers one mixin per fused op family, each in its own module named as
the op unit it implements (``fused_gelu.py`` for ``riftco.ops.fused.gelu``, ...; AdamW
lives with the primitives, in ``primitives.py``; its multi-tensor form in
``fused_adam_multi.py``). The mixins need only what
``host.KernelHost`` declares: ``empty``, ``fill``, ``launch``, the products, ``sum`` and
the runtime's capabilities. Defining a method in one of them makes that fused op native
on every kernel backend (OpenCL, Metal, CUDA, and any runtime added later). Every launch is
asynchronous: no method reads a result back.
"""

from __future__ import annotations

from .fused_adam_multi import AdamMultiKernels
from .fused_add_layer_norm import AddLayerNormKernels
from .fused_attention import AttentionKernels
from .fused_attention_qkv import AttentionQkvKernels
from .fused_cross_entropy import CrossEntropyKernels
from .fused_embedding import EmbeddingKernels
from .fused_flash_attention import FlashAttentionKernels
from .fused_gelu import GeluKernels
from .fused_layer_norm import LayerNormKernels
from .fused_linear import LinearKernels
from .fused_linear_gelu import LinearGeluKernels
from .fused_rms_norm import RMSNormKernels
from .fused_softmax import SoftmaxKernels
from .shader_defines import FLASH_MAX_HEAD_DIM

__all__ = ["FLASH_MAX_HEAD_DIM", "FusedKernels"]


class FusedKernels(
    LinearGeluKernels,  # first: it extends GeluKernels (its backward starts with gelu_backward)
    GeluKernels,
    SoftmaxKernels,
    LayerNormKernels,
    EmbeddingKernels,
    LinearKernels,
    CrossEntropyKernels,
    AttentionKernels,
    FlashAttentionKernels,
    AttentionQkvKernels,
    AdamMultiKernels,
    AddLayerNormKernels,
    RMSNormKernels,
):
    """Native fused ops for kernel backends (semantics: each op unit in ``riftco.ops.fused``)."""
