"""GELU's launch plan (op unit ``riftco.ops.fused.gelu``; kernels in ``shaders/gelu.cl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fused_plan import flat_threads
from .host import PlanBase

if TYPE_CHECKING:
    from ..tensor import Tensor

#: The ``form`` parameter of ``gelu_forward``/``gelu_backward`` per ``approximate``.
_GELU_FORMS = {"tanh": 0, "none": 1}


class GeluPlan(PlanBase):
    """``gelu`` and its backward: the tanh form one thread per element (it vectorises on
    CPUs), the exact form grid-stride."""

    def gelu(self, x: Tensor, approximate: str) -> Tensor:
        y = self.empty(x.shape, x.dtype)
        n = x.size
        if n and approximate == "tanh":  # one thread per element: vectorises on CPUs
            self.launch("gelu", "gelu_tanh_forward", x.dtype, n, y, x, ints=(n, 0))
        elif n:
            form = _GELU_FORMS[approximate]
            self.launch("gelu", "gelu_forward", x.dtype, flat_threads(n), y, x, ints=(n, form))
        return y

    def gelu_backward(self, dy: Tensor, x: Tensor, approximate: str) -> Tensor:
        dx = self.empty(x.shape, x.dtype)
        self.gelu_backward_into(dx, dy, x, approximate)
        return dx

    def gelu_backward_into(
        self, dx: Tensor, dy: Tensor, x: Tensor, approximate: str, widen_x: str = ""
    ) -> None:
        """``dx = dy * gelu'(x)`` in ``dx``'s dtype; ``dx`` may be ``dy`` itself (each
        thread reads its element of both inputs before it writes that element).
        ``widen_x``: half.h's widening of a 2-byte ``x`` (``riftco_bf16_to_float``, say),
        applied on load, so a half ``x`` needs no float32 copy."""
        n = x.size
        defines = {"GELU_X_WIDEN": widen_x} if widen_x else None
        if n and approximate == "tanh":
            self.launch("gelu", "gelu_tanh_backward", dx.dtype, n, dx, dy, x, ints=(n, 0),
                        defines=defines)  # fmt: skip
        elif n:
            form = _GELU_FORMS[approximate]
            threads = flat_threads(n)
            self.launch("gelu", "gelu_backward", dx.dtype, threads, dx, dy, x, ints=(n, form),
                        defines=defines)  # fmt: skip
