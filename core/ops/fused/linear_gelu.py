"""A linear layer with GELU fused in: the MLP's first layer and its backward in one call each.

``linear_gelu(x[M, K], weight[K, N], bias[N], approximate) -> (y, h)`` with
``h = x @ weight + bias`` (the pre-activation, weights stored ``(in, out)`` as in
``riftco.nn.Linear`` and ``linear``) and ``y = gelu(h, approximate)`` (``gelu``'s forms and
formulas). A backend applies GELU in the product's epilogue while the output tile is still
in cache, instead of a separate pass that reads ``h`` back; ``h`` is returned because the
backward needs it. ``linear_gelu_backward(dy, x, weight, h, approximate) -> (dx, dweight,
dbias)`` forms ``dh = dy * gelu'(h)`` inside the linear backward's first pass, so ``dh``
never makes a round trip through a separate elementwise op. Why an op of its own: in the
GPT's MLP (width -> 4 x width) the GELU and its derivative are the two largest elementwise
passes of a training step (issue 22).

The composite is exactly ``linear`` then ``gelu`` (and ``gelu_backward`` then
``linear_backward``) through the same backend, so a backend without the method gives the
same bits as the unfused layer. IEEE throughout; K = 0 gives ``h = bias`` in every row,
M = 0 empty ``y``, ``h``, ``dx`` and zero ``dweight``, ``dbias``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, rms, samples_module
from .gelu import APPROXIMATIONS, gelu, gelu_backward
from .linear import linear, linear_backward

if TYPE_CHECKING:
    from ..samples import Example

_SAMPLES = samples_module(__name__)


class LinearGeluMethods(Protocol):
    def linear_gelu(
        self, x: Tensor, weight: Tensor, bias: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor]:
        """``(y = gelu(h, approximate), h = x[M, K] @ weight[K, N] + bias[N])``, both
        ``[M, N]`` in the operands' dtype; ``h`` is saved for the backward. GELU as the
        ``gelu`` op defines it (no intermediate overflows for a large finite ``|h|``).

        Special values: ``h`` those of ``linear``; ``y`` those of ``gelu`` on ``h``
        (``gelu(NaN) = NaN``, ``gelu(+inf) = +inf``, ``gelu(-inf) = NaN``). ``-0.0`` is 0.0.
        K = 0 gives ``h = bias`` in every row; M = 0 empty ``y`` and ``h``.

        Composite: ``linear`` then ``gelu`` (your native ones when you define them)."""
        ...

    def linear_gelu_backward(
        self, dy: Tensor, x: Tensor, weight: Tensor, h: Tensor, approximate: str
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dx [M, K], dweight [K, N], dbias [N])`` of ``y = gelu(x weight + bias)`` from the
        saved pre-activation ``h [M, N]``: ``dh = dy * gelu'(h)``, then ``linear_backward(dh)``;
        long column sums accumulate pairwise or in blocks.

        Special values: ``dh`` those of ``gelu_backward`` (``gelu'`` is NaN at NaN and at
        ``+-inf``), then those of ``linear_backward``. ``-0.0`` is 0.0. M = 0 gives an empty
        ``dx`` and zero ``dweight`` and ``dbias``.

        Composite: ``gelu_backward`` then ``linear_backward`` (your native ones when you
        define them)."""
        ...


def linear_gelu(
    x: Tensor, weight: Tensor, bias: Tensor, approximate: str = "tanh"
) -> tuple[Tensor, Tensor]:
    op = "linear_gelu"
    backend = checks.float_operands(op, x, weight, bias)
    m, _, n = checks.matmul_2d(op, x, weight)
    checks.shape_is(op, bias, (n,), "bias")
    approximate = checks.one_of(op, approximate, APPROXIMATIONS, "approximate")
    out = Out((m, n), x.dtype)
    return dispatch(LINEAR_GELU, backend, (x, weight, bias, approximate), (out, out))


def linear_gelu_backward(
    dy: Tensor, x: Tensor, weight: Tensor, h: Tensor, approximate: str = "tanh"
) -> tuple[Tensor, Tensor, Tensor]:
    op = "linear_gelu_backward"
    backend = checks.float_operands(op, dy, x, weight, h)
    m, k, n = checks.matmul_2d(op, x, weight)
    checks.shape_is(op, dy, (m, n), "dy")
    checks.shape_is(op, h, (m, n), "h")
    approximate = checks.one_of(op, approximate, APPROXIMATIONS, "approximate")
    expect = (Out((m, k), x.dtype), Out((k, n), x.dtype), Out((n,), x.dtype))
    return dispatch(LINEAR_GELU_BACKWARD, backend, (dy, x, weight, h, approximate), expect)


def linear_gelu_composite(
    x: Tensor, weight: Tensor, bias: Tensor, approximate: str
) -> tuple[Tensor, Tensor]:
    """The unfused layer, op for op: the same bits as ``gelu(linear(...))`` on any backend."""
    h = linear(x, weight, bias)
    return gelu(h, approximate), h


def linear_gelu_backward_composite(
    dy: Tensor, x: Tensor, weight: Tensor, h: Tensor, approximate: str
) -> tuple[Tensor, Tensor, Tensor]:
    return linear_backward(gelu_backward(dy, h, approximate), x, weight)


def _vjp(g: Tensor, args: Any, outs: Any, needs: Any) -> tuple[Tensor | None, ...]:
    x, weight, _, approximate = args
    return linear_gelu_backward(g, x, weight, outs[1], approximate)


def _scale(ex: Example) -> float:
    """Like ``linear``'s: every output is a sum over K (y, h, dx's N) or over the M rows
    (dweight, dbias); gelu and gelu' are bounded by about 1.13 times their argument."""
    arrays = [a.value for a in ex.arrays()]
    terms = max(max(a.shape) for a in arrays if a.ndim == 2)
    r = max(rms(a) for a in arrays)
    return float(max(1.0, terms * max(r * r, r)))


def _cost(args: list[Any]) -> tuple[int, int]:
    x, w = args[0], args[1]
    (m, k), n = x.shape, w.shape[-1]
    return ((x.size + w.size + 2 * m * n) * x.dtype.itemsize, 2 * m * n * max(k, 1) + 20 * m * n)


def _cost_backward(args: list[Any]) -> tuple[int, int]:
    dy, x, w = args[0], args[1], args[2]
    (m, k), n = x.shape, w.shape[-1]
    moved = (3 * dy.size + 2 * x.size + 2 * w.size) * x.dtype.itemsize
    return (moved, 4 * m * n * max(k, 1) + 20 * m * n)


_TOL = Tolerances(Tolerance(2e-5, 2e-5), Tolerance(1e-12, 1e-11), scale=_scale,
                  why="sums over K, M or N terms in a backend-chosen order, and gelu' "
                      "cancels (1 + tanh) for large |h|")  # fmt: skip

LINEAR_GELU = OpUnit(
    "linear_gelu", "fused", LinearGeluMethods.linear_gelu, module="linear_gelu",
    function=linear_gelu,
    outputs=("y", "h"), composite=linear_gelu_composite, vjp=_vjp, differentiable=(0, 1, 2),
    tolerance=_TOL, cost=_cost,
    testing=_SAMPLES,
    since=(1, 3),
)  # fmt: skip
LINEAR_GELU_BACKWARD = OpUnit(
    "linear_gelu_backward", "fused", LinearGeluMethods.linear_gelu_backward, module="linear_gelu",
    function=linear_gelu_backward, outputs=("dx", "dweight", "dbias"),
    composite=linear_gelu_backward_composite, tolerance=_TOL, cost=_cost_backward,
    testing=_SAMPLES,
    since=(1, 3),
)  # fmt: skip

register(LINEAR_GELU, LINEAR_GELU_BACKWARD)
