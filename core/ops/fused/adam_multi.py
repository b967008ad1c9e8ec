"""AdamW over many parameters in one call, with the global-norm clip scale applied inside.

``adam_update_multi(params, grads, ms, vs, lr, beta1, beta2, eps, weight_decay, step,
grad_norm, max_norm)`` is ``adam_update`` on every ``(params[i], s * grads[i], ms[i],
vs[i])`` with one clip scale ``s``. A training step that clips and then steps AdamW
parameter by parameter makes a kernel backend launch one scale product, one split copy and
one update per parameter, and reads nothing back only because the scale stays a device
tensor; this op takes the norm as that device tensor and leaves the whole step to the
backend (one pass, or a few launches, over all tensors). Protocol 1.2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from ...errors import DomainError, DTypeError, ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.binary import add_scalar, div, maximum, mul
from ..primitive.memory import full_like
from .adam import adam_update, check_hyper, checked_step

_SAMPLES = samples_module(__name__)

#: Added to the norm before it is compared with ``max_norm`` (``riftco.optim`` uses it
#: too): a norm just at the limit scales by slightly less than 1 rather than by exactly 1.
CLIP_EPS = 1e-6


class AdamMultiMethods(Protocol):
    def adam_update_multi(
        self,
        params: list[Tensor],
        grads: list[Tensor],
        ms: list[Tensor],
        vs: list[Tensor],
        lr: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        step: int,
        grad_norm: Tensor | None,
        max_norm: float,
    ) -> None:
        """AdamW in place on every ``params[i]``, ``ms[i]`` and ``vs[i]``; returns None.

        Element for element the result is ``adam_update(params[i], s * grads[i], ms[i],
        vs[i], lr, beta1, beta2, eps, weight_decay, step)`` with one clip scale ``s`` for
        all tensors: ``s = 1`` when ``grad_norm`` is None, else
        ``s = max_norm / maximum(grad_norm + 1e-6, max_norm)``, each operation rounded to
        the tensors' dtype (exactly what ``clip_grad_norm`` then ``adam_update`` compute, so
        a backend gets the same bits either way). ``grad_norm`` is a 0-d tensor on this
        backend in the tensors' dtype; a device backend reads it on the device (the host
        never waits for it). ``maximum`` propagates NaN: a NaN norm makes ``s`` NaN and
        every element of every written tensor NaN; an infinite norm makes ``s = 0`` (the
        moments decay, a finite gradient is ignored, an infinite element gives NaN).

        Core guarantees: the four lists have one length (possibly 0: core returns without a
        backend call); all tensors (and ``grad_norm``) share this backend and one float
        dtype; ``params[i]``, ``grads[i]``, ``ms[i]``, ``vs[i]`` share one shape (size 0
        allowed: nothing to write); params, ms and vs are dense, own their storage and no
        storage appears twice among them; grads are dense; ``step >= 1``; the
        hyperparameters are ``adam_update``'s domain and ``max_norm`` is finite and > 0.
        Tensors are independent: the order in which a backend visits them does not change
        any result. Core bumps the version of every param, m and v.

        Special values: as ``adam_update`` per element, with the NaN and infinite norms
        above. ``-0.0`` is 0.0. Empty lists or size-0 tensors write nothing.

        Composite: ``s`` from primitives, then ``adam_update`` on each tensor (your native
        one when you define it)."""
        ...


def adam_update_multi(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    ms: Sequence[Tensor],
    vs: Sequence[Tensor],
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    step: int = 1,
    grad_norm: Tensor | None = None,
    max_norm: float = 1.0,
) -> None:
    """AdamW on every parameter at once, gradients scaled by the clip of ``grad_norm``.

    Every check runs before the backend sees anything, so a malformed call changes no
    tensor; then one backend call (or the composite) and every version is bumped."""
    op = "adam_update_multi"
    lists = [_as_list(op, x, what) for x, what in
             ((params, "params"), (grads, "grads"), (ms, "ms"), (vs, "vs"))]  # fmt: skip
    if len({len(x) for x in lists}) != 1:
        raise ShapeError(
            f"[{op}] params, grads, ms and vs must have one length; got "
            + ", ".join(str(len(x)) for x in lists)
        )
    ps, gs, m_list, v_list = lists
    step = checked_step(op, step)
    hyper = tuple(checks.number(op, x, name) for x, name in (
        (lr, "lr"), (beta1, "beta1"), (beta2, "beta2"), (eps, "eps"),
        (weight_decay, "weight_decay")))  # fmt: skip
    check_hyper(op, hyper, step)
    limit = checks.number(op, max_norm, "max_norm")
    if grad_norm is not None:
        checks.tensor(op, grad_norm, "grad_norm")
        if grad_norm.shape != ():
            raise ShapeError(f"[{op}] grad_norm must be a 0-d tensor; got shape {grad_norm.shape}")
        if not (math.isfinite(limit) and limit > 0.0):
            raise DomainError(f"[{op}] max_norm must be finite and > 0; got {max_norm!r}")
    if not ps:
        return  # nothing to update: no backend to ask
    extra = [grad_norm] if grad_norm is not None else []
    backend = checks.float_operands(op, *ps, *gs, *m_list, *v_list, *extra)
    checks.full_precision(op, ps[0], "params[0]")
    for i, (p, g, m, v) in enumerate(zip(ps, gs, m_list, v_list, strict=True)):
        for t, what in ((g, "grads"), (m, "ms"), (v, "vs")):
            checks.shape_is(op, t, p.shape, f"{what}[{i}]")
        for t, what in ((p, "params"), (m, "ms"), (v, "vs")):
            if not t.is_dense or t.storage.size != t.size:
                raise ShapeError(f"[{op}] {what}[{i}] must be a dense tensor owning its storage")
    written = [id(t.storage) for t in (*ps, *m_list, *v_list)]
    if len(set(written)) != len(written):
        raise ShapeError(f"[{op}] a param, m or v storage is listed twice (updates would race)")
    args = (ps, gs, m_list, v_list, *hyper, step, grad_norm, limit)
    dispatch(ADAM_UPDATE_MULTI, backend, args, None)
    for t in (*ps, *m_list, *v_list):
        t.bump_version()


def _as_list(op: str, x: Any, what: str) -> list[Tensor]:
    if not isinstance(x, (list, tuple)):
        raise DTypeError(f"[{op}] {what} must be a list of Tensors; got {type(x).__name__}")
    for i, t in enumerate(x):
        checks.tensor(op, t, f"{what}[{i}]")
    return list(x)


def adam_update_multi_composite(
    params: list[Tensor], grads: list[Tensor], ms: list[Tensor], vs: list[Tensor],
    lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: int,
    grad_norm: Tensor | None, max_norm: float,
) -> None:  # fmt: skip
    """The clip scale from primitives (on the device: no download), every scaled gradient
    made before the first write (an allocation failure leaves every tensor as it was),
    then the single-tensor ``adam_update`` per parameter, native where the backend has it."""
    if grad_norm is not None:
        limit = full_like(grad_norm, max_norm, ())
        scale = div(limit, maximum(add_scalar(grad_norm, CLIP_EPS), limit))
        grads = [mul(g, scale.reshape((1,) * g.ndim).broadcast_to(g.shape)) if g.size else g
                 for g in grads]  # fmt: skip
    for p, g, m, v in zip(params, grads, ms, vs, strict=True):
        adam_update(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step)


def _cost(args: list[Any]) -> tuple[int, int]:
    params = args[0]
    return (sum(7 * p.nbytes for p in params), sum(13 * p.size for p in params))


ADAM_UPDATE_MULTI = OpUnit(
    "adam_update_multi", "fused", AdamMultiMethods.adam_update_multi, module="adam_multi",
    function=adam_update_multi, outputs=("params", "ms", "vs"), in_place=True,
    full_precision=True,
    composite=adam_update_multi_composite,
    tolerance=Tolerances(Tolerance(1e-6, 1e-4), Tolerance(1e-12, 1e-10),
                         why="adam_update's: sqrt and division by sqrt(vhat) + eps amplify "
                             "ulps; the clip scale adds one rounding"),
    cost=_cost,
    testing=_SAMPLES,
    since=(1, 2),
)  # fmt: skip

register(ADAM_UPDATE_MULTI)
