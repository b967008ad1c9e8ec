"""LayerNorm over the last axis and its backward.

``y = (x - mean) * rstd * gamma + beta`` with the biased variance and
``rstd = 1 / sqrt(var + eps)``; the statistics are outputs so the backward needs no second
pass over ``x``. The variance must be computed stably (two passes or Welford): in float32,
rows with mean 100 and spread 1 lose most digits with ``E[x^2] - E[x]^2``.
C = 0 is refused by core; zero rows give empty results.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...dtypes import compute_dtype
from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.binary import add, add_scalar, mul, sub
from ..primitive.memory import copy_strided
from ..primitive.reduce import mean, sum
from ..primitive.unary import rsqrt
from ..rows import along_rows

_SAMPLES = samples_module(__name__)


class LayerNormMethods(Protocol):
    def layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(y, mean, rstd)`` over the last axis of ``x[..., C]`` (C >= 1) with ``gamma[C]``,
        ``beta[C]``; ``mean`` and ``rstd`` have shape ``x.shape[:-1]``; ``y`` in ``x.dtype``,
        ``mean`` and ``rstd`` in its compute dtype (float32 for float16/bfloat16).

        ``mean = sum(x) / C``, ``var = sum((x - mean)^2) / C`` (biased, computed stably: two
        passes or Welford, never ``E[x^2] - E[x]^2``), ``rstd = 1 / sqrt(var + eps)``,
        ``y = (x - mean) * rstd * gamma + beta``.

        Special values: a NaN in a row gives a NaN row of ``y`` and NaN ``mean`` and
        ``rstd``; a ``+-inf`` in a row makes its ``mean`` ``+-inf`` (NaN with both signs),
        its ``rstd`` and its row of ``y`` NaN; other rows are unaffected. A NaN or
        infinity in ``gamma`` or ``beta`` reaches column ``c`` of every row by IEEE.
        ``-0.0`` is 0.0. Zero rows give empty results; C = 0 is refused by core.

        Composite: primitives only (``sum``, ``sub``, ``mul``, ``rsqrt``, ``add``)."""
        ...

    def layer_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dx, dgamma[C], dbeta[C])`` from the forward's saved statistics.

        With ``xhat = (x - mean) * rstd`` and ``g = dy * gamma`` per row:
        ``dx = rstd * (g - mean_C(g) - xhat * mean_C(g * xhat))``,
        ``dgamma = sum over rows of dy * xhat``, ``dbeta = sum over rows of dy`` (column
        sums over every row, accumulated pairwise or in blocks).

        Special values: IEEE throughout; a NaN or infinity in a row of ``dy`` or ``x`` (or a
        NaN statistic) makes that row of ``dx`` NaN and reaches ``dgamma`` and ``dbeta``
        through the column sums. ``-0.0`` is 0.0. Zero rows give empty ``dx`` and zero
        ``dgamma`` and ``dbeta``.

        Composite: primitives only."""
        ...


def check_affine(op: str, c: int, gamma: Tensor, beta: Tensor, eps: float) -> float:
    """``gamma`` and ``beta`` of shape ``[C]`` and a positive ``eps`` (returned as a float);
    layer_norm's forward checks, shared with add_layer_norm."""
    checks.shape_is(op, gamma, (c,), "gamma")
    checks.shape_is(op, beta, (c,), "beta")
    eps = checks.number(op, eps, "eps")
    if not eps > 0:
        raise ShapeError(f"[{op}] eps must be positive; got {eps}")
    return eps


def check_saved(op: str, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor) -> None:
    """``gamma[C]`` and the forward's saved ``mean``, ``rstd`` (x's leading shape) of a
    LayerNorm backward over ``x``; shared with add_layer_norm_backward."""
    checks.shape_is(op, gamma, (x.shape[-1],), "gamma")
    checks.shape_is(op, mean, x.shape[:-1], "mean")
    checks.shape_is(op, rstd, x.shape[:-1], "rstd")


def layer_norm(
    x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5
) -> tuple[Tensor, Tensor, Tensor]:
    backend = checks.float_operands("layer_norm", x, gamma, beta)
    c = checks.features("layer_norm", x)
    eps = check_affine("layer_norm", c, gamma, beta, eps)
    stat = Out(x.shape[:-1], compute_dtype(x.dtype))
    expect = (Out(x.shape, x.dtype), stat, stat)
    return dispatch(LAYER_NORM, backend, (x, gamma, beta, eps), expect)


def layer_norm_backward(
    dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    op = "layer_norm_backward"
    backend = checks.float_operands(op, dy, x, gamma)
    checks.statistics(op, x, mean=mean, rstd=rstd)
    c = checks.features(op, x)
    checks.shape_is(op, dy, x.shape, "dy")
    check_saved(op, x, gamma, mean, rstd)
    param = Out((c,), x.dtype)
    expect = (Out(x.shape, x.dtype), param, param)
    return dispatch(LAYER_NORM_BACKWARD, backend, (dy, x, gamma, mean, rstd), expect)


def layer_norm_composite(
    x: Tensor, gamma: Tensor, beta: Tensor, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    mu = mean(x, -1)
    centred = sub(x, along_rows(mu, x.shape))
    var = mean(mul(centred, centred), -1)  # two passes: stable for any mean
    r = rsqrt(add_scalar(var, eps))
    xhat = mul(centred, along_rows(r, x.shape))
    y = add(mul(xhat, gamma.broadcast_to(x.shape)), beta.broadcast_to(x.shape))
    return y, mu, r


def layer_norm_backward_composite(
    dy: Tensor, x: Tensor, gamma: Tensor, mu: Tensor, r: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    rr = along_rows(r, x.shape)
    xhat = mul(sub(x, along_rows(mu, x.shape)), rr)
    lead = tuple(range(x.ndim - 1))
    dgamma = sum(mul(dy, xhat), lead) if lead else mul(dy, xhat)
    dbeta = sum(dy, lead) if lead else copy_strided(dy)  # a new tensor, never dy itself
    dxhat = mul(dy, gamma.broadcast_to(x.shape))
    m1 = along_rows(mean(dxhat, -1), x.shape)
    m2 = along_rows(mean(mul(dxhat, xhat), -1), x.shape)
    dx = mul(rr, sub(sub(dxhat, m1), mul(xhat, m2)))
    return dx, dgamma, dbeta


def _layer_norm_vjp(g: Tensor, args: Any, outs: Any, needs: Any) -> tuple[Tensor, ...]:
    x, gamma, _, _ = args
    _, mu, r = outs
    return layer_norm_backward(g, x, gamma, mu, r)


def _cost(n: int) -> Any:
    return lambda args: ((n + 1) * args[0].nbytes, 8 * args[0].size)


LAYER_NORM = OpUnit(
    "layer_norm", "fused", LayerNormMethods.layer_norm, module="layer_norm", function=layer_norm,
    outputs=("y", "mean", "rstd"), composite=layer_norm_composite, vjp=_layer_norm_vjp,
    differentiable=(0, 1, 2), nan="a NaN makes its row and statistics NaN",
    tolerance=Tolerances(Tolerance(2e-5, 1e-4), Tolerance(1e-10, 1e-10),
                         why="mean and variance accumulate over the row, then rsqrt"),
    cost=_cost(1),
    testing=_SAMPLES,
)  # fmt: skip
LAYER_NORM_BACKWARD = OpUnit(
    "layer_norm_backward", "fused", LayerNormMethods.layer_norm_backward, module="layer_norm",
    function=layer_norm_backward, outputs=("dx", "dgamma", "dbeta"),
    composite=layer_norm_backward_composite,
    tolerance=Tolerances(Tolerance(1e-4, 1e-4), Tolerance(1e-10, 1e-10),
                         why="row means and column sums over all rows"),
    cost=_cost(4),
    testing=_SAMPLES,
)  # fmt: skip

register(LAYER_NORM, LAYER_NORM_BACKWARD)
