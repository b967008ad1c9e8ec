"""AdamW in place: the one optimizer step a backend may fuse.

``adam_update(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step)``:
``m = b1 m + (1-b1) g``; ``v = b2 v + (1-b2) g^2``;
``param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)`` with
``mhat = m / (1 - b1^step)``, ``vhat = v / (1 - b2^step)`` (decoupled decay, bias-corrected).
``param``, ``m`` and ``v`` are dense and own their storage; core bumps their versions.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from ...errors import DomainError, ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register
from ..primitive.binary import add, add_scalar, div, mul, mul_scalar, sub
from ..primitive.memory import assign_many_
from ..primitive.unary import sqrt
from ..samples import (
    Arr,
    Ctx,
    Draw,
    Example,
    Params,
    Samples,
    edges,
    error,
    label,
    log_uniform,
    normal,
    rng_of,
)


class AdamMethods(Protocol):
    def adam_update(
        self,
        param: Tensor,
        grad: Tensor,
        m: Tensor,
        v: Tensor,
        lr: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        step: int,
    ) -> None:
        """AdamW step in place on ``param``, ``m`` and ``v`` (all dense, one shape and dtype);
        returns None. ``step`` counts from 1."""
        ...


def adam_update(
    param: Tensor,
    grad: Tensor,
    m: Tensor,
    v: Tensor,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    step: int = 1,
) -> None:
    """AdamW step in place on ``param``, ``m`` and ``v``; bumps their versions."""
    op = "adam_update"
    backend = checks.float_operands(op, param, grad, m, v)
    for t, what in ((grad, "grad"), (m, "m"), (v, "v")):
        checks.shape_is(op, t, param.shape, what)
    for t, what in ((param, "param"), (m, "m"), (v, "v")):
        if not t.is_dense or t.storage.size != t.size:
            raise ShapeError(f"[{op}] {what} must be a dense tensor owning its storage")
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise ShapeError(f"[{op}] step counts from 1; got {step!r}")
    hyper = tuple(checks.number(op, x, name) for x, name in (
        (lr, "lr"), (beta1, "beta1"), (beta2, "beta2"), (eps, "eps"),
        (weight_decay, "weight_decay")))  # fmt: skip
    check_hyper(op, hyper, step)
    dispatch(ADAM_UPDATE, backend, (param, grad, m, v, *hyper, int(step)), None)
    param.bump_version()
    m.bump_version()
    v.bump_version()


#: Steps beyond this are refused: the bias corrections ``beta ** step`` need a float step.
MAX_STEP = 2**62


def check_hyper(op: str, hyper: tuple[float, ...], step: int) -> None:
    """Hyperparameters for which every backend computes the same finite step.

    ``beta = 1`` divides by ``1 - beta ** step = 0`` (composites raise ZeroDivisionError,
    kernels make inf), ``beta > 1`` overflows ``beta ** step`` on the host, and a NaN
    hyperparameter writes NaN into every parameter: all refused before any write.
    ``hyper`` is ``(lr, beta1, beta2, eps, weight_decay)``."""
    lr, beta1, beta2, eps, weight_decay = hyper
    finite = all(math.isfinite(x) for x in hyper)
    if not (
        finite
        and lr >= 0.0
        and 0.0 <= beta1 < 1.0
        and 0.0 <= beta2 < 1.0
        and eps >= 0.0
        and weight_decay >= 0.0
        and step <= MAX_STEP
    ):
        raise DomainError(
            f"[{op}] needs finite lr >= 0, 0 <= beta1 < 1, 0 <= beta2 < 1, eps >= 0, "
            f"weight_decay >= 0 and step <= 2**62; got lr={lr!r}, beta1={beta1!r}, "
            f"beta2={beta2!r}, eps={eps!r}, weight_decay={weight_decay!r}, step={step!r}"
        )


def adam_update_composite(
    param: Tensor, grad: Tensor, m: Tensor, v: Tensor,
    lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: int,
) -> None:  # fmt: skip
    new_m = add(mul_scalar(m, beta1), mul_scalar(grad, 1.0 - beta1))
    new_v = add(mul_scalar(v, beta2), mul_scalar(mul(grad, grad), 1.0 - beta2))
    mhat = mul_scalar(new_m, 1.0 / (1.0 - beta1**step))
    vhat = mul_scalar(new_v, 1.0 / (1.0 - beta2**step))
    update = div(mhat, add_scalar(sqrt(vhat), eps))
    update = add(update, mul_scalar(param, weight_decay))
    new_p = sub(param, mul_scalar(update, lr))
    assign_many_((m, new_m), (v, new_v), (param, new_p))  # all or nothing


# -- conformance samples ---------------------------------------------------------------------------
def _build(p: Params, ctx: Ctx) -> Example:
    rng, s = rng_of(p), p["shape"]
    first = p["step"] == 1
    m = normal(rng, s) * 0.0 if first else 0.1 * normal(rng, s)
    # a real second moment bounds the first (|m| <= sqrt(v)), which keeps updates O(lr)
    v = m * 0.0 if first else m * m + log_uniform(rng, s, 1e-8, 1.0)
    args = [Arr(normal(rng, s)), Arr(normal(rng, s)), Arr(m), Arr(v)]
    return Example(label(p), args + [p["lr"], 0.9, 0.999, 1e-8, p["wd"], p["step"]], params=p)


def _call(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    fn(*args, **kwargs)
    return args[0], args[2], args[3]


def _draw(d: Draw) -> Params:
    return {"shape": d.shape(1, 2), "lr": d.choice((1e-3, 0.1)), "wd": d.choice((0.0, 0.01)),
            "step": d.integer(1, 1000), "layout": "dense"}  # fmt: skip


EDGES = edges(
    {"label": "first step (m = v = 0)", "shape": (33,), "lr": 1e-3, "wd": 0.0, "step": 1},
    {"label": "decay, late step", "shape": (5, 67), "lr": 0.1, "wd": 0.01, "step": 500},
    {"label": "empty", "shape": (0,), "lr": 0.1, "wd": 0.0, "step": 3},
)


def _cost(args: list[Any]) -> tuple[int, int]:
    return (7 * args[0].nbytes, 12 * args[0].size)


ADAM_UPDATE = OpUnit(
    "adam_update", "fused", "adam", AdamMethods.adam_update, function=adam_update,
    outputs=("param", "m", "v"), in_place=True, composite=adam_update_composite,
    tolerance=Tolerances(Tolerance(1e-6, 1e-4), Tolerance(1e-12, 1e-10),
                         why="sqrt and division by sqrt(vhat) + eps amplify ulps"),
    samples=Samples(_build, EDGES, _draw, call=_call, layouts=("dense",),
                    bench={"shape": (1 << 20,), "lr": 1e-3, "wd": 0.0, "step": 10}), cost=_cost,
    errors=(
        error("adam_update_shapes", "adam_update",
              lambda t: adam_update(t.f(3), t.f(4), t.f(3), t.f(3), 0.1)),
        error("adam_update_view", "adam_update",
              lambda t: adam_update(t.f(4, 3).transpose(), t.f(3, 4), t.f(3, 4), t.f(3, 4), 0.1)),
        error("adam_update_step_0", "adam_update",
              lambda t: adam_update(t.f(3), t.f(3), t.f(3), t.f(3), 0.1, step=0)),
        error("adam_update_beta1_1", "adam_update",  # 1 / (1 - 1**step): was ZeroDivisionError
              lambda t: adam_update(t.f(3), t.f(3), t.f(3), t.f(3), 0.1, beta1=1.0)),
        error("adam_update_lr_nan", "adam_update",
              lambda t: adam_update(t.f(3), t.f(3), t.f(3), t.f(3), float("nan"))),
    ),
)  # fmt: skip

register(ADAM_UPDATE)
