"""A linear layer in one call: ``x @ weight + bias`` and its backward in one more.

``linear(x[M, K], weight[K, N], bias[N]) -> y[M, N]`` lets a backend add the bias while the
product is still in cache (an epilogue) instead of a separate broadcast-add pass over
``y``; ``linear_backward(dy[M, N], x, weight) -> (dx[M, K], dweight[K, N], dbias[N])`` makes
all three gradients in one call (``dy weightᵀ``, ``xᵀ dy``, the column sums of ``dy``), so a
backend can share the passes over ``dy``. Weights are stored ``(in, out)`` as in
``riftco.nn.Linear``. IEEE throughout; K = 0 gives ``y = bias`` in every row; M = 0 gives
empty ``y`` and ``dx``, zero ``dweight`` and ``dbias``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, rms, samples_module
from ..primitive.binary import add
from ..primitive.matmul import matmul
from ..primitive.reduce import sum

if TYPE_CHECKING:
    from ..samples import Example

_SAMPLES = samples_module(__name__)


class LinearMethods(Protocol):
    def linear(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """``x[M, K] @ weight[K, N] + bias[N]`` -> ``y[M, N]`` in the operands' dtype.

        ``y[i, n] = sum_k x[i, k] weight[k, n] + bias[n]``; weights are stored
        ``(in, out)``.

        Special values: IEEE: a NaN or infinity in ``x[i]`` reaches row ``i``, one in
        ``weight[:, n]`` or ``bias[n]`` column ``n`` (``inf - inf`` and ``0 * inf`` give
        NaN). ``-0.0`` is 0.0. K = 0 gives ``bias`` in every row; M = 0 an empty ``y``.

        Composite: primitives only (``matmul``, ``add`` of the broadcast bias)."""
        ...

    def linear_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dx = dy weightᵀ [M, K], dweight = xᵀ dy [K, N], dbias = column sums of dy [N])``;
        long column sums accumulate pairwise or in blocks.

        Special values: IEEE through the products and sums: a NaN or infinity in ``dy[i]``
        reaches ``dx[i]``, every row of ``dweight`` it multiplies and ``dbias``. ``-0.0``
        is 0.0. M = 0 gives an empty ``dx`` and zero ``dweight`` and ``dbias``; K = 0 an
        empty ``dx`` and ``dweight``.

        Composite: primitives only (two ``matmul``s and a ``sum``)."""
        ...


def linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    backend = checks.float_operands("linear", x, weight, bias)
    m, _, n = checks.matmul_2d("linear", x, weight)
    checks.shape_is("linear", bias, (n,), "bias")
    return dispatch(LINEAR, backend, (x, weight, bias), Out((m, n), x.dtype))


def linear_backward(dy: Tensor, x: Tensor, weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    op = "linear_backward"
    backend = checks.float_operands(op, dy, x, weight)
    m, k, n = checks.matmul_2d(op, x, weight)
    checks.shape_is(op, dy, (m, n), "dy")
    expect = (Out((m, k), x.dtype), Out((k, n), x.dtype), Out((n,), x.dtype))
    return dispatch(LINEAR_BACKWARD, backend, (dy, x, weight), expect)


def linear_composite(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    y = matmul(x, weight)
    return add(y, bias.expand_dims(0).broadcast_to(y.shape))


def linear_backward_composite(
    dy: Tensor, x: Tensor, weight: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    return matmul(dy, weight, False, True), matmul(x, dy, True, False), sum(dy, 0)


def _linear_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor | None, ...]:
    x, weight, _ = args
    return linear_backward(g, x, weight)


def _scale(ex: Example) -> float:
    """Every output is a sum over K (y, dx's N), or over the M rows (dweight, dbias)."""
    arrays = [a.value for a in ex.arrays()]
    terms = max(max(a.shape) for a in arrays if a.ndim == 2)
    r = max(rms(a) for a in arrays)
    return float(max(1.0, terms * max(r * r, r)))


def _cost(args: list[Any]) -> tuple[int, int]:
    x, w = args[0], args[1]
    (m, k), n = x.shape, w.shape[-1]
    return ((x.size + w.size + m * n) * x.dtype.itemsize, 2 * m * n * max(k, 1))


def _cost_backward(args: list[Any]) -> tuple[int, int]:
    dy, x, w = args
    (m, k), n = x.shape, w.shape[-1]
    return ((2 * dy.size + 2 * x.size + 2 * w.size) * x.dtype.itemsize, 4 * m * n * max(k, 1))


_TOL = Tolerances(Tolerance(1e-6, 1e-5), Tolerance(1e-14, 1e-12), scale=_scale,
                  why="sums over K, M or N terms in a backend-chosen order")  # fmt: skip

LINEAR = OpUnit(
    "linear", "fused", LinearMethods.linear, module="linear", function=linear,
    composite=linear_composite, vjp=_linear_vjp, differentiable=(0, 1, 2), tolerance=_TOL,
    cost=_cost,
    testing=_SAMPLES,
    since=(1, 1),
)  # fmt: skip
LINEAR_BACKWARD = OpUnit(
    "linear_backward", "fused", LinearMethods.linear_backward, module="linear",
    function=linear_backward, outputs=("dx", "dweight", "dbias"),
    composite=linear_backward_composite, tolerance=_TOL, cost=_cost_backward,
    testing=_SAMPLES,
    since=(1, 1),
)  # fmt: skip

register(LINEAR, LINEAR_BACKWARD)
