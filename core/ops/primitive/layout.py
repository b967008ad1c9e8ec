"""Joining and splitting along the feature axis: ``concatenate_last_axis``,
``split_last_axis``.

Exact copies. All pieces share the leading dims and dtype; widths may be 0 for a
concatenated piece but a split never produces an empty piece. Results are new tensors:
a split piece is never a view of the input.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, Protocol

from ...errors import DTypeError, ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import EXACT_TOLERANCES, OpUnit, register, samples_module
from .memory import full_like

_SAMPLES = samples_module(__name__)


class LayoutMethods(Protocol):
    def concatenate_last_axis(self, xs: Sequence[Tensor]) -> Tensor:
        """Join along the last axis; all leading dims and dtypes equal (any dtype)."""
        ...

    def split_last_axis(self, x: Tensor, sizes: Sequence[int]) -> list[Tensor]:
        """New dense pieces of widths ``sizes`` (positive, summing to ``x.shape[-1]``)."""
        ...


def concatenate_last_axis(xs: Sequence[Tensor]) -> Tensor:
    if not isinstance(xs, (list, tuple)):
        raise DTypeError(
            f"[concatenate_last_axis] expects a list or tuple of tensors; got {type(xs).__name__}"
        )
    xs = list(xs)
    if not xs:
        raise ShapeError("[concatenate_last_axis] needs at least one tensor")
    for x in xs:
        checks.tensor("concatenate_last_axis", x)
    backend = checks.same_backend("concatenate_last_axis", *xs)
    checks.same_dtype("concatenate_last_axis", *xs)
    lead = xs[0].shape[:-1]
    if builtins.any(x.ndim == 0 or x.shape[:-1] != lead for x in xs):
        shapes = ", ".join(str(x.shape) for x in xs)
        raise ShapeError(f"[concatenate_last_axis] leading dims must match; got {shapes}")
    width = builtins.sum(x.shape[-1] for x in xs)
    return dispatch(CONCATENATE, backend, (xs,), Out(lead + (width,), xs[0].dtype))


def split_last_axis(x: Tensor, sizes: Sequence[int]) -> list[Tensor]:
    checks.tensor("split_last_axis", x)
    if not isinstance(sizes, (list, tuple)):
        raise DTypeError(
            f"[split_last_axis] sizes must be a list or tuple of ints; got {type(sizes).__name__}"
        )
    sizes = [checks.integer("split_last_axis", s, "every size") for s in sizes]
    if x.ndim == 0 or builtins.sum(sizes) != x.shape[-1] or builtins.any(s <= 0 for s in sizes):
        raise ShapeError(
            f"[split_last_axis] positive sizes {sizes} must add up to the last dim of {x.shape}"
        )
    lead = x.shape[:-1]
    return dispatch(SPLIT, x.backend, (x, sizes), [Out(lead + (s,), x.dtype) for s in sizes])


def _concat_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor, ...]:
    """The gradient split back into the pieces' widths; a zero-width piece (which a split
    never makes) gets an empty gradient of its own shape."""
    widths = [x.shape[-1] for x in args[0]]
    nonzero = [w for w in widths if w]
    pieces = iter(split_last_axis(g, nonzero) if nonzero else ())
    empty = g.shape[:-1] + (0,)
    return tuple(next(pieces) if w else full_like(g, 0.0, empty) for w in widths)


def _cost(args: list[Any]) -> tuple[int, int]:
    xs = args[0] if isinstance(args[0], list) else [args[0]]
    return (2 * builtins.sum(x.nbytes for x in xs), 0)


CONCATENATE = OpUnit(
    "concatenate_last_axis", "primitive", LayoutMethods.concatenate_last_axis, module="layout",
    function=concatenate_last_axis, vjp=_concat_vjp, differentiable=(0,),
    tolerance=EXACT_TOLERANCES, cost=_cost, testing=_SAMPLES,
)  # fmt: skip
SPLIT = OpUnit(
    "split_last_axis", "primitive", LayoutMethods.split_last_axis, module="layout",
    function=split_last_axis, outputs=("pieces",), tolerance=EXACT_TOLERANCES, cost=_cost,
    testing=_SAMPLES,
)  # fmt: skip

register(CONCATENATE, SPLIT)
