"""The Backend protocol: the only surface the autograd core ever calls.

A backend is one class. Core never imports a backend module; it receives backend classes
from plugins (see ``plugins.py``) and creates one instance per device. Each protocol
method is specified in its op unit under ``riftco.ops`` (``primitive/`` for the required
ones, ``fused/`` for the optional ones): the typed signature, its semantics and how
conformance checks it. :class:`Backend` and :class:`FusedBackend` gather those methods.

Conventions shared by every method:

* Core validates every call before the backend sees it: shapes and dtypes fit, every
  operand lives on this very backend instance, and (unless ``accepts_strided`` is true)
  every operand is *dense*: C-contiguous strides and offset 0. Strides and offsets count
  elements, not bytes.
* A backend may read a Tensor's ``shape``, ``strides``, ``offset``, ``dtype``, ``size``,
  ``nbytes``, ``is_dense`` and ``storage.buffer`` (its own buffer object); it builds results
  with :meth:`BackendBase.wrap`. Methods return new Tensors on the same backend, except the
  in-place ones (``fill``, ``adam_update``, ``adam_update_multi``). Core checks every
  result's metadata (count, dtype, shape, a new tensor) on every call, and that no result
  shares memory with an operand: by object, numpy address range, or the backend's
  optional ``same_allocation(a, b) -> bool`` for two of its buffers core cannot read.
* Masks (results of ``compare``, the ``cond`` of ``where``) have the operands' float dtype
  and hold exactly 1 or 0. Integer tensors reach a backend only as embedding ids and
  cross-entropy targets (int32 or int64, as it declares), as ``cast`` inputs and outputs,
  and in ``copy_strided``/``to_numpy``/``from_numpy``/``concatenate_last_axis``;
  ``argmax`` always returns int32.
* Fused operations are optional. A backend class that defines one runs it natively;
  otherwise core runs the op unit's composite, built from the primitives. Each optional
  method's docstring writes out its math and has a ``Special values:`` paragraph (NaN,
  infinities, -0.0, empty shapes: what the CPU reference computes) and a ``Composite:``
  paragraph naming the other optional ops the composite calls (``tests/ops/test_op_specs.py``
  holds them to the code). Conformance does not tell -0.0 from 0.0.

* float16 and bfloat16 (``riftco.dtypes``) are storage dtypes a backend may declare. It
  then runs the memory methods and ``cast`` on them itself; every other op computes in
  float32 and rounds once to the output dtype, where statistics (mean, rstd, lse) and
  losses stay float32. Core runs an op in float32 on the same backend, cast in and out
  (``riftco.ops.widen``), unless the backend names it in ``low_precision_ops`` (the ops it
  runs in half storage itself).

Protocol version 1.5 (1.1 added the optional ``linear``/``linear_backward`` and
``attention_qkv``/``attention_qkv_backward``, 1.2 the optional ``adam_update_multi``, 1.3
the optional ``add_layer_norm``/``add_layer_norm_backward`` and
``linear_gelu``/``linear_gelu_backward``, 1.4 the optional ``rms_norm``/``rms_norm_backward``,
1.5 the float16/bfloat16 dtypes, ``cast`` between every float pair and
``low_precision_ops``; an older 1.x backend runs the composites of what it lacks). A change
that removes or alters a method bumps the major number; adding an optional fused op bumps
the minor number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from .ops.fused.adam import AdamMethods
from .ops.fused.adam_multi import AdamMultiMethods
from .ops.fused.add_layer_norm import AddLayerNormMethods
from .ops.fused.attention import AttentionMethods
from .ops.fused.attention_qkv import AttentionQKVMethods
from .ops.fused.cross_entropy import CrossEntropyMethods
from .ops.fused.embedding import EmbeddingMethods
from .ops.fused.flash_attention import FlashAttentionMethods
from .ops.fused.gelu import GeluMethods
from .ops.fused.layer_norm import LayerNormMethods
from .ops.fused.linear import LinearMethods
from .ops.fused.linear_gelu import LinearGeluMethods
from .ops.fused.rms_norm import RMSNormMethods
from .ops.fused.softmax import SoftmaxMethods
from .ops.opunit import units
from .ops.primitive.binary import BinaryMethods
from .ops.primitive.layout import LayoutMethods
from .ops.primitive.matmul import MatmulMethods
from .ops.primitive.memory import MemoryMethods
from .ops.primitive.reduce import ReduceMethods
from .ops.primitive.select import COMPARE_OPS, SelectMethods  # noqa: F401  (re-exported)
from .ops.primitive.unary import UnaryMethods
from .tensor import Tensor

PROTOCOL_VERSION: tuple[int, int] = (1, 5)

#: Every required method (a backend missing one is refused at load time), in unit order.
PRIMITIVE_OPS: tuple[str, ...] = tuple(u.name for u in units() if u.kind != "fused")
#: Optional fused methods; core has a composite fallback for each.
FUSED_OPS: tuple[str, ...] = tuple(u.name for u in units("fused"))


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
    #: the ops run in float16/bfloat16 storage natively; the others are widened
    low_precision_ops: frozenset[str] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        return {
            "dtypes": sorted(d.name for d in self.dtypes),
            "fused": {u.name: ("native" if u.name in self.fused else "composite")
                      for u in units("fused")},
            "accepts_strided": self.accepts_strided,
            "low_precision_ops": sorted(self.low_precision_ops),
        }  # fmt: skip


class Identity(Protocol):
    """Who a backend is and what it can address."""

    name: ClassVar[str]
    priority: ClassVar[int]
    protocol_version: ClassVar[tuple[int, int]]
    dtypes: ClassVar[frozenset[np.dtype]]
    accepts_strided: ClassVar[bool]
    device_index: int

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


@runtime_checkable
class Backend(
    Identity,
    MemoryMethods,
    UnaryMethods,
    BinaryMethods,
    SelectMethods,
    ReduceMethods,
    MatmulMethods,
    LayoutMethods,
    Protocol,
):
    """The required protocol: a backend with only these methods is complete."""


@runtime_checkable
class FusedBackend(
    GeluMethods,
    SoftmaxMethods,
    LayerNormMethods,
    EmbeddingMethods,
    CrossEntropyMethods,
    AttentionMethods,
    FlashAttentionMethods,
    AdamMethods,
    LinearMethods,
    AttentionQKVMethods,
    AdamMultiMethods,
    AddLayerNormMethods,
    LinearGeluMethods,
    RMSNormMethods,
    Protocol,
):
    """The optional fused methods, for type checkers (a backend may define any subset)."""


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
    #: ops this backend runs on float16/bfloat16 storage itself (computing in float32);
    #: core widens the others through float32 (``riftco.ops.widen``)
    low_precision_ops: ClassVar[frozenset[str]] = frozenset()

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
        fused = frozenset(u.name for u in units("fused") if callable(getattr(cls, u.name, None)))
        return Capabilities(
            frozenset(cls.dtypes), fused, cls.accepts_strided, frozenset(cls.low_precision_ops)
        )

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
        return Tensor._dense(self, buffer, tuple(shape), np.dtype(dtype), release)  # type: ignore[arg-type]

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
    return [
        u.name for u in units() if u.kind != "fused" and not callable(getattr(cls, u.name, None))
    ]
