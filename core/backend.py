"""The Backend protocol: the only surface the autograd core ever calls.

A backend is one class. Core never imports a backend module; it receives backend classes
from plugins (see ``plugins.py``) and creates one instance per device. Every method below
receives Tensors that core has already validated: shapes and dtypes fit, every operand
lives on this very backend instance, and (unless ``accepts_strided`` is true) every
operand is *dense*: C-contiguous strides and offset 0. Methods return new Tensors on the
same backend, except those documented as in place.

Conventions shared by every method:

* ``Tensor`` metadata (shape, strides, offset, dtype) lives in core; the backend owns only
  the ``buffer`` object inside it. Backends build results with :meth:`BackendBase.wrap`.
* Masks (results of :meth:`compare`, the ``cond`` of :meth:`where`) have the operands'
  float dtype and hold exactly ``1`` or ``0``. One dtype per kernel keeps kernels simple
  and lets a mask multiply a gradient directly.
* Index tensors (embedding ids, cross-entropy targets) are ``int32`` or ``int64`` as the
  backend declares in ``capabilities.dtypes``; ``argmax`` always returns ``int32``.
* Fused operations are optional. Core checks :attr:`Capabilities.fused` (derived from
  which methods the class defines) and uses its composite fallback otherwise.

Protocol version 1.0. A change that removes or alters a method bumps the major number;
adding an optional fused op bumps the minor number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from .tensor import Tensor

PROTOCOL_VERSION: tuple[int, int] = (1, 0)

#: Every required method. A backend missing one of these is refused at load time.
PRIMITIVE_OPS: tuple[str, ...] = (
    "allocate", "from_numpy", "to_numpy", "copy_strided", "fill", "synchronize", "memory_stats",
    "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "abs",
    "add", "sub", "mul", "div", "maximum", "minimum",
    "add_scalar", "mul_scalar", "pow_scalar",
    "where", "compare", "cast",
    "sum", "max", "argmax",
    "matmul", "concatenate_last_axis", "split_last_axis",
)  # fmt: skip

#: Optional fused methods; core has a composite fallback for each (``composites.py``).
FUSED_OPS: tuple[str, ...] = (
    "gelu", "gelu_backward",
    "softmax", "softmax_backward",
    "layer_norm", "layer_norm_backward",
    "embedding", "embedding_backward",
    "cross_entropy", "cross_entropy_backward",
    "attention", "attention_backward",
    "flash_attention", "flash_attention_backward",
    "adam_update",
)  # fmt: skip

COMPARE_OPS: tuple[str, ...] = ("lt", "le", "gt", "ge", "eq", "ne")
GELU_APPROXIMATIONS: tuple[str, ...] = ("tanh", "none")


@dataclass(frozen=True)
class DeviceInfo:
    """One device of a backend, as ``devices()`` reports it and ``riftco backends`` prints it."""

    index: int
    name: str
    dtypes: tuple[str, ...] = ("float32",)
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Capabilities:
    """What a backend class supports: dtypes and which fused ops are native."""

    dtypes: frozenset[np.dtype]
    fused: frozenset[str]
    accepts_strided: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "dtypes": sorted(d.name for d in self.dtypes),
            "fused": {op: ("native" if op in self.fused else "composite") for op in FUSED_OPS},
            "accepts_strided": self.accepts_strided,
        }


@runtime_checkable
class Backend(Protocol):
    """The protocol every backend implements. See the module docstring for conventions."""

    name: ClassVar[str]
    priority: ClassVar[int]
    protocol_version: ClassVar[tuple[int, int]]
    dtypes: ClassVar[frozenset[np.dtype]]
    accepts_strided: ClassVar[bool]
    device_index: int

    # -- identity and devices -------------------------------------------------------
    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        """``(True, "")`` when this backend can run here, else ``(False, reason)``; never raises."""
        ...

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        """The devices this backend can address, index order. Empty when unavailable."""
        ...

    @classmethod
    def capabilities(cls) -> Capabilities: ...

    # -- allocation and transfer ----------------------------------------------------
    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> Tensor:
        """A dense tensor of ``shape``; contents undefined."""
        ...

    def from_numpy(self, array: np.ndarray) -> Tensor:
        """Upload a host array (any layout) into a new dense tensor of the same dtype."""
        ...

    def to_numpy(self, x: Tensor) -> np.ndarray:
        """Download ``x`` (respecting its strides and offset) into a new C-contiguous array.

        This is a synchronisation point: pending work that writes ``x`` completes first."""
        ...

    def copy_strided(self, x: Tensor) -> Tensor:
        """Materialise any view (strides may be 0 or permuted, offset any) as a dense tensor."""
        ...

    def fill(self, x: Tensor, value: float) -> None:
        """In place: set every element of dense ``x`` to ``value``."""
        ...

    def synchronize(self) -> None:
        """Wait until all queued work has finished; raise any deferred device error."""
        ...

    def memory_stats(self) -> dict[str, int]:
        """At least ``{"allocated_bytes", "peak_bytes"}``: bytes held in live tensor buffers."""
        ...

    # -- elementwise ------------------------------------------------------------------
    def neg(self, x: Tensor) -> Tensor: ...
    def exp(self, x: Tensor) -> Tensor: ...
    def log(self, x: Tensor) -> Tensor:
        """Natural log. Core validates positivity where autograd needs it; raw: IEEE result."""
        ...

    def sqrt(self, x: Tensor) -> Tensor: ...
    def rsqrt(self, x: Tensor) -> Tensor: ...
    def tanh(self, x: Tensor) -> Tensor: ...
    def abs(self, x: Tensor) -> Tensor: ...

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        """``a + b``, equal shapes and dtypes (no implicit broadcasting). Same for sub..minimum."""
        ...

    def sub(self, a: Tensor, b: Tensor) -> Tensor: ...
    def mul(self, a: Tensor, b: Tensor) -> Tensor: ...
    def div(self, a: Tensor, b: Tensor) -> Tensor: ...
    def maximum(self, a: Tensor, b: Tensor) -> Tensor: ...
    def minimum(self, a: Tensor, b: Tensor) -> Tensor: ...

    def add_scalar(self, x: Tensor, value: float) -> Tensor:
        """``x + value`` with the scalar converted to ``x.dtype``."""
        ...

    def mul_scalar(self, x: Tensor, value: float) -> Tensor: ...
    def pow_scalar(self, x: Tensor, value: float) -> Tensor:
        """``x ** value``; for integral ``value`` negative bases are fine."""
        ...

    def where(self, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
        """``cond != 0 ? a : b``; all three have one shape and dtype."""
        ...

    def compare(self, a: Tensor, b: Tensor, op: str) -> Tensor:
        """Mask (1/0 in ``a.dtype``) of ``a <op> b``, ``op`` in :data:`COMPARE_OPS`."""
        ...

    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        """Convert to ``dtype`` (float→int truncates toward zero)."""
        ...

    # -- reductions -------------------------------------------------------------------
    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        """Sum over ``axes`` (non-negative, sorted, unique, non-empty)."""
        ...

    def max(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor: ...

    def argmax(self, x: Tensor) -> Tensor:
        """Index (``int32``) of the first maximum along the last axis; shape ``x.shape[:-1]``."""
        ...

    # -- linear algebra and layout ----------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        """``op(a) @ op(b)`` where ``op`` swaps the last two axes when its flag is set.

        After the flags, ``a`` is ``[..., M, K]`` and ``b`` is ``[..., K, N]`` with identical
        leading batch dims (rank >= 2, no broadcasting). Result ``[..., M, N]``."""
        ...

    def concatenate_last_axis(self, xs: Sequence[Tensor]) -> Tensor:
        """Join along the last axis; all leading dims and dtypes equal."""
        ...

    def split_last_axis(self, x: Tensor, sizes: Sequence[int]) -> list[Tensor]:
        """Dense pieces of widths ``sizes`` (summing to ``x.shape[-1]``) along the last axis."""
        ...

    # -- fused (optional; see FUSED_OPS) ----------------------------------------------
    # gelu(x, approximate) -> y; approximate "tanh": 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))),
    #     "none": 0.5x(1+erf(x/sqrt 2)).
    # gelu_backward(dy, x, approximate) -> dx = dy * gelu'(x).
    # softmax(x) -> y over the last axis, max-subtracted; -inf entries give 0; a row that is
    #     all -inf gives NaN (as the math says).
    # softmax_backward(dy, y) -> dx = y * (dy - rowsum(dy * y)).
    # layer_norm(x[..., C], gamma[C], beta[C], eps) -> (y, mean[...], rstd[...]) with
    #     biased variance; rstd = 1/sqrt(var + eps).
    # layer_norm_backward(dy, x, gamma, mean, rstd) -> (dx, dgamma[C], dbeta[C]).
    # embedding(table[V, C], ids[...]) -> [..., C]. Core range-checks ids where that is free
    #     (host buffers); device kernels must stay in bounds and give zero rows for bad ids.
    # embedding_backward(dy[..., C], ids[...], V) -> dtable[V, C]: scatter-add, repeated
    #     ids accumulate; deterministic (same bits every run, e.g. fixed summation order).
    # cross_entropy(logits[N, V], targets[N]) -> (loss_rows[N], lse[N]): loss_rows[i] =
    #     lse[i] - logits[i, t_i], and 0 where t_i == -1 (ignored). lse is the natural-log
    #     log-sum-exp of the row (computed for every row, ignored or not).
    # cross_entropy_backward(dloss_rows[N], logits, targets, lse) -> dlogits[N, V] =
    #     dloss_rows[i] * (softmax(logits[i]) - onehot(t_i)); rows with t_i == -1 are 0.
    # attention(q, k, v[B, H, T, D], scale, causal) -> (out[B,H,T,D], probs[B,H,T,T]):
    #     probs = softmax(scale * q k^T with j > i masked when causal); masked probs are 0.
    # attention_backward(dout, q, k, v, probs, scale) -> (dq, dk, dv):
    #     dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = scale dS K,
    #     dK = scale dS^T Q. (rowsum(dP*P) equals rowsum(dO*O).)
    # flash_attention(q, k, v, scale, causal) -> (out, lse[B, H, T]); lse is the natural-log
    #     row log-sum-exp of the scaled, masked scores. Never holds a [T, T] matrix.
    # flash_attention_backward(dout, q, k, v, out, lse, scale, causal) -> (dq, dk, dv),
    #     rebuilding P = exp(scale q k^T - lse) block by block.
    # adam_update(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step) -> None, in
    #     place on param, m, v (AdamW): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    #     param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param) where
    #     mhat = m / (1 - b1^step), vhat = v / (1 - b2^step). Core bumps param's version.


class BackendBase:
    """Convenience base: identity defaults, capability discovery, result wrapping.

    Subclasses set ``name`` and implement the primitives; defining any method named in
    :data:`FUSED_OPS` makes it native automatically.
    """

    name: ClassVar[str] = "base"
    priority: ClassVar[int] = 0
    protocol_version: ClassVar[tuple[int, int]] = PROTOCOL_VERSION
    dtypes: ClassVar[frozenset[np.dtype]] = frozenset({np.dtype(np.float32), np.dtype(np.int32)})
    accepts_strided: ClassVar[bool] = False

    def __init__(self, device_index: int = 0) -> None:
        self.device_index = device_index

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        return True, ""

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        dts = tuple(sorted(d.name for d in cls.dtypes))
        return [DeviceInfo(0, cls.name, dts)]

    @classmethod
    def capabilities(cls) -> Capabilities:
        fused = frozenset(op for op in FUSED_OPS if callable(getattr(cls, op, None)))
        return Capabilities(frozenset(cls.dtypes), fused, cls.accepts_strided)

    def wrap(
        self,
        buffer: Any,
        shape: tuple[int, ...],
        dtype: np.dtype,
        release: Callable[[Any], None] | None = None,
    ) -> Tensor:
        """A dense Tensor of this backend around a buffer the backend just produced.

        ``release(buffer)`` runs when the last view of the storage dies (byte accounting,
        buffer pools)."""
        from .tensor import Tensor

        return Tensor._dense(self, buffer, tuple(shape), np.dtype(dtype), release)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}:{self.device_index}>"


class ElementwiseByName:
    """Optional mixin for backends whose elementwise kernels are picked by name.

    Define :meth:`unary` and :meth:`binary` once; every named protocol method (``neg`` ...
    ``abs``, ``add`` ... ``minimum``) forwards to them with its own name, so a backend does
    not repeat thirteen one-line methods. Not part of the protocol: a backend may define
    the named methods itself instead (the numpy backends do, one ufunc each).
    """

    def unary(self, op: str, x: Tensor) -> Tensor:
        """``op`` is one of ``neg exp log sqrt rsqrt tanh abs``."""
        raise NotImplementedError(f"{type(self).__name__} must define unary()")

    def binary(self, op: str, a: Tensor, b: Tensor) -> Tensor:
        """``op`` is one of ``add sub mul div maximum minimum``."""
        raise NotImplementedError(f"{type(self).__name__} must define binary()")

    def neg(self, x: Tensor) -> Tensor:
        return self.unary("neg", x)

    def exp(self, x: Tensor) -> Tensor:
        return self.unary("exp", x)

    def log(self, x: Tensor) -> Tensor:
        return self.unary("log", x)

    def sqrt(self, x: Tensor) -> Tensor:
        return self.unary("sqrt", x)

    def rsqrt(self, x: Tensor) -> Tensor:
        return self.unary("rsqrt", x)

    def tanh(self, x: Tensor) -> Tensor:
        return self.unary("tanh", x)

    def abs(self, x: Tensor) -> Tensor:
        return self.unary("abs", x)

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        return self.binary("add", a, b)

    def sub(self, a: Tensor, b: Tensor) -> Tensor:
        return self.binary("sub", a, b)

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        return self.binary("mul", a, b)

    def div(self, a: Tensor, b: Tensor) -> Tensor:
        return self.binary("div", a, b)

    def maximum(self, a: Tensor, b: Tensor) -> Tensor:
        return self.binary("maximum", a, b)

    def minimum(self, a: Tensor, b: Tensor) -> Tensor:
        return self.binary("minimum", a, b)


def missing_primitives(cls: type) -> list[str]:
    """Names of required methods ``cls`` lacks (used at plugin load time)."""
    return [op for op in PRIMITIVE_OPS if not callable(getattr(cls, op, None))]
