"""Elementwise binary ops: ``add sub mul div maximum minimum`` and the scalar forms
``add_scalar mul_scalar pow_scalar``.

Tensor operands have equal shapes and one float dtype: riftco never broadcasts
implicitly (``broadcast_to`` is an explicit, zero-copy view). Results are new tensors of
that shape and dtype. IEEE throughout: NaN propagates, ``inf - inf = NaN``, ``x / 0 = +-inf``.
``maximum``/``minimum`` return NaN when either operand is NaN (numpy's ``np.maximum``, not
C's ``fmax``). A scalar travels as a Python float and is converted to the tensor's dtype.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...tensor import Tensor
from .. import checks
from ..dispatch import dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from .select import compare

FLOATS = checks.FLOATS
_SAMPLES = samples_module(__name__)


class BinaryMethods(Protocol):
    def add(self, a: Tensor, b: Tensor) -> Tensor:
        """``a + b`` for equal shapes and dtypes (no implicit broadcasting)."""
        ...

    def sub(self, a: Tensor, b: Tensor) -> Tensor:
        """``a - b``."""
        ...

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        """``a * b``."""
        ...

    def div(self, a: Tensor, b: Tensor) -> Tensor:
        """``a / b``; division by zero gives +-inf or NaN (IEEE), never an error."""
        ...

    def maximum(self, a: Tensor, b: Tensor) -> Tensor:
        """Elementwise maximum; NaN if either operand is NaN."""
        ...

    def minimum(self, a: Tensor, b: Tensor) -> Tensor:
        """Elementwise minimum; NaN if either operand is NaN."""
        ...

    def add_scalar(self, x: Tensor, value: float) -> Tensor:
        """``x + value`` with ``value`` converted to ``x.dtype``."""
        ...

    def mul_scalar(self, x: Tensor, value: float) -> Tensor:
        """``x * value`` with ``value`` converted to ``x.dtype``."""
        ...

    def pow_scalar(self, x: Tensor, value: float) -> Tensor:
        """``x ** value``; for integral ``value`` negative bases are fine, for fractional
        ones they give NaN; ``0 ** negative = inf``; ``x ** 0 = 1`` (NaN included)."""
        ...


def _binary(unit: OpUnit, a: Tensor, b: Tensor) -> Tensor:
    if not (
        type(a) is Tensor
        and type(b) is Tensor
        and a.backend is b.backend
        and a.shape == b.shape
        and a.dtype == b.dtype
        and a.dtype in FLOATS
    ):  # the slow path raises the right error (type, device, shape, dtype in that order)
        checks.tensor(unit.name, a)
        checks.tensor(unit.name, b)
        checks.same_backend(unit.name, a, b)
        checks.same_shape(unit.name, a, b)
        checks.same_dtype(unit.name, a, b)
        checks.floats(unit.name, a)
    return dispatch(unit, a.backend, (a, b), a)  # the result looks like a


def add(a: Tensor, b: Tensor) -> Tensor:
    return _binary(ADD, a, b)


def sub(a: Tensor, b: Tensor) -> Tensor:
    return _binary(SUB, a, b)


def mul(a: Tensor, b: Tensor) -> Tensor:
    return _binary(MUL, a, b)


def div(a: Tensor, b: Tensor) -> Tensor:
    return _binary(DIV, a, b)


def maximum(a: Tensor, b: Tensor) -> Tensor:
    return _binary(MAXIMUM, a, b)


def minimum(a: Tensor, b: Tensor) -> Tensor:
    return _binary(MINIMUM, a, b)


def _scalar(unit: OpUnit, x: Tensor, value: Any) -> Tensor:
    tv = type(value)
    if type(x) is Tensor and (tv is float or tv is int) and x.dtype in FLOATS:
        return dispatch(unit, x.backend, (x, float(value)), x)
    checks.tensor(unit.name, x)
    value = checks.number(unit.name, value, "scalar")  # keeps a number a replay refills
    checks.floats(unit.name, x)
    return dispatch(unit, x.backend, (x, value), x)


def add_scalar(x: Tensor, value: float) -> Tensor:
    return _scalar(ADD_SCALAR, x, value)


def mul_scalar(x: Tensor, value: float) -> Tensor:
    return _scalar(MUL_SCALAR, x, value)


def pow_scalar(x: Tensor, value: float) -> Tensor:
    return _scalar(POW_SCALAR, x, value)


# -- VJPs ------------------------------------------------------------------------------------------
def _add_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor, Tensor]:
    return g, g


def _sub_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor, Tensor | None]:
    return g, (mul_scalar(g, -1.0) if needs[1] else None)


def _mul_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor | None, Tensor | None]:
    a, b = args
    return (mul(g, b) if needs[0] else None, mul(g, a) if needs[1] else None)


def _div_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor, Tensor | None]:
    ga = div(g, args[1])  # d(a/b)/db = -(a/b)/b, so gb = -ga * y
    return ga, (mul_scalar(mul(ga, y), -1.0) if needs[1] else None)


def _select_vjp(pick_a: str) -> Any:
    """maximum/minimum: the gradient goes to the selected operand, shared equally on ties."""

    def vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor | None, Tensor | None]:
        a, b = args
        share = add(compare(a, b, pick_a), mul_scalar(compare(a, b, "eq"), 0.5))
        ga = mul(g, share)
        return (ga if needs[0] else None, sub(g, ga) if needs[1] else None)

    return vjp


def _add_scalar_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    return (g,)


def _mul_scalar_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    return (mul_scalar(g, args[1]),)


def _pow_scalar_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    x, p = args
    if p == 0.0:
        return (mul_scalar(g, 0.0),)
    return (mul(g, mul_scalar(pow_scalar(x, p - 1.0), p)),)


def _cost(flops: int) -> Any:
    return lambda args: (3 * args[0].nbytes if isinstance(args[1], Tensor) else 2 * args[0].nbytes,
                         flops * args[0].size)  # fmt: skip


#: OpenCL allows 2.5 ulp division unless built with -cl-fp32-correctly-rounded-divide-sqrt.
_DIV_TOL = Tolerances(Tolerance(1e-6, 1e-5), why="OpenCL division may be 2.5 ulp")
_POW_TOL = Tolerances(Tolerance(1e-6, 1e-5), why="pow is a few ulp on GPU math libraries")
_EXACT = Tolerances(exact=True, why="a selection, exact")


def _binary_unit(name: str, fn: Any, vjp: Any, tol: Tolerances) -> OpUnit:
    return OpUnit(
        name, "primitive", getattr(BinaryMethods, name), module="binary", function=fn,
        vjp=vjp, differentiable=(0, 1), tolerance=tol, cost=_cost(1), testing=_SAMPLES,
    )  # fmt: skip


def _scalar_unit(name: str, fn: Any, vjp: Any, tol: Tolerances) -> OpUnit:
    return OpUnit(
        name, "primitive", getattr(BinaryMethods, name), module="binary", function=fn,
        vjp=vjp, differentiable=(0,), tolerance=tol, cost=_cost(1), testing=_SAMPLES,
    )  # fmt: skip


ADD = _binary_unit("add", add, _add_vjp, Tolerances())
SUB = _binary_unit("sub", sub, _sub_vjp, Tolerances())
MUL = _binary_unit("mul", mul, _mul_vjp, Tolerances())
DIV = _binary_unit("div", div, _div_vjp, _DIV_TOL)
MAXIMUM = _binary_unit("maximum", maximum, _select_vjp("gt"), _EXACT)
MINIMUM = _binary_unit("minimum", minimum, _select_vjp("lt"), _EXACT)
ADD_SCALAR = _scalar_unit("add_scalar", add_scalar, _add_scalar_vjp, Tolerances())
MUL_SCALAR = _scalar_unit("mul_scalar", mul_scalar, _mul_scalar_vjp, Tolerances())
POW_SCALAR = _scalar_unit("pow_scalar", pow_scalar, _pow_scalar_vjp, _POW_TOL)

register(ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, ADD_SCALAR, MUL_SCALAR, POW_SCALAR)
