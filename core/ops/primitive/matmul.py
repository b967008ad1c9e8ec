"""``matmul``: ``op(a) @ op(b)`` over identical leading batch dims.

``op`` swaps the last two axes when its flag is set, so a backend computes ``aᵀ @ b`` and
``a @ bᵀ`` without a copy (the backward of a linear layer needs both). No implicit
broadcasting: the batch dims must match exactly. Accumulation order is the backend's; K = 0
gives zeros.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, rms, samples_module

if TYPE_CHECKING:
    from ..samples import Example

FLOATS = checks.FLOATS
_SAMPLES = samples_module(__name__)


class MatmulMethods(Protocol):
    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        """``op(a) @ op(b)``; ``op`` swaps the last two axes when its flag is set.

        After the flags ``a`` is ``[..., M, K]`` and ``b`` is ``[..., K, N]`` with identical
        leading batch dims (rank >= 2, no broadcasting); result ``[..., M, N]`` in the
        operands' dtype. IEEE (NaN propagates); K = 0 gives zeros."""
        ...


def _dims(a: Tensor, b: Tensor, ta: bool, tb: bool) -> tuple[int, int, int, int]:
    m, k = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
    k2, n = (b.shape[-1], b.shape[-2]) if tb else (b.shape[-2], b.shape[-1])
    return m, k, k2, n


def matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    ta = (
        transpose_a
        if type(transpose_a) is bool
        else checks.flag("matmul", transpose_a, "transpose_a")
    )
    tb = (
        transpose_b
        if type(transpose_b) is bool
        else checks.flag("matmul", transpose_b, "transpose_b")
    )
    if not (
        type(a) is Tensor
        and type(b) is Tensor
        and b.backend is a.backend
        and a.dtype == b.dtype
        and a.dtype in FLOATS
        and len(a.shape) >= 2
        and len(a.shape) == len(b.shape)
        and a.shape[:-2] == b.shape[:-2]
    ):
        checks.float_operands("matmul", a, b)
        if a.ndim < 2 or b.ndim < 2:
            raise ShapeError(f"[matmul] operands need rank >= 2; got {a.shape} and {b.shape}")
        raise ShapeError(
            f"[matmul] batch dims must be identical (no implicit broadcasting); got "
            f"{a.shape} and {b.shape}"
        )
    m, k, k2, n = _dims(a, b, ta, tb)
    if k != k2:
        raise ShapeError(
            f"[matmul] inner dims differ: {a.shape}{'ᵀ' if ta else ''} @ "
            f"{b.shape}{'ᵀ' if tb else ''} ({k} != {k2})"
        )
    return dispatch(MATMUL, a.backend, (a, b, ta, tb), Out(a.shape[:-2] + (m, n), a.dtype))


def _matmul_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor | None, ...]:
    a, b, ta, tb = args
    ga = gb = None
    if needs[0]:  # d op(a) = G op(b)ᵀ, then undo op on a
        ga = matmul(b, g, tb, True) if ta else matmul(g, b, False, not tb)
    if needs[1]:  # d op(b) = op(a)ᵀ G
        gb = matmul(g, a, True, ta) if tb else matmul(a, g, not ta, False)
    return ga, gb


def _scale(ex: Example) -> float:
    a, b = ex.args[0].value, ex.args[1].value
    k = a.shape[-2] if ex.kwargs["transpose_a"] else a.shape[-1]
    return builtins.max(1.0, k * rms(a) * rms(b))


def _cost(args: list[Any]) -> tuple[int, int]:
    a, b, ta, _ = args
    m, k = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
    n = b.size // max(1, int(np.prod(b.shape[:-2]))) // max(k, 1)
    batch = int(np.prod(a.shape[:-2]))
    return ((a.size + b.size + batch * m * n) * a.dtype.itemsize, 2 * batch * m * n * k)


MATMUL = OpUnit(
    "matmul", "primitive", MatmulMethods.matmul, module="matmul", function=matmul,
    vjp=_matmul_vjp, differentiable=(0, 1),
    tolerance=Tolerances(Tolerance(1e-6, 1e-5), Tolerance(1e-14, 1e-12), scale=_scale,
                         why="accumulation order is the backend's; atol per unit of K*rms*rms"),
    cost=_cost, testing=_SAMPLES,
)  # fmt: skip

register(MATMUL)
