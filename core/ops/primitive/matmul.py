"""``matmul``: ``op(a) @ op(b)`` over identical leading batch dims.

``op`` swaps the last two axes when its flag is set, so a backend computes ``aᵀ @ b`` and
``a @ bᵀ`` without a copy (the backward of a linear layer needs both). No implicit
broadcasting: the batch dims must match exactly. Accumulation order is the backend's; K = 0
gives zeros.
"""

from __future__ import annotations

import builtins
from typing import Any, Protocol

import numpy as np

from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register
from ..samples import (
    SIZES,
    SMALL_SIZES,
    Arr,
    Ctx,
    Draw,
    Example,
    Params,
    Samples,
    edges,
    error,
    label,
    normal,
    rms,
    rng_of,
    with_specials,
)

FLOATS = checks.FLOATS


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


# -- conformance samples ---------------------------------------------------------------------------
def _draw(d: Draw) -> Params:
    return {
        "batch": tuple(d.choice(SMALL_SIZES) for _ in range(d.integer(0, 2))),
        "m": d.choice(SIZES), "k": d.choice(SIZES), "n": d.choice(SIZES),
        "ta": d.boolean(), "tb": d.boolean(),
    }  # fmt: skip


def _build(p: Params, ctx: Ctx) -> Example:
    rng, b = rng_of(p), tuple(p["batch"])
    a_shape = b + ((p["k"], p["m"]) if p["ta"] else (p["m"], p["k"]))
    b_shape = b + ((p["n"], p["k"]) if p["tb"] else (p["k"], p["n"]))
    lay = p["layout"] if p["layout"] != "broadcast" or b else "dense"
    av, bv = normal(rng, a_shape), normal(rng, b_shape)
    if p.get("special"):
        av = with_specials(av, rng, np.nan, np.inf)
    args = [Arr(av, layout=lay), Arr(bv, layout=str(p.get("layout_b", lay)))]
    return Example(label(p), args, {"transpose_a": p["ta"], "transpose_b": p["tb"]}, params=p)


def _e(lbl: str, batch: tuple[int, ...], m: int, k: int, n: int, ta: bool, tb: bool,
       **kw: Any) -> Params:  # fmt: skip
    return {"label": lbl, "batch": batch, "m": m, "k": k, "n": n, "ta": ta, "tb": tb, **kw}


EDGES = edges(
    _e("1x1x1", (), 1, 1, 1, False, False),
    _e("odd sizes", (3,), 33, 67, 5, False, False),
    _e("transpose_a", (), 9, 17, 3, True, False),
    _e("transpose_b", (), 9, 17, 3, False, True),
    _e("both transposed", (2, 2), 5, 7, 6, True, True),
    _e("past a 64-tile", (), 130, 70, 129, False, False),
    _e("K = 0", (2,), 3, 0, 4, False, False),
    _e("M = 0", (), 0, 5, 4, False, True),
    _e("strided views", (2,), 13, 8, 65, False, True, layout="transposed"),
    _e("sliced views", (), 31, 33, 7, True, False, layout="sliced"),
    _e("offset x[1:]", (2,), 6, 9, 5, False, False, layout="offset"),
    _e("rows x[:, :k]", (), 7, 6, 11, False, True, layout="rows", layout_b="permuted"),
    _e("NaN and inf in a", (), 6, 5, 4, False, False, special=True),
)


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
    "matmul", "primitive", "matmul", MatmulMethods.matmul, function=matmul,
    vjp=_matmul_vjp, differentiable=(0, 1),
    tolerance=Tolerances(Tolerance(1e-6, 1e-5), Tolerance(1e-14, 1e-12), scale=_scale,
                         why="accumulation order is the backend's; atol per unit of K*rms*rms"),
    samples=Samples(_build, EDGES, _draw, bench=_e("bench", (), 512, 512, 512, False, False)),
    cost=_cost,
    errors=(
        error("matmul_inner_dims", "matmul", lambda t: matmul(t.f(2, 3), t.f(4, 5))),
        error("matmul_transpose_b_dims", "matmul",
              lambda t: matmul(t.f(2, 3), t.f(3, 5), transpose_b=True)),
        error("matmul_batch_dims", "matmul", lambda t: matmul(t.f(2, 2, 3), t.f(3, 3, 4))),
        error("matmul_rank_1", "matmul", lambda t: matmul(t.f(3), t.f(3, 2))),
        error("matmul_mixed_devices", "matmul", lambda t: matmul(t.f(2, 2), t.other_device(2, 2))),
        error("matmul_index_dtype", "matmul", lambda t: matmul(t.i(2, 2), t.i(2, 2)), "index"),
    ),
)  # fmt: skip

register(MATMUL)
