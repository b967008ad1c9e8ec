"""Tensor: a backend buffer plus view metadata. A plain numeric container with no graph.

Views (reshape of dense data, transpose, permute, broadcast_to, basic slicing) share the
buffer *and* the :class:`Storage` version counter with their base and cost no kernel.
Strides and offsets are counted in elements, not bytes.

This module sits below the ops and device layers and imports neither: the few methods
that need them (arithmetic operators, ``numpy()``, ``contiguous()``, ``to()``, ``device``)
call through :data:`LAYERS`, which ``riftco.ops`` and ``riftco.device`` fill in when they
load. So the import graph stays a tree: tensor <- ops <- device <- everything else.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import DTypeError, ShapeError

if TYPE_CHECKING:
    from .backend import Backend
    from .device import Device


#: The most bytes a view may address: numpy's (and C's) signed 64-bit sizes.
MAX_BYTES = 2**63 - 1


class _Layers:
    """The layers above Tensor, registered by them at import (see the module docstring)."""

    ops: Any = None  # riftco.ops
    devices: Any = None  # riftco.device


LAYERS = _Layers()


class Storage:
    """The buffer a family of views shares, and the version counter autograd checks."""

    __slots__ = ("buffer", "size", "version", "release", "__weakref__")

    def __init__(
        self, buffer: Any, size: int, release: Callable[[Any], None] | None = None
    ) -> None:
        self.buffer = buffer
        self.size = size  # elements, so in-place writers know a view covers all of it
        self.version = 0
        # Called with the buffer when the last view dies: how backends count bytes and
        # recycle buffers. A __del__ hook costs far less than weakref.finalize per tensor.
        self.release = release

    def __del__(self) -> None:
        if self.release is not None:
            self.release(self.buffer)


@functools.lru_cache(maxsize=4096)
def dense_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order element strides of ``shape`` (cached: every new tensor needs them)."""
    strides = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= max(shape[i], 1)
    return tuple(strides)


def _normalize_axis(axis: int, ndim: int, op: str) -> int:
    if type(axis) is not int:
        axis = _int(axis, op, "axis")
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"[{op}] axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim if ndim else 0


class Tensor:
    __slots__ = ("backend", "storage", "shape", "strides", "offset", "dtype", "__weakref__")

    backend: Backend

    def __init__(
        self,
        backend: Backend,
        storage: Storage,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        offset: int,
        dtype: np.dtype,
    ) -> None:
        self.backend = backend
        self.storage = storage
        self.shape = shape
        self.strides = strides
        self.offset = offset
        self.dtype = dtype

    @classmethod
    def _dense(
        cls,
        backend: Backend,
        buffer: Any,
        shape: tuple[int, ...],
        dtype: np.dtype,
        release: Callable[[Any], None] | None = None,
    ) -> Tensor:
        storage = Storage(buffer, math.prod(shape), release)
        return cls(backend, storage, shape, dense_strides(shape), 0, dtype)

    # -- metadata ---------------------------------------------------------------------
    @property
    def buffer(self) -> Any:
        return self.storage.buffer

    @property
    def version(self) -> int:
        return self.storage.version

    def bump_version(self) -> None:
        """Record an in-place change: graphs that read this storage become stale."""
        self.storage.version += 1

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def device(self) -> Device:
        return LAYERS.devices.Device(self.backend.name, self.backend.device_index)

    @property
    def is_dense(self) -> bool:
        """C-contiguous with offset 0: what backends receive unless they accept strides."""
        return self.offset == 0 and self.is_contiguous

    @property
    def is_contiguous(self) -> bool:
        strides = self.strides
        if strides == dense_strides(self.shape):  # the common case, one cached lookup
            return True
        if 0 in self.shape:  # an empty tensor has no element out of place
            return True
        expected = 1
        for dim, stride in zip(reversed(self.shape), reversed(strides), strict=True):
            if dim != 1 and stride != expected:
                return False
            expected *= dim
        return True

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.shape)) or "scalar"
        return f"Tensor(shape={shape}, dtype={self.dtype.name}, device={self.device})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # -- host access --------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """Copy to a new host array (a synchronisation point)."""
        return LAYERS.ops.download(self)

    def item(self) -> float | int:
        if self.size != 1:
            raise ShapeError(
                f"[item] only one-element tensors convert to a scalar; got {self.shape}"
            )
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def contiguous(self) -> Tensor:
        """This tensor if dense, else a dense copy made by its backend (``copy_strided``)."""
        if self.is_dense:
            return self
        return LAYERS.ops.contiguous(self)

    def to(self, device: Any) -> Tensor:
        """Copy to another device (the only way data moves between backends)."""
        target = LAYERS.devices.device(device).backend
        if target is self.backend:
            return self
        if self.dtype not in target.dtypes:
            names = ", ".join(sorted(d.name for d in target.dtypes))
            raise DTypeError(
                f"[to] backend {target.name!r} does not support {self.dtype.name} "
                f"(supports {names}); cast first, riftco never casts silently"
            )
        return LAYERS.ops.upload(target, self.numpy())

    # -- views ----------------------------------------------------------------------------
    def _view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Tensor:
        return Tensor(self.backend, self.storage, shape, strides, offset, self.dtype)

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        new = _parse_shape(shape, "reshape")
        new = _infer_shape(new, self.size, self.shape)
        if not self.size:  # only an empty tensor can take arbitrarily large dims
            check_extent("reshape", new, self.dtype)
        if new == self.shape:
            return self
        if not self.is_contiguous:
            raise ShapeError(
                f"[reshape] cannot reshape a non-contiguous view of shape {self.shape} "
                f"(strides {self.strides}) to {new} without a copy; call .contiguous() first"
            )
        return self._view(new, dense_strides(tuple(new)), self.offset)

    def permute(self, *axes: int | Sequence[int]) -> Tensor:
        order = tuple(
            _normalize_axis(a, self.ndim, "permute") for a in _parse_shape(axes, "permute")
        )
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(
                f"[permute] axes {order} are not a permutation of range({self.ndim}) "
                f"for shape {self.shape}"
            )
        return self._view(
            tuple(self.shape[a] for a in order), tuple(self.strides[a] for a in order), self.offset
        )

    def transpose(self, axis0: int = -2, axis1: int = -1) -> Tensor:
        if self.ndim < 2:
            raise ShapeError(f"[transpose] needs rank >= 2; got shape {self.shape}")
        a0 = _normalize_axis(axis0, self.ndim, "transpose")
        a1 = _normalize_axis(axis1, self.ndim, "transpose")
        order = list(range(self.ndim))
        order[a0], order[a1] = order[a1], order[a0]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802 - numpy spelling
        return self.transpose()

    def broadcast_to(self, *shape: int | Sequence[int]) -> Tensor:
        target = _parse_shape(shape, "broadcast_to")
        if any(d < 0 for d in target):
            raise ShapeError(f"[broadcast_to] dims must be >= 0; got target shape {target}")
        check_extent("broadcast_to", target, self.dtype)
        if len(target) < self.ndim:
            raise ShapeError(f"[broadcast_to] cannot broadcast {self.shape} to lower rank {target}")
        lead = len(target) - self.ndim
        strides = [0] * lead
        for dim, stride, want in zip(self.shape, self.strides, target[lead:], strict=True):
            if dim == want:
                strides.append(stride)
            elif dim == 1:
                strides.append(0)
            else:
                raise ShapeError(
                    f"[broadcast_to] cannot broadcast shape {self.shape} to {target}: "
                    f"size {dim} does not match {want} and is not 1"
                )
        return self._view(target, tuple(strides), self.offset)

    def expand_dims(self, axis: int) -> Tensor:
        axis = _normalize_axis(axis, self.ndim + 1, "expand_dims")
        shape = self.shape[:axis] + (1,) + self.shape[axis:]
        stride = self.strides[axis] * self.shape[axis] if axis < self.ndim else 1
        return self._view(shape, self.strides[:axis] + (stride,) + self.strides[axis:], self.offset)

    def __getitem__(self, index: Any) -> Tensor:
        """Basic slicing: ints, slices with positive step, ``...`` and ``None``."""
        if not isinstance(index, tuple):
            index = (index,)
        n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
        if sum(1 for i in index if i is Ellipsis) > 1:
            raise ShapeError("[getitem] an index can only have a single ellipsis ('...')")
        if n_real > self.ndim:
            raise ShapeError(f"[getitem] too many indices ({n_real}) for shape {self.shape}")
        expanded: list[Any] = []
        for item in index:
            if item is Ellipsis:
                expanded.extend([slice(None)] * (self.ndim - n_real))
            else:
                expanded.append(item)
        expanded.extend([slice(None)] * (self.ndim - sum(1 for i in expanded if i is not None)))
        shape: list[int] = []
        strides: list[int] = []
        offset = self.offset
        axis = 0
        for item in expanded:
            if item is None:
                shape.append(1)
                strides.append(0)
                continue
            dim, stride = self.shape[axis], self.strides[axis]
            if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                i = int(item)
                if not -dim <= i < dim:
                    raise ShapeError(
                        f"[getitem] index {i} is out of bounds for axis {axis} with size {dim}"
                    )
                offset += (i % dim) * stride
            elif isinstance(item, slice):
                if item.step is not None and item.step <= 0:  # before indices(): 0 raises
                    raise ShapeError(f"[getitem] slice step must be positive; got {item.step}")
                try:
                    start, stop, step = item.indices(dim)
                except TypeError:  # a float or a string bound
                    raise ShapeError(f"[getitem] slice bounds must be ints; got {item!r}") from None
                count = max(0, (stop - start + step - 1) // step)
                shape.append(count)
                strides.append(stride * step)
                offset += start * stride if count else 0
            else:
                raise ShapeError(
                    f"[getitem] unsupported index {item!r}: only ints, slices, ... and None "
                    "(advanced indexing would need a gather kernel)"
                )
            axis += 1
        return self._view(tuple(shape), tuple(strides), offset)

    # -- arithmetic sugar (raw ops, no graph) ------------------------------------------------
    def __add__(self, other: Tensor | float) -> Tensor:
        ops = LAYERS.ops
        return ops.add(self, other) if isinstance(other, Tensor) else ops.add_scalar(self, other)

    def __sub__(self, other: Tensor | float) -> Tensor:
        ops = LAYERS.ops
        return ops.sub(self, other) if isinstance(other, Tensor) else ops.add_scalar(self, -other)

    def __mul__(self, other: Tensor | float) -> Tensor:
        ops = LAYERS.ops
        return ops.mul(self, other) if isinstance(other, Tensor) else ops.mul_scalar(self, other)

    def __truediv__(self, other: Tensor | float) -> Tensor:
        ops = LAYERS.ops
        if isinstance(other, Tensor):
            return ops.div(self, other)
        return ops.mul_scalar(self, 1.0 / other)

    def __neg__(self) -> Tensor:
        return LAYERS.ops.neg(self)

    def __matmul__(self, other: Tensor) -> Tensor:
        return LAYERS.ops.matmul(self, other)

    __radd__ = __add__
    __rmul__ = __mul__


def check_extent(op: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Refuse a shape no backend can index: numpy (and C) need the product of the non-zero
    dims times the item size within a signed 64-bit size, empty or not."""
    extent = math.prod(d for d in shape if d) * dtype.itemsize
    if extent > MAX_BYTES:
        raise ShapeError(
            f"[{op}] shape {shape} of {dtype.name} spans {extent:,} bytes (the non-zero dims "
            f"times {dtype.itemsize}); no backend indexes more than {MAX_BYTES:,}"
        )


def _parse_shape(shape: tuple[Any, ...], op: str = "shape") -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if all(type(s) is int for s in shape):  # the common case, checked cheaply
        return tuple(shape)
    return tuple(_int(s, op, "dim") for s in shape)


def _int(value: Any, op: str, what: str) -> int:
    """An int or numpy integer; a float (2.5 would truncate), bool or string is refused."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise DTypeError(f"[{op}] every {what} must be an int; got {type(value).__name__} {value!r}")


def _infer_shape(new: tuple[int, ...], size: int, old: tuple[int, ...]) -> tuple[int, ...]:
    if new.count(-1) > 1:
        raise ShapeError(f"[reshape] only one dimension can be -1; got {new} for {old}")
    if -1 in new:
        known = math.prod(d for d in new if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"[reshape] cannot reshape {old} (size {size}) to {new}")
        new = tuple(size // known if d == -1 else d for d in new)
    if any(d < 0 for d in new) or math.prod(new) != size:
        raise ShapeError(f"[reshape] cannot reshape {old} (size {size}) to {new}")
    return new
