"""The reference AdamW of the cpu backend (op units ``riftco.ops.fused.adam`` and
``adam_multi``: one tensor is the multi-tensor step over a list of one).

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


def adamw(
    p: np.ndarray, m: np.ndarray, v: np.ndarray, g: np.ndarray, lr: float, beta1: float,
    beta2: float, eps: float, weight_decay: float, step: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """One AdamW step (Loshchilov & Hutter: decoupled decay, bias-corrected), as new arrays
    ``(m, v, param)``: nothing is written, so a caller can compute every tensor's step
    before it writes the first."""
    new_m = beta1 * m + (1.0 - beta1) * g
    new_v = beta2 * v + (1.0 - beta2) * g * g
    mhat = new_m / (1.0 - beta1**step)
    vhat = new_v / (1.0 - beta2**step)
    return new_m, new_v, p - lr * (mhat / (np.sqrt(vhat) + eps) + weight_decay * p)


def step_all(
    params: list[Tensor], grads: list[Tensor], ms: list[Tensor], vs: list[Tensor],
    scale: np.generic | None, lr: float, beta1: float, beta2: float, eps: float,
    weight_decay: float, step: int,
) -> None:  # fmt: skip
    """AdamW on every tensor (gradients times ``scale`` when given), every new value
    computed before the first write."""
    new = []
    for param, grad, m, v in zip(params, grads, ms, vs, strict=True):
        p, mb, vb = _owned(param), _owned(m), _owned(v)
        g = np.ascontiguousarray(view(grad)).reshape(-1)
        if scale is not None:
            g = g * scale
        new.append((mb, vb, p, *adamw(p, mb, vb, g, lr, beta1, beta2, eps, weight_decay, step)))
    for mb, vb, p, new_m, new_v, new_p in new:
        mb[:], vb[:], p[:] = new_m, new_v, new_p


class OptimOps:
    """Mixin of :class:`CPUBackend`: the optimizer's fused steps, in place."""

    def adam_update(
        self,
        param: Tensor,
        grad: Tensor,
        m: Tensor,
        v: Tensor,
        lr: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        step: int,
    ) -> None:
        """AdamW in place on the parameter and moment buffers.

        Everything is computed before the first write, so an error part way (a warning
        turned into one, a failed allocation) leaves all three buffers as they were."""
        step_all([param], [grad], [m], [v], None, lr, beta1, beta2, eps, weight_decay, step)

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
        step_all(params, grads, ms, vs, s, lr, beta1, beta2, eps, weight_decay, step)
