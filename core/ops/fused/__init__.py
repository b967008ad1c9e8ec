"""The optional fused protocol methods, one module per op (and its backward)."""

from . import gelu, softmax, layer_norm, embedding, cross_entropy  # noqa: F401,I001  (order)
from . import attention, flash_attention, adam, linear  # noqa: F401,I001
