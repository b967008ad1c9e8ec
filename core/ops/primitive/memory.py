"""Allocation and transfer: the buffers every other op reads and writes.

Strides and offsets count *elements*, never bytes. A backend sees a Tensor's ``shape``,
``strides``, ``offset``, ``dtype`` and ``storage.buffer`` (its own buffer object); it builds
results with ``BackendBase.wrap``. ``copy_strided`` and ``to_numpy`` are the only methods
that must read arbitrary views (transposed, broadcast with stride 0, offset, sliced);
every other method receives dense operands unless the backend sets ``accepts_strided``.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from ... import dtypes as _dt
from ...errors import (
    BackendContractError,
    DTypeError,
    OutOfMemoryError,
    RiftcoError,
    ShapeError,
)
from ...tensor import Tensor, check_extent
from .. import checks, deferred
from ..capture_hooks import host
from ..dispatch import Out, dispatch
from ..opunit import EXACT_TOLERANCES, OpUnit, register, samples_module

_SAMPLES = samples_module(__name__)


class MemoryMethods(Protocol):
    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> Tensor:
        """A new dense tensor of ``shape`` and ``dtype``; contents undefined.

        Core has checked that every dim is >= 0 and that ``dtype`` is one the backend
        declares. A failed allocation may raise anything: core reports it as
        ``OutOfMemoryError`` naming the op, shape, dtype and bytes. Inside any other
        method, let a failed allocation surface as a ``MemoryError`` (numpy's does): core
        reports it the same way, naming that op."""
        ...

    def from_numpy(self, array: np.ndarray) -> Tensor:
        """Upload a C-contiguous host array into a new dense tensor of the same dtype.

        Core refuses dtypes the backend does not declare before calling; a backend may
        still refuse (raise ``DTypeError``) but must never convert silently."""
        ...

    def to_numpy(self, x: Tensor) -> np.ndarray:
        """Download ``x`` (any view: respect its strides and offset) into a new C-contiguous
        array of ``x.dtype`` and ``x.shape``. A synchronisation point: queued work that
        writes ``x`` completes first, and deferred device errors are raised here."""
        ...

    def copy_strided(self, x: Tensor) -> Tensor:
        """A new dense tensor with the values of any view ``x``: strides may be 0 or
        permuted, the offset anything, the last axis sliced. Exact."""
        ...

    def fill(self, x: Tensor, value: float) -> None:
        """In place: every element of dense ``x`` becomes ``value`` converted to ``x.dtype``
        (NaN, +-inf and -0.0 included). Core bumps the storage version."""
        ...

    def synchronize(self) -> None:
        """Wait until all queued work has finished; raise any deferred device error."""
        ...

    def memory_stats(self) -> dict[str, int]:
        """At least ``{"allocated_bytes", "peak_bytes"}``: bytes held in live tensor buffers."""
        ...


# -- public functions ---------------------------------------------------------------------------
def allocate(backend: Any, shape: tuple[int, ...], dtype: Any) -> Tensor:
    """A new dense tensor on ``backend`` (contents undefined)."""
    checks.backend_arg("allocate", backend)
    dt = _dt.as_dtype(dtype, "allocate")
    shape = checks.dims("allocate", shape)
    check_extent("allocate", shape, dt)
    checks.supported("allocate", backend, dt)
    try:
        out = backend.allocate(shape, dt)
    except RiftcoError:
        raise
    except Exception as exc:
        nbytes = math.prod(shape) * dt.itemsize
        raise OutOfMemoryError(
            f"[allocate] backend {backend.name}:{backend.device_index} could not allocate "
            f"{nbytes:,} bytes (shape {shape}, {dt.name}): {type(exc).__name__}: {exc}"
        ) from exc
    _check_new(ALLOCATE, backend, out, Out(shape, dt))
    return out


def upload(backend: Any, array: np.ndarray) -> Tensor:
    """A new tensor on ``backend`` holding a copy of ``array`` (dtype kept, never cast)."""
    checks.backend_arg("from_numpy", backend)
    if isinstance(array, Tensor):
        raise DTypeError("[from_numpy] expects a host array; got a Tensor (move it with .to())")
    try:  # NOTE: asarray keeps 0-d arrays 0-d, unlike ascontiguousarray
        arr = np.asarray(array, order="C")
    except (TypeError, ValueError) as exc:  # e.g. a ragged nested list
        raise DTypeError(
            f"[from_numpy] cannot read {type(array).__name__} as an array: {exc}"
        ) from None
    dt = _dt.as_dtype(arr.dtype, "from_numpy")
    checks.supported("from_numpy", backend, dt)
    try:
        out = backend.from_numpy(arr)
    except MemoryError as exc:  # numpy's, a runtime's, or a kernel host layer's own
        raise OutOfMemoryError(
            f"[from_numpy] backend {backend.name}:{backend.device_index} could not allocate "
            f"{arr.nbytes:,} bytes (shape {arr.shape}, {dt.name}): {type(exc).__name__}: {exc}"
        ) from exc
    _check_new(FROM_NUMPY, backend, out, Out(arr.shape, dt))
    if _on_host(out.storage.buffer, arr):
        raise _contract(
            FROM_NUMPY,
            backend,
            "returned a tensor over the caller's array; "
            "expected a copy (a later write to either would change the other)",
        )
    return out


def download(x: Tensor) -> np.ndarray:
    """A new host array with the values of ``x`` (any view); a synchronisation point."""
    checks.tensor("to_numpy", x)
    if deferred.pending():
        deferred.flush(x.backend)  # a sync point: report bad values found on the device
    out = x.backend.to_numpy(x)
    if type(out) is not np.ndarray or out.shape != x.shape or out.dtype != x.dtype:
        got = f"{type(out).__name__} {getattr(out, 'shape', '')} {getattr(out, 'dtype', '')}"
        raise _contract(
            TO_NUMPY,
            x.backend,
            f"returned {got.strip()}; expected a numpy array of shape {x.shape} and dtype "
            f"{x.dtype.name}",
        )
    if _on_host(x.storage.buffer, out):
        raise _contract(
            TO_NUMPY,
            x.backend,
            "returned an array over the tensor's own buffer; "
            "expected a copy (a later write to either would change the other)",
        )
    return out


def storage_array(x: Tensor) -> np.ndarray:
    """Every element of ``x``'s storage, downloaded as one dense 1-D array.

    Reads the buffer as a whole (a dense tensor over it), so no strided kernel of the
    backend is involved: the checker's view of the data cannot inherit a copy bug."""
    flat = Tensor(x.backend, x.storage, (x.storage.size,), (1,), 0, x.dtype)
    return download(flat)


def host_view(x: Tensor) -> np.ndarray:
    """The values of any view ``x``, built on the host from :func:`storage_array`."""
    flat = storage_array(x)
    item = flat.itemsize
    if x.size == 0:
        return np.empty(x.shape, x.dtype)
    view = np.lib.stride_tricks.as_strided(
        flat[x.offset :], x.shape, tuple(s * item for s in x.strides), writeable=False
    )
    return np.array(view, copy=True, order="C")


def copy_strided(x: Tensor) -> Tensor:
    """A new dense copy of any view ``x`` (always a copy, even when ``x`` is dense)."""
    checks.tensor("copy_strided", x)
    return dispatch(COPY_STRIDED, x.backend, (x,), Out(x.shape, x.dtype), prep=False)


def contiguous(x: Tensor) -> Tensor:
    """``x`` itself when dense (C-contiguous, offset 0), else a dense copy."""
    if x.is_dense:
        return x
    return dispatch(COPY_STRIDED, x.backend, (x,), Out(x.shape, x.dtype), prep=False)


def fill_(x: Tensor, value: float) -> Tensor:
    """In place; bumps the storage version so graphs reading ``x`` become stale."""
    checks.tensor("fill_", x)
    if not x.is_dense:
        raise ShapeError(f"[fill_] needs a dense tensor (offset 0, C-contiguous); got {x!r}")
    dispatch(FILL, x.backend, (x, fill_value("fill_", x.dtype, value)), None, prep=False)
    x.bump_version()
    return x


def fill_value(op: str, dtype: np.dtype, value: Any) -> float | int:
    """``value`` as ``dtype`` will hold it, decided once here for every backend: a float
    for float dtypes (rounded to float32 when it is one, overflowing to +-inf), an int for
    integer ones by ``cast``'s rule (truncate toward zero, saturate, NaN -> 0), so no
    backend meets a NaN or a 1e30 it cannot convert."""
    v = checks.number(op, value, "value")
    if _dt.is_float(dtype):
        with np.errstate(over="ignore"):
            return float(dtype.type(v))
    info = np.iinfo(dtype)
    if isinstance(value, (int, np.integer)):
        exact = int(value)  # exact even beyond 2**53
    elif math.isnan(v):
        return 0
    elif math.isinf(v):
        exact = info.max if v > 0 else info.min
    else:
        exact = int(v)  # truncates toward zero
    return min(max(exact, int(info.min)), int(info.max))


def full_like(like: Tensor, value: float, shape: tuple[int, ...] | None = None) -> Tensor:
    """``value`` everywhere, on ``like``'s backend and in its dtype (its shape by default).

    A device fill with no upload: ops, composites and compiled objectives use it for the
    constants they combine with an operand they already checked."""
    checks.tensor("full_like", like)
    dims = like.shape if shape is None else checks.dims("full_like", shape)
    fill = fill_value("full_like", like.dtype, value)
    out = allocate(like.backend, dims, like.dtype)
    dispatch(FILL, like.backend, (out, fill), None, prep=False)
    return out


def assign_(dst: Tensor, src: Tensor) -> Tensor:
    """In place: ``dst`` takes the values of ``src`` (same shape, dtype, backend).

    ``dst``'s storage receives a dense copy of ``src``'s buffer, so it works on every backend
    without a strided-write protocol method; ``dst`` must cover its whole storage. The copy
    is made before ``dst`` changes: a failed one (out of memory) leaves ``dst`` as it was."""
    assign_many_((dst, src))
    return dst


def assign_many_(*pairs: tuple[Tensor, Tensor]) -> None:
    """``assign_`` for several ``(dst, src)`` pairs, all or nothing: every pair is checked and
    every copy made before the first destination changes (how a composite in-place op such
    as AdamW's keeps "nothing half-written" when an allocation fails part way)."""
    for dst, src in pairs:
        checks.tensor("assign_", dst)
        checks.tensor("assign_", src)
        checks.same_backend("assign_", dst, src)
        checks.same_shape("assign_", dst, src)
        checks.same_dtype("assign_", dst, src)
        if not dst.is_dense or dst.storage.size != dst.size:
            raise ShapeError(
                "[assign_] destination must be a dense tensor owning its whole storage"
            )
    fresh = [copy_strided(src) for _, src in pairs]
    for (dst, _), new in zip(pairs, fresh, strict=True):
        host(_swap_buffers, dst, new)  # no backend call: a captured step must redo it
        dst.bump_version()


def _swap_buffers(dst: Tensor, new: Tensor) -> None:
    """Swap, not overwrite: ``new``'s storage then releases dst's old buffer when it dies,
    so a backend's release hook (byte count, buffer pool) never frees the live one."""
    dst.storage.buffer, new.storage.buffer = new.storage.buffer, dst.storage.buffer


def _on_host(buffer: Any, array: np.ndarray) -> bool:
    """True when a numpy buffer and a host array share memory (a backend over numpy that
    skipped the copy). Other buffer types are left to conformance's sentinel check."""
    return type(buffer) is np.ndarray and bool(np.may_share_memory(buffer, array))


def _contract(unit: OpUnit, backend: Any, what: str) -> BackendContractError:
    return BackendContractError(
        f"[{unit.name}] backend {backend.name}:{backend.device_index} broke the result "
        f"contract: {what}"
    )


def _check_new(unit: OpUnit, backend: Any, out: Any, want: Out) -> None:
    if type(out) is not Tensor or out.backend is not backend:
        raise _contract(unit, backend, f"returned {type(out).__name__}, not a Tensor of it")
    if out.dtype != want.dtype or out.shape != want.shape or not out.is_dense:
        raise _contract(
            unit,
            backend,
            f"returned a {out.dtype.name} tensor of shape {out.shape} (dense: {out.is_dense}); "
            f"expected a dense {want.dtype.name} tensor of shape {want.shape}",
        )


def _copy_cost(args: list[Any]) -> tuple[int, int]:
    return (2 * args[0].nbytes, 0)


def _fill_cost(args: list[Any]) -> tuple[int, int]:
    return (args[0].nbytes, 0)


ALLOCATE = OpUnit(
    "allocate", "memory", MemoryMethods.allocate, module="memory", function=allocate,
    tolerance=EXACT_TOLERANCES, nan="-", testing=_SAMPLES,
)  # fmt: skip
FROM_NUMPY = OpUnit(
    "from_numpy", "memory", MemoryMethods.from_numpy, module="memory", function=upload,
    tolerance=EXACT_TOLERANCES, nan="exact copy (NaN, +-inf, -0.0 preserved)", testing=_SAMPLES,
)  # fmt: skip
TO_NUMPY = OpUnit(
    "to_numpy", "memory", MemoryMethods.to_numpy, module="memory", function=download,
    tolerance=EXACT_TOLERANCES, nan="exact copy (NaN, +-inf, -0.0 preserved)", testing=_SAMPLES,
    cost=_copy_cost,
)  # fmt: skip
COPY_STRIDED = OpUnit(
    "copy_strided", "memory", MemoryMethods.copy_strided, module="memory", function=copy_strided,
    tolerance=EXACT_TOLERANCES, nan="exact copy (NaN, +-inf, -0.0 preserved)", testing=_SAMPLES,
    cost=_copy_cost,
)  # fmt: skip
FILL = OpUnit(
    "fill", "memory", MemoryMethods.fill, module="memory", function=fill_, outputs=("x",),
    in_place=True, tolerance=EXACT_TOLERANCES, nan="writes NaN, +-inf and -0.0 exactly",
    testing=_SAMPLES, cost=_fill_cost,
)  # fmt: skip
SYNCHRONIZE = OpUnit(
    "synchronize", "memory", MemoryMethods.synchronize, module="memory", outputs=(), nan="-"
)
MEMORY_STATS = OpUnit(
    "memory_stats", "memory", MemoryMethods.memory_stats, module="memory", outputs=(), nan="-"
)

register(ALLOCATE, FROM_NUMPY, TO_NUMPY, COPY_STRIDED, FILL, SYNCHRONIZE, MEMORY_STATS)
