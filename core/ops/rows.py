"""Helpers the row-wise composites share (softmax, LayerNorm, RMSNorm, cross entropy, flash
attention): kept out of any one op unit so that units do not import each other for them."""

from __future__ import annotations

from ..tensor import Tensor


def along_rows(stat: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A per-row statistic (shape ``shape[:-1]`` or keepdims) broadcast along the last axis."""
    if stat.ndim == len(shape) - 1:
        stat = stat.expand_dims(-1)  # a view for any strides (reshape would need dense)
    return stat.broadcast_to(shape)
