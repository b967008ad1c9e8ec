"""LayerNorm over the last axis and its backward.

``y = (x - mean) * rstd * gamma + beta`` with the biased variance and
``rstd = 1 / sqrt(var + eps)``; the statistics are outputs so the backward needs no second
pass over ``x``. The variance must be computed stably (two passes or Welford): in float32,
rows with mean 100 and spread 1 lose most digits with ``E[x^2] - E[x]^2``.
C = 0 is refused by core; zero rows give empty results.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register
from ..primitive.binary import add, add_scalar, mul, sub
from ..primitive.memory import copy_strided
from ..primitive.reduce import mean, sum
from ..primitive.unary import rsqrt
from ..samples import Arr, Ctx, Draw, Example, Params, Samples, edges, error, label, normal, rng_of
from .softmax import along_rows


class LayerNormMethods(Protocol):
    def layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(y, mean, rstd)`` over the last axis of ``x[..., C]`` (C >= 1) with ``gamma[C]``,
        ``beta[C]``; ``mean`` and ``rstd`` have shape ``x.shape[:-1]``; all in ``x.dtype``.

        Biased variance, computed stably; ``rstd = 1/sqrt(var + eps)``. NaN in a row gives a
        NaN row and NaN statistics."""
        ...

    def layer_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dx, dgamma[C], dbeta[C])`` from the forward's saved statistics."""
        ...


def _need_features(op: str, x: Tensor) -> int:
    checks.min_rank(op, x, 1, "x")
    c = x.shape[-1]
    if c == 0:
        raise ShapeError(f"[{op}] needs a non-empty last axis (C >= 1); got shape {x.shape}")
    return c


def layer_norm(
    x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5
) -> tuple[Tensor, Tensor, Tensor]:
    backend = checks.float_operands("layer_norm", x, gamma, beta)
    c = _need_features("layer_norm", x)
    checks.shape_is("layer_norm", gamma, (c,), "gamma")
    checks.shape_is("layer_norm", beta, (c,), "beta")
    eps = checks.number("layer_norm", eps, "eps")
    if not eps > 0:
        raise ShapeError(f"[layer_norm] eps must be positive; got {eps}")
    stat = Out(x.shape[:-1], x.dtype)
    expect = (Out(x.shape, x.dtype), stat, stat)
    return dispatch(LAYER_NORM, backend, (x, gamma, beta, eps), expect)


def layer_norm_backward(
    dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    op = "layer_norm_backward"
    backend = checks.float_operands(op, dy, x, gamma, mean, rstd)
    c = _need_features(op, x)
    checks.shape_is(op, dy, x.shape, "dy")
    checks.shape_is(op, gamma, (c,), "gamma")
    checks.shape_is(op, mean, x.shape[:-1], "mean")
    checks.shape_is(op, rstd, x.shape[:-1], "rstd")
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


# -- conformance samples ---------------------------------------------------------------------------
def _inputs(p: Params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = rng_of(p)
    shape = p["shape"]
    x = normal(rng, shape) + p.get("offset", 0.0)
    if p.get("nan_row") and x.size:
        x.reshape(-1, shape[-1])[0, 0] = np.nan
    gamma = 1.0 + 0.1 * normal(rng, shape[-1:])
    beta = 0.1 * normal(rng, shape[-1:])
    return x, gamma, beta


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
    {"label": "mean offset 10", "shape": (4, 257), "offset": 10.0},
    {"label": "mean 100, spread 1 (needs a stable variance)", "shape": (4, 64), "offset": 100.0},
    {"label": "width 1 (zero variance)", "shape": (5, 1)},
    {"label": "zero rows", "shape": (0, 6)},
    {"label": "a NaN makes its row NaN", "shape": (3, 8), "nan_row": True},
)


def _draw(d: Draw) -> Params:
    shape = d.shape()
    return {"shape": shape[:-1] + (max(shape[-1], 1),), "eps": d.choice((1e-5, 1e-3))}


def _build(p: Params, ctx: Ctx) -> Example:
    x, gamma, beta = _inputs(p)
    args = [Arr(x, layout=p["layout"]), Arr(gamma), Arr(beta), p.get("eps", 1e-5)]
    return Example(label(p), args, params=p)


def _build_backward(p: Params, ctx: Ctx) -> Example:
    x_raw, gamma, _ = _inputs(p)
    lay = p["layout"]
    x = Arr(x_raw, layout=lay)  # a broadcast layout changes the values: use x.value
    xr = x.value.astype(ctx.dtype).astype(np.float64)  # statistics of what the op sees
    with np.errstate(invalid="ignore"):
        mu = xr.mean(axis=-1)
        r = 1.0 / np.sqrt(((xr - mu[..., None]) ** 2).mean(axis=-1) + 1e-5)
    dy = normal(np.random.default_rng(p["seed"] + 1), p["shape"])
    return Example(label(p), [Arr(dy, layout=lay), x, Arr(gamma), Arr(mu), Arr(r)], params=p)


def _cost(n: int) -> Any:
    return lambda args: ((n + 1) * args[0].nbytes, 8 * args[0].size)


LAYER_NORM = OpUnit(
    "layer_norm", "fused", "layer_norm", LayerNormMethods.layer_norm, function=layer_norm,
    outputs=("y", "mean", "rstd"), composite=layer_norm_composite, vjp=_layer_norm_vjp,
    differentiable=(0, 1, 2), nan="a NaN makes its row and statistics NaN",
    tolerance=Tolerances(Tolerance(2e-5, 1e-4), Tolerance(1e-10, 1e-10),
                         why="mean and variance accumulate over the row, then rsqrt"),
    samples=Samples(_build, EDGES, _draw, bench={"shape": (1024, 1024)}), cost=_cost(1),
    errors=(
        error("layer_norm_gamma_shape", "layer_norm",
              lambda t: layer_norm(t.f(2, 4), t.f(3), t.f(4))),
        error("layer_norm_empty_features", "layer_norm",
              lambda t: layer_norm(t.f(2, 0), t.f(0), t.f(0))),
        error("layer_norm_eps", "layer_norm", lambda t: layer_norm(t.f(2, 4), t.f(4), t.f(4), 0.0)),
        error("layer_norm_mixed_devices", "layer_norm",
              lambda t: layer_norm(t.f(2, 4), t.other_device(4), t.f(4))),
    ),
)  # fmt: skip
LAYER_NORM_BACKWARD = OpUnit(
    "layer_norm_backward", "fused", "layer_norm", LayerNormMethods.layer_norm_backward,
    function=layer_norm_backward, outputs=("dx", "dgamma", "dbeta"),
    composite=layer_norm_backward_composite,
    tolerance=Tolerances(Tolerance(1e-4, 1e-4), Tolerance(1e-10, 1e-10),
                         why="row means and column sums over all rows"),
    samples=Samples(_build_backward, EDGES, _draw, bench={"shape": (1024, 1024)}), cost=_cost(4),
    errors=(error("layer_norm_backward_stats_shape", "layer_norm_backward",
                  lambda t: layer_norm_backward(t.f(2, 4), t.f(2, 4), t.f(4), t.f(3), t.f(2))),),
)  # fmt: skip

register(LAYER_NORM, LAYER_NORM_BACKWARD)
