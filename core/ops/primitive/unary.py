"""Elementwise unary ops: ``neg exp log sqrt rsqrt tanh abs``.

Float operands of one dtype in, a new tensor of the same shape and dtype out. Every op is
IEEE on special values: NaN in gives NaN out; ``exp(-inf) = 0``, ``exp(inf) = inf``,
``tanh(+-inf) = +-1``, ``log(0) = -inf``, ``log(x < 0) = NaN``, ``rsqrt(0) = inf``. Kernels
must keep this under fast math (no clamp that turns NaN into a number).
"""

from __future__ import annotations

from typing import Any, Protocol

from ...tensor import Tensor
from .. import checks
from ..dispatch import dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from .binary import add_scalar, div, mul, mul_scalar, sub
from .memory import full_like
from .select import compare

FLOATS = checks.FLOATS
_SAMPLES = samples_module(__name__)


class UnaryMethods(Protocol):
    def neg(self, x: Tensor) -> Tensor:
        """``-x`` (exact; ``-0.0`` for ``0.0``)."""
        ...

    def exp(self, x: Tensor) -> Tensor:
        """``e**x``; ``exp(-inf) = 0``, overflow gives ``inf``."""
        ...

    def log(self, x: Tensor) -> Tensor:
        """Natural log, IEEE: ``log(0) = -inf``, ``log(x < 0) = NaN`` (autograd checks the
        domain itself; the raw op never raises on values)."""
        ...

    def sqrt(self, x: Tensor) -> Tensor:
        """``sqrt(x)``; NaN for ``x < 0``."""
        ...

    def rsqrt(self, x: Tensor) -> Tensor:
        """``1 / sqrt(x)``; ``inf`` at 0, NaN for ``x < 0``."""
        ...

    def tanh(self, x: Tensor) -> Tensor:
        """Hyperbolic tangent; ``tanh(+-inf) = +-1`` and NaN stays NaN."""
        ...

    def abs(self, x: Tensor) -> Tensor:
        """``|x|`` (exact)."""
        ...


def _unary(unit: OpUnit, x: Tensor) -> Tensor:
    if type(x) is not Tensor or x.dtype not in FLOATS:
        checks.tensor(unit.name, x)
        checks.floats(unit.name, x)
    return dispatch(unit, x.backend, (x,), x)  # the result looks like x


def neg(x: Tensor) -> Tensor:
    return _unary(NEG, x)


def exp(x: Tensor) -> Tensor:
    return _unary(EXP, x)


def log(x: Tensor) -> Tensor:
    return _unary(LOG, x)


def sqrt(x: Tensor) -> Tensor:
    return _unary(SQRT, x)


def rsqrt(x: Tensor) -> Tensor:
    return _unary(RSQRT, x)


def tanh(x: Tensor) -> Tensor:
    return _unary(TANH, x)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - numpy spelling
    return _unary(ABS, x)


# -- VJPs (raw ops only; saved output reused where it is the cheaper form) ------------------------
def _neg_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    return (neg(g),)


def _exp_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    return (mul(g, y),)


def _log_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    return (div(g, args[0]),)


def _sqrt_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    return (div(mul_scalar(g, 0.5), y),)


def _rsqrt_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    return (mul(g, mul_scalar(mul(mul(y, y), y), -0.5)),)  # d x^-1/2 = -x^-3/2 / 2


def _tanh_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    return (mul(g, add_scalar(neg(mul(y, y)), 1.0)),)


def _abs_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    zero = full_like(args[0], 0.0)
    sign = sub(compare(args[0], zero, "gt"), compare(args[0], zero, "lt"))  # 0 at 0
    return (mul(g, sign),)


def _cost(flops: int) -> Any:
    return lambda args: (2 * args[0].nbytes, flops * args[0].size)


#: exp/log/tanh/sqrt/rsqrt: GPU math libraries guarantee a few ulp, not 0.5 ulp.
_MATH = Tolerances(Tolerance(1e-6, 1e-5), why="GPU math libraries guarantee a few ulp")


def _unit(name: str, fn: Any, vjp: Any, tol: Tolerances, flops: int) -> OpUnit:
    return OpUnit(
        name, "primitive", getattr(UnaryMethods, name), module="unary", function=fn,
        vjp=vjp, differentiable=(0,), tolerance=tol, cost=_cost(flops), testing=_SAMPLES,
    )  # fmt: skip


_EXACT = Tolerances(why="exact (sign/magnitude only)", exact=True)
NEG = _unit("neg", neg, _neg_vjp, _EXACT, 1)
EXP = _unit("exp", exp, _exp_vjp, _MATH, 1)
LOG = _unit("log", log, _log_vjp, _MATH, 1)
SQRT = _unit("sqrt", sqrt, _sqrt_vjp, _MATH, 1)
RSQRT = _unit("rsqrt", rsqrt, _rsqrt_vjp, _MATH, 2)
TANH = _unit("tanh", tanh, _tanh_vjp, _MATH, 1)
ABS = _unit("abs", abs, _abs_vjp, _EXACT, 1)

register(NEG, EXP, LOG, SQRT, RSQRT, TANH, ABS)
