"""linear_gelu's launch plan (op unit ``riftco.ops.fused.linear_gelu``; the epilogue kernels
``linear_gelu_tanh_epilogue`` and ``linear_gelu_erf_epilogue`` are in ``shaders/gelu.cl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fused_gelu import GeluPlan

if TYPE_CHECKING:
    from ..tensor import Tensor


#: The epilogue kernel per ``approximate`` (``shaders/gelu.cl``), one per form, so the tanh
#: one has no branch on the form (as ``gelu_tanh_forward``, written to vectorise on CPUs).
_KERNEL_FORM = {"tanh": "tanh", "none": "erf"}


class LinearGeluPlan(GeluPlan):
    """Forward: the host's product, then one epilogue launch that adds the bias to ``h`` in
    place and writes ``y = gelu(h)``: two launches and one pass over ``h`` where ``linear``
    then ``gelu`` take three launches and two passes. Backward: ``gelu_backward`` then
    ``linear_backward``'s products and column sum (the products need all of ``dh``)."""

    def linear_gelu(
        self, x: Tensor, weight: Tensor, bias: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor]:
        h: Tensor = self.matmul(x, weight, False, False)
        y = self.empty(h.shape, h.dtype)
        if h.size:
            kernel = f"linear_gelu_{_KERNEL_FORM[approximate]}_epilogue"
            self.launch("gelu", kernel, h.dtype, h.size, y, h, bias, ints=(h.size, h.shape[1]))
        return y, h

    def linear_gelu_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor, h: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor, Tensor]:
        dh: Tensor = self.gelu_backward(dy, h, approximate)
        dx: Tensor = self.matmul(dh, weight, False, True)
        dw: Tensor = self.matmul(x, dh, True, False)
        db: Tensor = self.sum(dh, (0,), False)
        return dx, dw, db
