"""Softmax over the last axis and its backward.

Max-subtracted, so logits far past ``exp``'s overflow (1e4) give exact probabilities;
``-inf`` entries give 0, a row that is all ``-inf`` gives NaN (as the math says), a NaN
anywhere in a row gives a NaN row. An empty last axis gives an empty result.
``softmax_backward(dy, y) = y * (dy - rowsum(dy * y))`` reuses the saved output.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.binary import div, mul, sub
from ..primitive.memory import full_like
from ..primitive.reduce import max, sum
from ..primitive.unary import exp
from ..rows import along_rows

_SAMPLES = samples_module(__name__)


class SoftmaxMethods(Protocol):
    def softmax(self, x: Tensor) -> Tensor:
        """Softmax over the last axis (rank >= 1), max-subtracted; same shape and dtype.

        ``y[..., j] = exp(x[..., j] - m) / sum_k exp(x[..., k] - m)`` with ``m`` the row's
        maximum; logits of any finite magnitude (1e4, past ``exp``'s overflow) give finite
        probabilities.

        Special values: a ``-inf`` entry gives 0 (its row is otherwise unaffected); a row
        that is all ``-inf`` gives NaN (``-inf - -inf``); a ``+inf`` entry makes its row NaN
        (``inf - inf``); a NaN anywhere in a row gives a NaN row. ``-0.0`` is 0.0. An empty
        last axis or zero rows give an empty result.

        Composite: primitives only (``max``, ``sub``, ``exp``, ``sum``, ``div``)."""
        ...

    def softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        """``y * (dy - rowsum(dy * y))`` where ``y`` is softmax's output (rows over the last
        axis; ``dy`` and ``y`` share one shape).

        Special values: IEEE throughout; a NaN or infinity in ``dy`` or ``y`` reaches its
        whole row through the row sum (as NaN, or ``+-inf`` where ``y`` is non-zero);
        ``-0.0`` is 0.0. Empty operands give an empty result.

        Composite: primitives only (``mul``, ``sum``, ``sub``)."""
        ...


def softmax(x: Tensor) -> Tensor:
    backend = checks.float_operands("softmax", x)
    checks.min_rank("softmax", x, 1, "x")
    return dispatch(SOFTMAX, backend, (x,), Out(x.shape, x.dtype))


def softmax_backward(dy: Tensor, y: Tensor) -> Tensor:
    backend = checks.float_operands("softmax_backward", dy, y)
    checks.min_rank("softmax_backward", y, 1, "y")
    checks.shape_is("softmax_backward", dy, y.shape, "dy")
    return dispatch(SOFTMAX_BACKWARD, backend, (dy, y), Out(y.shape, y.dtype))


def softmax_composite(x: Tensor) -> Tensor:
    if x.shape[-1] == 0:
        return full_like(x, 0.0)  # an empty result of the same shape
    shifted = sub(x, along_rows(max(x, -1, keepdims=True), x.shape))
    e = exp(shifted)
    return div(e, along_rows(sum(e, -1, keepdims=True), x.shape))


def softmax_backward_composite(dy: Tensor, y: Tensor) -> Tensor:
    dot = sum(mul(dy, y), -1, keepdims=True)
    return mul(y, sub(dy, along_rows(dot, y.shape)))


def _softmax_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    return (softmax_backward(g, y),)


def _cost(n: int) -> Any:
    return lambda args: ((n + 1) * args[0].nbytes, 5 * args[0].size)


SOFTMAX = OpUnit(
    "softmax", "fused", SoftmaxMethods.softmax, module="softmax", function=softmax,
    composite=softmax_composite, vjp=_softmax_vjp, differentiable=(0,),
    nan="a NaN makes its row NaN; an all -inf row gives NaN",
    tolerance=Tolerances(Tolerance(1e-6, 2e-5), Tolerance(1e-12, 1e-10),
                         why="exp ulps plus a row sum of up to 4097 terms"),
    cost=_cost(1),
    testing=_SAMPLES,
)  # fmt: skip
SOFTMAX_BACKWARD = OpUnit(
    "softmax_backward", "fused", SoftmaxMethods.softmax_backward, module="softmax",
    function=softmax_backward, composite=softmax_backward_composite,
    tolerance=Tolerances(Tolerance(1e-5, 1e-4), Tolerance(1e-11, 1e-10),
                         why="a row sum of dy * y, then a difference"),
    cost=_cost(2),
    testing=_SAMPLES,
)  # fmt: skip

register(SOFTMAX, SOFTMAX_BACKWARD)
