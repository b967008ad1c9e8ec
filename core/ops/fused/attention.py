"""Materialised scaled dot-product attention and its backward.

q, k, v are ``[B, H, T, D]`` (D >= 1; B, H or T may be 0: empty results), one float dtype.
``attention(q, k, v, scale, causal) -> (out[B,H,T,D], probs[B,H,T,T])`` with
``probs = softmax(scale * q kᵀ)`` row-wise, key ``j > i`` masked when causal (masked
probabilities are exactly 0); scores of any finite magnitude (1e3, past ``exp``'s
overflow) give finite results. ``attention_backward(dout, q, k, v, probs, scale)`` uses
``dV = Pᵀ dO``, ``dP = dO Vᵀ``, ``dS = P * (dP - rowsum(dP * P))``, ``dQ = scale dS K``,
``dK = scale dSᵀ Q``. Kernels mask by index, never by writing ``-inf`` into scores.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ...errors import ShapeError
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, Tolerance, Tolerances, register, samples_module
from ..primitive.binary import mul_scalar
from ..primitive.matmul import matmul
from ..primitive.memory import full_like, upload
from ..primitive.select import where
from .softmax import softmax, softmax_backward

if TYPE_CHECKING:
    from ..samples import Example

_SAMPLES = samples_module(__name__)


class AttentionMethods(Protocol):
    def attention(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
    ) -> tuple[Tensor, Tensor]:
        """``(out[B,H,T,D], probs[B,H,T,T])`` for ``q``, ``k``, ``v`` of ``[B,H,T,D]`` (D >= 1)
        in one float dtype; ``probs`` is ``P``, masked probabilities exactly 0.

        Scores ``S = scale * q kᵀ`` (``[T, T]`` per batch and head; ``scale`` is an
        argument, never assumed ``1/sqrt(D)``). Mask rule: with ``causal``, key ``j > i`` is
        masked for query ``i``: it gets probability exactly 0 and never contributes, even
        when its score is NaN or infinite (mask by index, never by adding ``-inf`` to a
        NaN). ``P = softmax(S)`` row-wise over the unmasked keys (max-subtracted: scores of
        any finite magnitude give finite results); ``out = P v``.

        Special values: a NaN or infinity in ``q[i]`` makes row ``i`` NaN (as softmax: a
        ``+inf`` or NaN score poisons its row, a row of ``-inf`` scores is NaN); one in
        ``k[j]`` makes every row that sees key ``j`` NaN and leaves rows that mask it
        alone. A NaN or infinity in ``v[j]`` reaches every output row in the reference,
        masked rows included (``P v`` multiplies the 0 by it); a kernel that skips masked
        keys leaves those rows finite, and the samples hold no non-finite ``v``. ``-0.0``
        is 0.0. B, H or T = 0 gives empty results.

        Composite: ``softmax`` (your native one when you define it) of the masked scores,
        then ``matmul``."""
        ...

    def attention_backward(
        self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dq, dk, dv)`` from the saved probabilities (the mask is in them).

        ``dV = Pᵀ dO``, ``dP = dO Vᵀ``, ``dS = P * (dP - rowsum(dP * P))``,
        ``dQ = scale dS K``, ``dK = scale dSᵀ Q``; masked entries of ``P`` are 0, so they
        contribute nothing (no ``causal`` argument is needed).

        Special values: IEEE through the products: a NaN or infinity in ``dout``, ``v`` or
        ``probs`` reaches the rows and columns its products touch (as NaN or ``+-inf``).
        ``-0.0`` is 0.0. Empty shapes give empty results.

        Composite: ``softmax_backward`` (your native one when you define it) between
        ``matmul``s."""
        ...


#: How attention keeps what its backward needs: "materialized" saves the ``[B, H, T, T]``
#: probabilities (this unit), "flash" only the ``[B, H, T]`` log-sum-exp and rebuilds them
#: (``flash_attention``; ``attention_qkv``'s ``flash`` flag).
MODES: tuple[str, ...] = ("materialized", "flash")


def flash_mode(op: str, mode: str) -> bool:
    """Whether ``mode`` asks for flash attention; the one check of a mode name, shared by
    every attention entry point that takes one."""
    if mode not in MODES:
        raise ShapeError(f"[{op}] mode must be 'materialized' or 'flash'; got {mode!r}")
    return mode == "flash"


def head_dim(op: str, q: Tensor) -> int:
    """D of ``q[B, H, T, D]``, checked before a default scale divides by its root."""
    if q.ndim != 4 or q.shape[-1] == 0:
        raise ShapeError(f"[{op}] q must be [B, H, T, D] with D >= 1; got {q.shape}")
    return q.shape[-1]


def default_scale(d: int) -> float:
    """``1/sqrt(D)``: keeps the scores' variance near 1 whatever the head dim, the scale
    every attention entry point uses when the caller gives none."""
    return 1.0 / math.sqrt(d)


def check_qkv(op: str, q: Tensor, k: Tensor, v: Tensor) -> None:
    for t, what in ((q, "q"), (k, "k"), (v, "v")):
        checks.rank(op, t, 4, f"{what} [B, H, T, D]")
    if not (q.shape == k.shape == v.shape):
        raise ShapeError(
            f"[{op}] q, k, v must share shape [B, H, T, D]; got {q.shape}, {k.shape}, {v.shape}"
        )
    if q.shape[-1] == 0:
        raise ShapeError(f"[{op}] head dim D must be >= 1; got q {q.shape}")


def attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool = True
) -> tuple[Tensor, Tensor]:
    backend = checks.float_operands("attention", q, k, v)
    check_qkv("attention", q, k, v)
    s = checks.number("attention", scale, "scale")
    b, h, t, _ = q.shape
    expect = (Out(q.shape, q.dtype), Out((b, h, t, t), q.dtype))
    causal = checks.flag("attention", causal, "causal")
    return dispatch(ATTENTION, backend, (q, k, v, s, causal), expect)


def attention_backward(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    op = "attention_backward"
    backend = checks.float_operands(op, dout, q, k, v, probs)
    check_qkv(op, q, k, v)
    checks.shape_is(op, dout, q.shape, "dout")
    b, h, t, _ = q.shape
    checks.shape_is(op, probs, (b, h, t, t), "probs")
    s = checks.number(op, scale, "scale")
    grad = Out(q.shape, q.dtype)
    return dispatch(ATTENTION_BACKWARD, backend, (dout, q, k, v, probs, s), (grad, grad, grad))


# -- composites ---------------------------------------------------------------------------------
def scores(q: Tensor, k: Tensor, scale: float, causal: bool) -> Tensor:
    """``scale * q kᵀ`` with masked entries ``-inf`` (composites only: primitives are IEEE)."""
    s = mul_scalar(matmul(q, k, transpose_b=True), scale)
    return _masked(s, -math.inf) if causal and s.size else s


def _masked(s: Tensor, value: float) -> Tensor:
    """``s`` with the causally masked entries (key ``j > i``) set to ``value``."""
    t = s.shape[-2]
    mask = upload(s.backend, np.triu(np.ones((t, t), dtype=s.dtype), 1)).broadcast_to(s.shape)
    return where(mask, full_like(s, value, (1,) * s.ndim).broadcast_to(s.shape), s)


def attention_composite(
    q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool
) -> tuple[Tensor, Tensor]:
    probs = softmax(scores(q, k, scale, causal))
    if causal and probs.size:  # exactly 0, in a NaN row too (softmax makes the row NaN)
        probs = _masked(probs, 0.0)
    return matmul(probs, v), probs


def attention_backward_composite(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    dv = matmul(probs, dout, transpose_a=True)
    ds = softmax_backward(matmul(dout, v, transpose_b=True), probs)
    dq = mul_scalar(matmul(ds, k), scale)
    dk = mul_scalar(matmul(ds, q, transpose_a=True), scale)
    return dq, dk, dv


def _attention_vjp(g: Tensor, args: Any, outs: Any, needs: Any) -> tuple[Tensor, ...]:
    q, k, v, scale, _ = args
    return attention_backward(g, q, k, v, outs[1], scale)


def score_scale(ex: Example) -> float:
    """Scores carry ulps of their own magnitude into every output: atol per unit of it."""
    return float(max(1.0, ex.params.get("score_max", 0.0) / 16.0))


def rebuilt_out_gain(ex: Example) -> float:
    """How far dq and dk move per unit of ``out``'s relative rounding (flash backward).

    ``rowsum(dO * out)`` and ``rowsum(dP * P)`` agree while ``out = P v``; an ``out``
    rounded to u relative moves that row term by ``D_i = u * sum_d |dO * out|``, which
    reaches ``dq_i`` as ``scale * D_i * sum_j P_ij |k_j|`` and ``dk_j`` as ``scale * sum_i
    P_ij D_i |q_i|``: the largest of those, per unit u, from the example's own values."""
    dout, q, k, _v, out, lse, scale = (_value(a) for a in ex.args[:7])
    s = float(scale) * q @ np.swapaxes(k, -1, -2)
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.nan_to_num(np.exp(s - lse[..., None]), nan=0.0, posinf=0.0)
    if ex.kwargs.get("causal", True):
        t = p.shape[-1]
        p = np.where(np.triu(np.ones((t, p.shape[-1]), bool), 1), 0.0, p)
    d = np.nan_to_num(np.abs(dout * out).sum(-1), nan=0.0, posinf=0.0)
    dp = d[..., None] * p
    dq = dp @ _finite_abs(k)
    dk = np.swapaxes(dp, -1, -2) @ _finite_abs(q)
    worst = max(float(dq.max(initial=0.0)), float(dk.max(initial=0.0)))
    return abs(float(scale)) * worst if np.isfinite(worst) else 0.0


def _finite_abs(a: np.ndarray) -> np.ndarray:
    return np.abs(np.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0))


def _value(a: Any) -> Any:
    return np.asarray(a.value, dtype=np.float64) if hasattr(a, "value") else a


def cost(args: list[Any]) -> tuple[int, int]:
    q = next(a for a in args if isinstance(a, Tensor) and a.ndim == 4)
    b, h, t, d = q.shape
    return (4 * q.nbytes + b * h * t * t * q.dtype.itemsize, 4 * b * h * t * t * d)


_TOL = Tolerances(
    Tolerance(1e-4, 1e-4),
    Tolerance(1e-10, 1e-10),
    scale=score_scale,
    why="two accumulating matmuls around a softmax; scores carry their ulps",
)
_TOL_B = Tolerances(Tolerance(2e-4, 2e-4), Tolerance(1e-10, 1e-10), scale=score_scale,
                    why="four accumulating matmuls and a row sum")  # fmt: skip

ATTENTION = OpUnit(
    "attention", "fused", AttentionMethods.attention, module="attention", function=attention,
    outputs=("out", "probs"), composite=attention_composite, vjp=_attention_vjp,
    differentiable=(0, 1, 2), tolerance=_TOL, cost=cost,
    testing=_SAMPLES,
)  # fmt: skip
ATTENTION_BACKWARD = OpUnit(
    "attention_backward", "fused", AttentionMethods.attention_backward, module="attention",
    function=attention_backward, outputs=("dq", "dk", "dv"),
    composite=attention_backward_composite, tolerance=_TOL_B, cost=cost,
    testing=_SAMPLES,
)  # fmt: skip

register(ATTENTION, ATTENTION_BACKWARD)
