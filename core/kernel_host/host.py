"""What the launch plans need from the kernel host layer, as one typed protocol.

A *launch plan* is host code that turns one op call into kernel launches (buffers, thread
counts, which kernel of which shader family); *kernels* are the device code in ``shaders/``.
``KernelBackend`` is assembled from plan mixins (``PrimitivePlans`` and one per optional
op unit, ``fused_*.py``) that call each other and the host's own methods through ``self``.
Each plan names its base :data:`PlanBase`: the protocol :class:`KernelHost` for type
checkers, so mypy checks every ``self.launch(...)`` and ``self.runtime.capabilities``
against a real signature, and plain ``object`` at run time, so that the protocol's stubs
never enter a backend's method resolution order (where they could shadow a sibling
mixin's implementation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .runtime import Runtime

if TYPE_CHECKING:
    from ..tensor import Tensor


class KernelHost(Protocol):
    """The host layer's calls the mixins use (``KernelBackend`` implements all of them)."""

    #: The device queue; kernel shapes are chosen from ``runtime.capabilities`` only.
    runtime: Runtime

    def empty(self, shape: Sequence[int], dtype: np.dtype) -> Tensor:
        """A dense tensor with undefined contents."""
        ...

    def fill(self, x: Tensor, value: float) -> None:
        """Set every element of ``x`` to ``value`` (asynchronous)."""
        ...

    def copy_strided(self, x: Tensor) -> Tensor:
        """A dense copy of the view ``x``."""
        ...

    def launch(
        self,
        family: str,
        kernel: str,
        dtype: np.dtype,
        threads: int,
        *args: Tensor,
        ints: Sequence[int] = (),
        floats: Sequence[float] = (),
        index_dtype: np.dtype | None = None,
        defines: Mapping[str, str] | None = None,
        status: tuple[str, int] | None = None,
        guarded: bool = False,
        per_call: bool = False,
    ) -> None:
        """Queue ``kernel`` of ``shaders/<family>.cl`` (``KernelBackend.launch``)."""
        ...

    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        """The protocol's batched product (``PrimitivePlans``)."""
        ...

    def product(
        self, out: Tensor, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool
    ) -> None:
        """The product written through ``out``'s strides (``PrimitivePlans``)."""
        ...

    def sum(self, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
        """The protocol's sum reduction (``PrimitivePlans``)."""
        ...

    def cast(self, x: Tensor, dtype: np.dtype) -> Tensor:
        """The protocol's dtype conversion (``PrimitivePlans``)."""
        ...


if TYPE_CHECKING:
    PlanBase = KernelHost
else:
    PlanBase = object
