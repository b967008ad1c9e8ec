"""The reference multi-tensor AdamW of the cpu backend (op unit ``riftco.ops.fused.adam_multi``).

Plain numpy, the textbook formula, every operation in the tensors' dtype: the clip scale
from the norm exactly as ``clip_grad_norm``'s primitives compute it (add, maximum, divide),
then AdamW per tensor. Every new value is computed before the first write, so an error part
way (a failed allocation) leaves every parameter and moment as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from riftco.ops.fused.adam_multi import CLIP_EPS

from .views import view

if TYPE_CHECKING:
    from riftco.tensor import Tensor


def clip_scale(norm: np.ndarray, max_norm: float) -> np.generic:
    """``max_norm / maximum(norm + 1e-6, max_norm)`` in ``norm``'s dtype, NaN propagating."""
    dt = norm.dtype.type
    limit = dt(max_norm)
    return dt(limit / np.maximum(norm + dt(CLIP_EPS), limit))


def _owned(x: Tensor) -> np.ndarray:
    """The whole flat storage of a dense tensor that owns it (core guarantees both)."""
    return x.storage.buffer[x.offset : x.offset + x.size]


class OptimOps:
    """Mixin of :class:`CPUBackend`: the optimizer's fused step over many tensors."""

    def adam_update_multi(
        self,
        params: list[Tensor],
        grads: list[Tensor],
        ms: list[Tensor],
        vs: list[Tensor],
        lr: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        step: int,
        grad_norm: Tensor | None,
        max_norm: float,
    ) -> None:
        s = None if grad_norm is None else clip_scale(np.asarray(view(grad_norm)), max_norm)
        bc1, bc2 = 1.0 - beta1**step, 1.0 - beta2**step
        new = []
        for param, grad, m, v in zip(params, grads, ms, vs, strict=True):
            p, mb, vb = _owned(param), _owned(m), _owned(v)
            g = np.ascontiguousarray(view(grad)).reshape(-1)
            if s is not None:
                g = g * s
            new_m = beta1 * mb + (1.0 - beta1) * g
            new_v = beta2 * vb + (1.0 - beta2) * g * g
            mhat = new_m / bc1
            vhat = new_v / bc2
            new_p = p - lr * (mhat / (np.sqrt(vhat) + eps) + weight_decay * p)
            new.append((mb, vb, p, new_m, new_v, new_p))
        for mb, vb, p, new_m, new_v, new_p in new:
            mb[:], vb[:], p[:] = new_m, new_v, new_p
