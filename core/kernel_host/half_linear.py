"""The linear backwards on float16/bfloat16 operands in kernel backends.

Core's widened path would cast all four operands to float32 first and keep them for the
whole op: in a mixed-precision step, the widened ``linear_gelu_backward`` held float32 dY,
H, dH, X and W at once, the step's activation high-water mark. Here the same launches
(the casts, the float32 GELU backward, products and column sum, the casts back: so the
same bits as the widened path; H is widened by the same half.h function inside the GELU
kernel instead of the cast kernel) come in an order that holds fewer float32 matrices at a
time: dH is written over the float32 dY by a GELU backward that widens H as it reads
it (``GELU_X_WIDEN`` in shaders/gelu.cl), and W, then X, are widened only for their own
product and released once it is queued (an in-order queue runs it before any later
launch can reuse the buffer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..dtypes import float32
from .fused_linear import LinearPlan
from .fused_linear_gelu import LinearGeluPlan
from .half_storage import cast_defines, is_half

if TYPE_CHECKING:
    from ..tensor import Tensor

#: The ops this module runs on half operands (added to ``low_precision_ops``).
HALF_LINEAR_OPS = frozenset({"linear_backward", "linear_gelu_backward"})


class HalfLinearPlan(LinearGeluPlan, LinearPlan):
    """Float32 compute on half operands, widened one operand at a time."""

    def linear_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        if not is_half(x.dtype):
            return super().linear_backward(dy, x, weight)
        return self._half_linear_grads(self.cast(dy, float32), x, weight)

    def linear_gelu_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor, h: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor, Tensor]:
        if not is_half(x.dtype):
            return super().linear_gelu_backward(dy, x, weight, h, approximate)
        dh = self.cast(dy, float32)  # dH is written over it, H widened as it is read
        widen = cast_defines(h.dtype, float32)["CAST_WIDEN"]  # the cast kernel's own
        self.gelu_backward_into(dh, dh, h, approximate, widen_x=widen)
        return self._half_linear_grads(dh, x, weight)

    def _half_linear_grads(
        self, dh: Tensor, x: Tensor, weight: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dh @ W^T, X^T @ dh, column sums of dh)`` from the float32 ``dh``, each
        rounded once to the operands' dtype; each float32 operand lives for one product."""
        half = x.dtype
        dx = self.cast(self.matmul(dh, self.cast(weight, float32), False, True), half)
        dw = self.cast(self.matmul(self.cast(x, float32), dh, True, False), half)
        db = self.cast(self.sum(dh, (0,), False), half)
        return dx, dw, db
