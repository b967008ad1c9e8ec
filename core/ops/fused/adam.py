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
from ..capture_hooks import DynamicInt, host
from ..dispatch import dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.binary import add, add_scalar, div, mul, mul_scalar, sub
from ..primitive.memory import assign_many_
from ..primitive.unary import sqrt

_SAMPLES = samples_module(__name__)


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
        returns None. ``step`` counts from 1.

        Element for element, with ``g = grad`` and ``p`` the parameter before the step::

            m    <- beta1 * m + (1 - beta1) * g
            v    <- beta2 * v + (1 - beta2) * g * g
            mhat =  m / (1 - beta1 ** step)          (bias corrections, with the new m, v)
            vhat =  v / (1 - beta2 ** step)
            p    <- p - lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)

        The weight decay is decoupled (AdamW, Loshchilov & Hutter): it multiplies the old
        parameter, is not added to the gradient and passes through neither moment. The
        two corrections are worked out on the host in float64 (``1 / (1 - beta ** step)``)
        and applied as factors in the tensors' dtype. Core has checked the domain: finite
        ``lr >= 0``, ``0 <= beta1, beta2 < 1``, ``eps >= 0``, ``weight_decay >= 0``,
        ``1 <= step <= 2**62``.

        Special values: a NaN in ``g`` makes that element of ``m``, ``v`` and ``p`` NaN; an
        infinite ``g`` makes ``m`` and ``v`` infinite and ``p`` NaN (``inf / inf``); a NaN
        or infinite ``p`` stays so (through the decay). ``-0.0`` is 0.0. Empty tensors: nothing
        is written. A backend either writes all three tensors or, on an error, none.

        Composite: primitives only, then one all-or-nothing assignment of the three."""
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
    checks.full_precision(op, param, "param")
    for t, what in ((grad, "grad"), (m, "m"), (v, "v")):
        checks.shape_is(op, t, param.shape, what)
    for t, what in ((param, "param"), (m, "m"), (v, "v")):
        if not t.is_dense or t.storage.size != t.size:
            raise ShapeError(f"[{op}] {what} must be a dense tensor owning its storage")
    step = checked_step(op, step)
    hyper = tuple(checks.number(op, x, name) for x, name in (
        (lr, "lr"), (beta1, "beta1"), (beta2, "beta2"), (eps, "eps"),
        (weight_decay, "weight_decay")))  # fmt: skip
    check_hyper(op, hyper, step)
    dispatch(ADAM_UPDATE, backend, (param, grad, m, v, *hyper, step), None)
    param.bump_version()
    m.bump_version()
    v.bump_version()


def checked_step(op: str, step: Any) -> int:
    """``step`` (an int from 1) as the backend gets it: a number a captured step refills on
    replay stays one, any other int becomes a plain int."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise ShapeError(f"[{op}] step counts from 1; got {step!r}")
    return step if type(step) is DynamicInt else int(step)


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
    # The bias corrections change every step: worked out in a host function of the step
    # count, so that a captured step computes them again on each replay (a number derived
    # in Python here would be frozen at its recorded value, and capture would refuse).
    c1, c2 = host(_bias_corrections, beta1, beta2, step)
    mhat = mul_scalar(new_m, c1)
    vhat = mul_scalar(new_v, c2)
    update = div(mhat, add_scalar(sqrt(vhat), eps))
    update = add(update, mul_scalar(param, weight_decay))
    new_p = sub(param, mul_scalar(update, lr))
    assign_many_((m, new_m), (v, new_v), (param, new_p))  # all or nothing


def _bias_corrections(beta1: float, beta2: float, step: int) -> tuple[float, float]:
    return 1.0 / (1.0 - beta1**step), 1.0 / (1.0 - beta2**step)


def _cost(args: list[Any]) -> tuple[int, int]:
    return (7 * args[0].nbytes, 12 * args[0].size)


ADAM_UPDATE = OpUnit(
    "adam_update", "fused", AdamMethods.adam_update, module="adam", function=adam_update,
    outputs=("param", "m", "v"), in_place=True, composite=adam_update_composite,
    full_precision=True,
    tolerance=Tolerances(Tolerance(1e-6, 1e-4), Tolerance(1e-12, 1e-10),
                         why="sqrt and division by sqrt(vhat) + eps amplify ulps"),
    cost=_cost,
    testing=_SAMPLES,
)  # fmt: skip

register(ADAM_UPDATE)
