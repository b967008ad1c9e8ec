"""Multi-tensor AdamW's launch plan (op unit ``riftco.ops.fused.adam_multi``; kernel
``adamw_multi`` in ``shaders/adam.cl``).

One launch per ``ADAM_SEGMENTS`` tensors: a kernel cannot take a variable number of
buffers (Metal binds at most 31, OpenCL 1.2 has no pointer arrays), so each launch binds
six (param, grad, m, v) groups and runs one thread per element of all six, in order. The
clip scale is computed in every thread from the norm's device buffer, so nothing is read
back and no scaling pass runs. The ``make train`` model's 53 parameters take 9 launches
instead of 53 (and none of the clip's scale and split launches).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ops.fused.adam_multi import CLIP_EPS
from .host import PlanBase
from .shader_defines import ADAM_SEGMENTS

if TYPE_CHECKING:
    from ..tensor import Tensor

#: Threads of one launch are ``int`` indices in the kernel.
_MAX_THREADS = 2**31 - 1


def segment_groups(sizes: list[int], per: int = ADAM_SEGMENTS) -> list[list[int]]:
    """Indices of the non-empty tensors, ``per`` at most to a launch, and fewer where the
    launch's total would pass int32 thread indexing (a single tensor never does: core
    refuses tensors that large)."""
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, n in enumerate(sizes):
        if n == 0:
            continue
        if current and (len(current) == per or total + n > _MAX_THREADS):
            groups.append(current)
            current, total = [], 0
        current.append(i)
        total += n
    if current:
        groups.append(current)
    return groups


class AdamMultiPlan(PlanBase):
    """``adam_update_multi``: ``ceil(tensors / ADAM_SEGMENTS)`` launches, no host wait."""

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
        dtype = params[0].dtype
        # Bias corrections and 1 - beta in float64 on the host (shaders/adam.cl says why).
        floats = (lr, beta1, beta2, eps, weight_decay, 1.0 - beta1**step, 1.0 - beta2**step,
                  max_norm, CLIP_EPS, 1.0 - beta1, 1.0 - beta2)  # fmt: skip
        clip = int(grad_norm is not None)
        for group in segment_groups([p.size for p in params]):
            bound: list[Tensor] = []
            sizes = []
            for k in range(ADAM_SEGMENTS):
                i = group[min(k, len(group) - 1)]  # unused segments repeat the last, size 0
                bound += [params[i], grads[i], ms[i], vs[i]]
                sizes.append(params[i].size if k < len(group) else 0)
            norm = grad_norm if grad_norm is not None else params[group[0]]  # unread if 0
            self.launch("adam", "adamw_multi", dtype, sum(sizes), *bound, norm,
                        ints=(*sizes, clip), floats=floats, guarded=True,
                        per_call=True)  # fmt: skip
