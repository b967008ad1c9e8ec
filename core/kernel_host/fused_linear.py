"""Linear's launch plan (op unit ``riftco.ops.fused.linear``): the host's own products."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .host import PlanBase

if TYPE_CHECKING:
    from ..tensor import Tensor


class LinearPlan(PlanBase):
    """``x @ weight + bias`` through the backend's matmul and one bias kernel."""

    def linear(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """The product, then the bias added in place: two launches, no broadcast copy."""
        y: Tensor = self.matmul(x, weight, False, False)
        if y.size:
            self.launch("elementwise", "add_row_bias", y.dtype, y.size, y, bias,
                        ints=(y.size, y.shape[1]))  # fmt: skip
        return y

    def linear_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        dx: Tensor = self.matmul(dy, weight, False, True)
        dw: Tensor = self.matmul(x, dy, True, False)
        db: Tensor = self.sum(dy, (0,), False)
        return dx, dw, db
