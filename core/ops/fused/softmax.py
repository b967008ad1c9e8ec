"""Softmax over the last axis and its backward.

Max-subtracted, so logits far past ``exp``'s overflow (1e4) give exact probabilities;
``-inf`` entries give 0, a row that is all ``-inf`` gives NaN (as the math says), a NaN
anywhere in a row gives a NaN row. An empty last axis gives an empty result.
``softmax_backward(dy, y) = y * (dy - rowsum(dy * y))`` reuses the saved output.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register
from ..primitive.binary import div, mul, sub
from ..primitive.memory import full_like
from ..primitive.reduce import max, sum
from ..primitive.unary import exp
from ..samples import Arr, Ctx, Draw, Example, Params, Samples, edges, error, label, normal, rng_of


class SoftmaxMethods(Protocol):
    def softmax(self, x: Tensor) -> Tensor:
        """Softmax over the last axis (rank >= 1), max-subtracted; same shape and dtype.

        ``-inf`` entries give 0; an all ``-inf`` row gives NaN; a NaN in a row gives a NaN
        row; logits of any finite magnitude give finite probabilities."""
        ...

    def softmax_backward(self, dy: Tensor, y: Tensor) -> Tensor:
        """``y * (dy - rowsum(dy * y))`` where ``y`` is softmax's output."""
        ...


def softmax(x: Tensor) -> Tensor:
    backend = checks.float_operands("softmax", x)
    checks.min_rank("softmax", x, 1, "x")
    return dispatch(SOFTMAX, backend, (x,), Out(x.shape, x.dtype))


def softmax_backward(dy: Tensor, y: Tensor) -> Tensor:
    backend = checks.float_operands("softmax_backward", dy, y)
    checks.min_rank("softmax_backward", y, 1, "y")
    checks.shape_is("softmax_backward", dy, y.shape, "dy")
    return dispatch(SOFTMAX_BACKWARD, backend, (dy, y), Out(y.shape, y.dtype))


def along_rows(stat: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A per-row statistic (shape ``shape[:-1]`` or keepdims) broadcast along the last axis."""
    if stat.ndim == len(shape) - 1:
        stat = stat.expand_dims(-1)  # a view for any strides (reshape would need dense)
    return stat.broadcast_to(shape)


def softmax_composite(x: Tensor) -> Tensor:
    if x.shape[-1] == 0:
        return full_like(x, 0.0)  # an empty result of the same shape
    shifted = sub(x, along_rows(max(x, -1, keepdims=True), x.shape))
    e = exp(shifted)
    return div(e, along_rows(sum(e, -1, keepdims=True), x.shape))


def softmax_backward_composite(dy: Tensor, y: Tensor) -> Tensor:
    dot = sum(mul(dy, y), -1, keepdims=True)
    return mul(y, sub(dy, along_rows(dot, y.shape)))


def _softmax_vjp(g: Tensor, args: Any, y: Tensor, needs: Any) -> tuple[Tensor]:
    return (softmax_backward(g, y),)


# -- conformance samples ---------------------------------------------------------------------------
def softmax_input(p: Params) -> np.ndarray:
    rng = rng_of(p)
    x = normal(rng, p["shape"], 3.0)
    if p.get("large"):  # far past float32's exp overflow (88.7): needs the max subtraction
        x = rng.uniform(-1e4, 1e4, p["shape"])
    if p.get("neg_inf") and x.shape[-1] > 1:
        x[..., 1::2] = -np.inf  # every row keeps its first entry finite
    if p.get("all_inf_row"):
        x.reshape(-1, x.shape[-1])[0] = -np.inf  # softmax of an all -inf row is NaN
    if p.get("nan_row"):
        x.reshape(-1, x.shape[-1])[1, 2] = np.nan
    return x


EDGES = edges(
    {"label": "long row (4097)", "shape": (2, 4097)},
    {"label": "size-1 axes", "shape": (1, 1, 1)},
    {"label": "T=1", "shape": (1, 1, 33)},
    {"label": "odd sizes", "shape": (3, 5, 67)},
    {"label": "transposed", "shape": (9, 33), "layout": "transposed"},
    {"label": "broadcast", "shape": (4, 17), "layout": "broadcast"},
    {"label": "sliced", "shape": (3, 65), "layout": "sliced"},
    {"label": "offset x[1:]", "shape": (4, 9), "layout": "offset"},
    {"label": "rows x[:, :k]", "shape": (5, 12), "layout": "rows"},
    {"label": "logits +-1e4 (past exp overflow)", "shape": (4, 100), "large": True},
    {"label": "rows with -inf", "shape": (5, 33), "neg_inf": True},
    {"label": "width 1", "shape": (6, 1)},
    {"label": "empty rows", "shape": (0, 5)},
    {"label": "empty last axis", "shape": (3, 0)},
    {"label": "a NaN makes its row NaN", "shape": (3, 6), "nan_row": True},
)


def _draw(d: Draw) -> Params:
    return {"shape": d.shape(), "large": d.boolean() and d.boolean()}


def _build(p: Params, ctx: Ctx) -> Example:
    return Example(label(p), [Arr(softmax_input(p), layout=p["layout"])], params=p)


def np_softmax(x: np.ndarray) -> np.ndarray:
    """Host float64 softmax, for the saved outputs backward samples need."""
    with np.errstate(invalid="ignore"):
        if x.shape[-1] == 0:
            return x.copy()
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _build_backward(p: Params, ctx: Ctx) -> Example:
    y = np_softmax(softmax_input(p).astype(ctx.dtype).astype(np.float64))
    dy = normal(np.random.default_rng(p["seed"] + 1), p["shape"])
    return Example(label(p), [Arr(dy, layout=p["layout"]), Arr(y, layout=p["layout"])], params=p)


def _cost(n: int) -> Any:
    return lambda args: ((n + 1) * args[0].nbytes, 5 * args[0].size)


SOFTMAX = OpUnit(
    "softmax", "fused", "softmax", SoftmaxMethods.softmax, function=softmax,
    composite=softmax_composite, vjp=_softmax_vjp, differentiable=(0,),
    nan="a NaN makes its row NaN; an all -inf row gives NaN",
    tolerance=Tolerances(Tolerance(1e-6, 2e-5), Tolerance(1e-12, 1e-10),
                         why="exp ulps plus a row sum of up to 4097 terms"),
    samples=Samples(_build, EDGES + edges(
        {"label": "all -inf row gives NaN", "shape": (3, 7), "all_inf_row": True}), _draw,
        bench={"shape": (1024, 1024)}),
    cost=_cost(1),
    errors=(error("softmax_0d", "softmax", lambda t: softmax(t.f())),
            error("softmax_index_dtype", "softmax", lambda t: softmax(t.i(3)), "index")),
)  # fmt: skip
SOFTMAX_BACKWARD = OpUnit(
    "softmax_backward", "fused", "softmax", SoftmaxMethods.softmax_backward,
    function=softmax_backward, composite=softmax_backward_composite,
    tolerance=Tolerances(Tolerance(1e-5, 1e-4), Tolerance(1e-11, 1e-10),
                         why="a row sum of dy * y, then a difference"),
    samples=Samples(_build_backward, EDGES, _draw, bench={"shape": (1024, 1024)}), cost=_cost(2),
    errors=(error("softmax_backward_shapes", "softmax_backward",
                  lambda t: softmax_backward(t.f(2, 3), t.f(2, 4))),),
)  # fmt: skip

register(SOFTMAX, SOFTMAX_BACKWARD)
