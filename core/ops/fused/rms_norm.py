"""RMSNorm over the last axis and its backward.

``y = x * rstd * gamma`` with ``rstd = 1 / sqrt(mean(x^2) + eps)`` (Zhang and Sennrich,
2019): LayerNorm without the centring and the bias, what LLaMA-style transformers use.
``rstd`` is an output so the backward needs no second pass over ``x`` for it:
``dx = rstd * (g - xhat * mean(g * xhat))`` with ``g = dy * gamma``, ``xhat = x * rstd``,
and ``dgamma`` is the column sum of ``dy * xhat``. C = 0 is refused by core; zero rows give
empty results.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...dtypes import compute_dtype
from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.binary import add_scalar, mul, sub
from ..primitive.reduce import mean, sum
from ..primitive.unary import rsqrt
from ..rows import along_rows

_SAMPLES = samples_module(__name__)


class RMSNormMethods(Protocol):
    def rms_norm(self, x: Tensor, gamma: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        """``(y, rstd)`` over the last axis of ``x[..., C]`` (C >= 1) with ``gamma[C]``:
        ``rstd = 1/sqrt(mean(x^2) + eps)`` of shape ``x.shape[:-1]``, ``y = x * rstd * gamma``;
        ``y`` in ``x.dtype``, ``rstd`` in the compute dtype (float32 for
        float16/bfloat16).

        Special values: a NaN in a row gives a NaN row and a NaN ``rstd``; a ``+-inf``
        makes that row's ``rstd`` 0, so the infinite element becomes NaN (``inf * 0``) and
        the finite ones 0 (signed as ``x``); a row of zeros gives zeros (``-0.0`` stays
        ``-0.0``) and ``rstd = 1/sqrt(eps)``. A NaN or infinity in ``gamma`` reaches column
        ``c`` of every row by IEEE (``0 * inf`` is NaN). Zero rows give empty results; C = 0
        is refused by core.

        Composite: primitives only (``mul``, ``mean``, ``add_scalar``, ``rsqrt``)."""
        ...

    def rms_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``(dx, dgamma[C])`` from the forward's saved ``rstd``: with ``g = dy * gamma`` and
        ``xhat = x * rstd``, ``dx = rstd * (g - xhat * mean(g * xhat))`` per row and
        ``dgamma`` the sum over rows of ``dy * xhat`` (long column sums accumulate in blocks
        or pairwise).

        Special values: IEEE throughout; a NaN or infinity in a row of ``dy`` or ``x`` (or a
        NaN ``rstd``) makes that row of ``dx`` NaN and reaches ``dgamma`` through the column
        sums. ``-0.0`` is 0.0. Zero rows give an empty ``dx`` and a zero ``dgamma``.

        Composite: primitives only."""
        ...


def rms_norm(x: Tensor, gamma: Tensor, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    op = "rms_norm"
    backend = checks.float_operands(op, x, gamma)
    c = checks.features(op, x)
    checks.shape_is(op, gamma, (c,), "gamma")
    eps = checks.number(op, eps, "eps")
    if not eps > 0:
        raise ShapeError(f"[{op}] eps must be positive; got {eps}")
    return dispatch(RMS_NORM, backend, (x, gamma, eps),
                    (Out(x.shape, x.dtype), Out(x.shape[:-1], compute_dtype(x.dtype))))  # fmt: skip


def rms_norm_backward(dy: Tensor, x: Tensor, gamma: Tensor, rstd: Tensor) -> tuple[Tensor, Tensor]:
    op = "rms_norm_backward"
    backend = checks.float_operands(op, dy, x, gamma)
    checks.statistics(op, x, rstd=rstd)
    c = checks.features(op, x)
    checks.shape_is(op, dy, x.shape, "dy")
    checks.shape_is(op, gamma, (c,), "gamma")
    checks.shape_is(op, rstd, x.shape[:-1], "rstd")
    expect = (Out(x.shape, x.dtype), Out((c,), x.dtype))
    return dispatch(RMS_NORM_BACKWARD, backend, (dy, x, gamma, rstd), expect)


def rms_norm_composite(x: Tensor, gamma: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    r = rsqrt(add_scalar(mean(mul(x, x), -1), eps))
    y = mul(mul(x, along_rows(r, x.shape)), gamma.broadcast_to(x.shape))
    return y, r


def rms_norm_backward_composite(
    dy: Tensor, x: Tensor, gamma: Tensor, r: Tensor
) -> tuple[Tensor, Tensor]:
    rr = along_rows(r, x.shape)
    xhat = mul(x, rr)
    lead = tuple(range(x.ndim - 1))
    dgamma = sum(mul(dy, xhat), lead) if lead else mul(dy, xhat)
    g = mul(dy, gamma.broadcast_to(x.shape))
    m = along_rows(mean(mul(g, xhat), -1), x.shape)
    dx = mul(rr, sub(g, mul(xhat, m)))
    return dx, dgamma


def _rms_norm_vjp(g: Tensor, args: Any, outs: Any, needs: Any) -> tuple[Tensor, ...]:
    x, gamma, _ = args
    _, r = outs
    return rms_norm_backward(g, x, gamma, r)


def _cost(n: int) -> Any:
    return lambda args: ((n + 1) * args[0].nbytes, 5 * args[0].size)


RMS_NORM = OpUnit(
    "rms_norm", "fused", RMSNormMethods.rms_norm, module="rms_norm", function=rms_norm,
    outputs=("y", "rstd"), composite=rms_norm_composite, vjp=_rms_norm_vjp,
    differentiable=(0, 1), nan="a NaN makes its row and rstd NaN",
    tolerance=Tolerances(Tolerance(2e-5, 1e-4), Tolerance(1e-10, 1e-10),
                         why="a mean of squares accumulates over the row, then rsqrt "
                             "(layer_norm's budget; one pass fewer)"),
    cost=_cost(1),
    testing=_SAMPLES,
    since=(1, 4),
)  # fmt: skip
RMS_NORM_BACKWARD = OpUnit(
    "rms_norm_backward", "fused", RMSNormMethods.rms_norm_backward, module="rms_norm",
    function=rms_norm_backward, outputs=("dx", "dgamma"),
    composite=rms_norm_backward_composite,
    tolerance=Tolerances(Tolerance(1e-4, 1e-4), Tolerance(1e-10, 1e-10),
                         why="a row mean of g * xhat, and dgamma's column sums over all rows"),
    cost=_cost(3),
    testing=_SAMPLES,
    since=(1, 4),
)  # fmt: skip

register(RMS_NORM, RMS_NORM_BACKWARD)
