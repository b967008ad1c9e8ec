"""GELU and its backward, in the tanh form (GPT-2's) and the exact erf form.

``"tanh"``: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``; ``"none"``:
``0.5 x (1 + erf(x / sqrt 2))``. Elementwise, same shape and dtype, NaN propagates, and
a large finite ``|x|`` must not overflow an intermediate (``gelu(1e4) = 1e4``,
``gelu(-1e4) = -0.0``): a tanh written as ``(e^2u - 1) / (e^2u + 1)`` gives NaN there. The
infinities follow the formula: ``gelu(+inf) = +inf``, ``gelu(-inf) = NaN`` (``-inf * 0``),
and the derivative is NaN at both. Metal has no ``erf``: kernels carry their own, accurate
to the element type.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.binary import add, add_scalar, maximum, minimum, mul, mul_scalar, pow_scalar, sub
from ..primitive.memory import full_like
from ..primitive.select import compare, where
from ..primitive.unary import abs, exp, neg

APPROXIMATIONS: tuple[str, ...] = ("tanh", "none")
_K = math.sqrt(2.0 / math.pi)
_SAMPLES = samples_module(__name__)


class GeluMethods(Protocol):
    def gelu(self, x: Tensor, approximate: str) -> Tensor:
        """GELU of ``x``, ``approximate`` in ``("tanh", "none")``; same shape and dtype.

        ``"none"``: ``x * Phi(x)`` with ``Phi(x) = (1 + erf(x / sqrt 2)) / 2``; ``"tanh"``:
        ``x * (1 + tanh(u)) / 2`` with ``u = sqrt(2/pi) (x + 0.044715 x^3)``. For finite
        ``x`` no intermediate may overflow into inf or NaN: ``gelu(1e4) = 1e4`` and
        ``gelu(-1e4) = -0.0`` (a tanh written as ``(e^2u - 1) / (e^2u + 1)`` gives NaN there;
        ``1 / (1 + exp(-2u))`` does not).

        Special values (the reference's, both forms): ``gelu(NaN) = NaN``,
        ``gelu(+inf) = +inf``, ``gelu(-inf) = NaN`` (the formula's ``-inf * 0``),
        ``gelu(-0.0) = -0.0``; conformance does not tell ``-0.0`` from ``0.0``. Empty ``x``
        gives an empty result.

        Composite: primitives only (``erf`` built from ``exp`` and a series or a rational
        fit)."""
        ...

    def gelu_backward(self, dy: Tensor, x: Tensor, approximate: str) -> Tensor:
        """``dy * gelu'(x)`` for the same ``approximate`` form; ``dy`` has ``x``'s shape.

        ``"none"``: ``gelu'(x) = Phi(x) + x phi(x)`` with ``phi(x) = exp(-x^2/2) / sqrt(2 pi)``;
        ``"tanh"``: ``s + x * 2 s (1 - s) du/dx`` with ``s = 1 / (1 + exp(-2u))`` and
        ``du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)``. Finite ``x`` of any magnitude gives
        a finite derivative (1 for large positive ``x``, 0 for large negative).

        Special values (the reference's, both forms, with ``dy = 1``): ``gelu'(NaN) = NaN``,
        ``gelu'(+inf) = NaN`` and ``gelu'(-inf) = NaN`` (the ``x * phi(x)`` term is
        ``inf * 0``), ``gelu'(-0.0) = 0.5``; a NaN or infinite ``dy`` multiplies through by
        IEEE. Empty operands give an empty result.

        Composite: primitives only."""
        ...


def gelu(x: Tensor, approximate: str = "tanh") -> Tensor:
    backend = checks.float_operands("gelu", x)
    approximate = checks.one_of("gelu", approximate, APPROXIMATIONS, "approximate")
    return dispatch(GELU, backend, (x, approximate), Out(x.shape, x.dtype))


def gelu_backward(dy: Tensor, x: Tensor, approximate: str = "tanh") -> Tensor:
    backend = checks.float_operands("gelu_backward", dy, x)
    approximate = checks.one_of("gelu_backward", approximate, APPROXIMATIONS, "approximate")
    checks.shape_is("gelu_backward", dy, x.shape, "dy")
    return dispatch(GELU_BACKWARD, backend, (dy, x, approximate), Out(x.shape, x.dtype))


# -- composites (primitives only) -----------------------------------------------------------------
def _erf_terms(dtype: np.dtype) -> tuple[float, int]:
    """Clamp and series length for erf in ``dtype``: beyond the clamp erf is +-1 to within
    half an ulp; the series' tail after that many terms is below an eighth of an ulp."""
    clamp, eps = (6.0, 1.1e-16) if dtype == np.float64 else (4.0, 6e-8)
    term = total = clamp
    n = 0
    while term >= eps / 8 * total:
        n += 1
        term *= 2 * clamp * clamp / (2 * n + 1)
        total += term
    return clamp, n


def erf(x: Tensor) -> Tensor:
    """erf to the precision of ``x.dtype``, from primitives only.

    float64: Abramowitz & Stegun 7.1.6, ``erf x = 2/sqrt(pi) e^(-x^2) sum_n 2^n x^(2n+1) /
    (1*3*...*(2n+1))``, whose terms are all positive (no cancellation), on ``x`` clamped to
    where erf rounds to +-1 (~100 terms). float32: A&S 7.1.26 (|error| < 1.5e-7, under an
    ulp of 1), since the series' float32 rounding of ``exp(-x^2)`` costs more than that."""
    if x.dtype != np.float64:
        return _erf_rational(x)
    clamp, terms = _erf_terms(x.dtype)
    xc = minimum(maximum(x, full_like(x, -clamp)), full_like(x, clamp))  # NaN stays NaN
    two_x2 = mul_scalar(mul(xc, xc), 2.0)
    term = total = xc
    for n in range(1, terms + 1):
        term = mul_scalar(mul(term, two_x2), 1.0 / (2 * n + 1))
        total = add(total, term)
    series = mul(mul_scalar(total, 2.0 / math.sqrt(math.pi)), exp(mul_scalar(two_x2, -0.5)))
    # beyond the clamp erf is exactly +-1, so 1 + erf(x) is exactly 0 for very negative x
    zero = full_like(x, 0.0)
    sign = sub(compare(x, zero, "ge"), compare(x, zero, "lt"))
    return where(compare(abs(x), full_like(x, clamp), "ge"), sign, series)


def _erf_rational(x: Tensor) -> Tensor:
    """Abramowitz & Stegun 7.1.26: exp, abs and a polynomial in ``1/(1 + p|x|)``."""
    p, coeffs = 0.3275911, (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
    ax = abs(x)
    t = pow_scalar(add_scalar(mul_scalar(ax, p), 1.0), -1.0)
    poly = mul_scalar(t, coeffs[0])
    for c in coeffs[1:]:
        poly = mul(add_scalar(poly, c), t)
    y = add_scalar(neg(mul(poly, exp(neg(mul(ax, ax))))), 1.0)
    zero = full_like(x, 0.0)
    return mul(y, sub(compare(x, zero, "ge"), compare(x, zero, "lt")))


def _cdf(x: Tensor) -> Tensor:
    return mul_scalar(add_scalar(erf(mul_scalar(x, 1.0 / math.sqrt(2.0))), 1.0), 0.5)


def _sigmoid_2u(x: Tensor) -> Tensor:
    """``(1 + tanh(u)) / 2 = 1 / (1 + exp(-2u))`` with ``u = sqrt(2/pi)(x + 0.044715 x^3)``.

    The sigmoid form never cancels: for large negative x, ``1 + tanh(u)`` is 1 - 1 and a
    one-ulp tanh error times x becomes 1e-4 at x = -1e4, while ``exp(-2u)`` overflows to
    inf and gives exactly 0."""
    u = mul_scalar(add(x, mul_scalar(pow_scalar(x, 3.0), 0.044715)), _K)
    return pow_scalar(add_scalar(exp(mul_scalar(u, -2.0)), 1.0), -1.0)


def gelu_composite(x: Tensor, approximate: str) -> Tensor:
    if approximate == "tanh":
        return mul(x, _sigmoid_2u(x))
    return mul(x, _cdf(x))


def gelu_backward_composite(dy: Tensor, x: Tensor, approximate: str) -> Tensor:
    if approximate == "tanh":
        s = _sigmoid_2u(x)  # d/dx [x s] = s + x * 2 s (1 - s) * du/dx
        du = mul_scalar(add_scalar(mul_scalar(mul(x, x), 3 * 0.044715), 1.0), 2 * _K)
        ds = mul(mul(s, add_scalar(neg(s), 1.0)), du)
        return mul(dy, add(s, mul(x, ds)))
    pdf = mul_scalar(exp(mul_scalar(mul(x, x), -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
    return mul(dy, add(_cdf(x), mul(x, pdf)))


def _gelu_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    x, approximate = args
    return (gelu_backward(g, x, approximate),)


def _cost(n_in: int) -> Any:
    return lambda args: ((n_in + 1) * args[-2 if n_in > 1 else 0].nbytes, 20 * args[0].size)


GELU = OpUnit(
    "gelu", "fused", GeluMethods.gelu, module="gelu", function=gelu,
    composite=gelu_composite, vjp=_gelu_vjp, differentiable=(0,),
    nan="NaN -> NaN; gelu(+inf) = +inf, gelu(-inf) = NaN",
    # tanh/erf are a few ulp; the float64 composite's erf is float64-grade
    tolerance=Tolerances(Tolerance(2e-6, 1e-5), Tolerance(1e-13, 1e-12),
                         why="tanh/erf are a few ulp"),
    cost=_cost(1),
    testing=_SAMPLES,
)  # fmt: skip
GELU_BACKWARD = OpUnit(
    "gelu_backward", "fused", GeluMethods.gelu_backward, module="gelu", function=gelu_backward,
    composite=gelu_backward_composite, nan="NaN at NaN and at +-inf",
    # for large |x| it cancels (1 + tanh) and (1 - tanh^2), then scales by x * dy
    tolerance=Tolerances(Tolerance(2e-5, 2e-5), Tolerance(1e-12, 1e-11),
                         why="(1 + tanh) and (1 - tanh^2) cancel for large |x|"),
    cost=_cost(2),
    testing=_SAMPLES,
)  # fmt: skip

register(GELU, GELU_BACKWARD)
