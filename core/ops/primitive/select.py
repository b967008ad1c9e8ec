"""Masks and conversions: ``where``, ``compare`` and ``cast``.

Masks have the operands' float dtype and hold exactly 1 or 0 (one element type per kernel;
a mask multiplies a gradient directly). ``where`` picks ``a`` wherever ``cond`` is
non-zero, NaN included, ``-0.0`` excluded. ``compare`` is IEEE: every comparison with NaN
is false except ``ne``. ``cast`` truncates floats toward zero and saturates to the target
integer range, NaN becoming 0 (OpenCL's ``convert_int_sat_rtz``), so no input is undefined.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ... import dtypes as _dt
from ...errors import DTypeError, ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import EXACT_TOLERANCES, OpUnit, register, samples_module
from .memory import full_like

_SAMPLES = samples_module(__name__)

COMPARE_OPS: tuple[str, ...] = ("lt", "le", "gt", "ge", "eq", "ne")


class SelectMethods(Protocol):
    def where(self, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
        """``a`` where ``cond != 0`` (NaN counts as non-zero, -0.0 as zero), else ``b``;
        all three share one shape and float dtype."""
        ...

    def compare(self, a: Tensor, b: Tensor, op: str) -> Tensor:
        """Mask (1/0 in ``a.dtype``) of ``a <op> b``, ``op`` in ``lt le gt ge eq ne``;
        IEEE: false for NaN except ``ne``."""
        ...

    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        """Convert to ``dtype`` (a riftco dtype the backend declares, never ``x.dtype``).

        float -> int truncates toward zero and saturates to the int range; NaN -> 0,
        +inf -> max, -inf -> min. int -> int saturates likewise. -> float rounds to nearest
        even, once, from the source value (float64 -> float16/bfloat16 too: not through
        float32, which would round twice); overflow gives +-inf (a float16 result beyond
        65504 + 16, half its last ulp), NaN stays NaN, +-inf and -0.0 stay, subnormal
        results are kept (never flushed to zero). float16/bfloat16 -> float32/float64 is
        exact. Between an index dtype and float16/bfloat16 there is no cast (core refuses
        it: go through float32)."""
        ...


def where(cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    backend = checks.float_operands("where", cond, a, b)
    checks.same_shape("where", cond, a, b)
    return dispatch(WHERE, backend, (cond, a, b), Out(a.shape, a.dtype))


def compare(a: Tensor, b: Tensor, op: str) -> Tensor:
    if op not in COMPARE_OPS:
        raise ShapeError(f"[compare] unknown comparison {op!r}; expected one of {COMPARE_OPS}")
    backend = checks.float_operands("compare", a, b)
    checks.same_shape("compare", a, b)
    return dispatch(COMPARE, backend, (a, b, op), Out(a.shape, a.dtype))


def cast(x: Tensor, dtype: Any) -> Tensor:
    """``x`` converted to ``dtype``; ``x`` itself when it already has that dtype."""
    checks.tensor("cast", x)
    dt = _dt.as_dtype(dtype, "cast")
    checks.supported("cast", x.backend, dt)
    if dt == x.dtype:
        return x
    if (dt in _dt.LOW_PRECISION and x.dtype in _dt.INDEX_DTYPES) or (
        x.dtype in _dt.LOW_PRECISION and dt in _dt.INDEX_DTYPES
    ):
        raise DTypeError(
            f"[cast] no cast between {x.dtype.name} and {dt.name} (shape {x.shape}); cast "
            "through float32 (an integer rounds to a half type in a way each source width "
            "would decide differently)"
        )
    return dispatch(CAST, x.backend, (x, dt), Out(x.shape, dt))


def _cast_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Any]:
    """The gradient goes back in the operand's dtype (rounded once when that is narrower);
    a cast to an index dtype is a step function, whose gradient is not defined."""
    x = args[0]
    if not (_dt.is_float(x.dtype) and _dt.is_float(g.dtype)):
        raise DTypeError(f"[cast] no gradient through a cast from {x.dtype.name} to {y.dtype.name}")
    return (cast(g, x.dtype) if needs[0] else None,)


def _where_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[None, Any, Any]:
    cond = args[0]
    zero = full_like(g, 0.0, (1,) * g.ndim).broadcast_to(g.shape)
    return (
        None,
        where(cond, g, zero) if needs[1] else None,
        where(cond, zero, g) if needs[2] else None,
    )


def _cost(n_in: int) -> Any:
    return lambda args: ((n_in + 1) * args[0].nbytes, args[0].size)


WHERE = OpUnit(
    "where", "primitive", SelectMethods.where, module="select", function=where,
    nan="cond NaN picks a; NaN values pass through", vjp=_where_vjp, differentiable=(1, 2),
    tolerance=EXACT_TOLERANCES, cost=_cost(3), testing=_SAMPLES,
)  # fmt: skip
COMPARE = OpUnit(
    "compare", "primitive", SelectMethods.compare, module="select", function=compare,
    nan="IEEE: false with NaN except ne", tolerance=EXACT_TOLERANCES, cost=_cost(2),
    testing=_SAMPLES,
)  # fmt: skip
CAST = OpUnit(
    "cast", "primitive", SelectMethods.cast, module="select", function=cast,
    nan="float->int: NaN -> 0, +-inf and out-of-range saturate", tolerance=EXACT_TOLERANCES,
    vjp=_cast_vjp, differentiable=(0,), cost=_cost(1), testing=_SAMPLES,
)  # fmt: skip

register(WHERE, COMPARE, CAST)
