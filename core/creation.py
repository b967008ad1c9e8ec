"""Tensor constructors. Host-side numpy builds the values, then one upload to the device.

Python lists of floats become float32 and lists of ints int32 (the dtypes every backend
has); numpy arrays keep their dtype, because riftco never changes a dtype silently.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .device import Device
from .device import device as _device
from .dtypes import as_dtype, float32, int32, is_float
from .errors import DTypeError, OutOfMemoryError, ShapeError
from .ops import allocate, fill_, full_like, upload
from .tensor import Tensor

__all__ = ["tensor", "full", "full_like", "zeros", "ones", "arange", "randn"]


def _upload(array: np.ndarray, dev: str | Device | None, op: str) -> Tensor:
    backend = _device(dev).backend
    if array.dtype not in backend.dtypes:
        names = ", ".join(sorted(d.name for d in backend.dtypes))
        raise DTypeError(
            f"[{op}] backend {backend.name!r} does not support {array.dtype.name} "
            f"(supports {names}); pass dtype= explicitly"
        )
    return upload(backend, array)


def _shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def tensor(data: Any, dtype: Any = None, device: str | Device | None = None) -> Tensor:
    """A new tensor holding ``data`` (nested lists, numbers, numpy arrays or Tensors)."""
    if isinstance(data, Tensor):
        data = data.numpy()
    if isinstance(data, (np.ndarray, np.generic)):  # numpy says its dtype: keep it
        arr = np.asarray(data)
        arr = arr if dtype is None else arr.astype(as_dtype(dtype, "tensor"))
    else:
        arr = np.asarray(data)
        if dtype is not None:
            arr = arr.astype(as_dtype(dtype, "tensor"))
        elif arr.dtype.kind == "f":
            arr = arr.astype(float32)
        elif arr.dtype.kind in "iub":
            arr = arr.astype(int32)
    as_dtype(arr.dtype, "tensor")
    return _upload(arr, device, "tensor")


def full(
    shape: Sequence[int] | int,
    value: float,
    dtype: Any = float32,
    device: str | Device | None = None,
) -> Tensor:
    dt = as_dtype(dtype, "full")
    backend = _device(device).backend
    dims = _shape(shape)
    if any(d < 0 for d in dims):
        raise ShapeError(f"[full] dims must be >= 0; got shape {dims}")
    if dt not in backend.dtypes:
        return _upload(np.full(dims, value, dtype=dt), device, "full")
    return fill_(allocate(backend, dims, dt), value)


def zeros(
    shape: Sequence[int] | int, dtype: Any = float32, device: str | Device | None = None
) -> Tensor:
    return full(shape, 0.0, dtype, device)


def ones(
    shape: Sequence[int] | int, dtype: Any = float32, device: str | Device | None = None
) -> Tensor:
    return full(shape, 1.0, dtype, device)


def arange(start: float, stop: float | None = None, step: float = 1, dtype: Any = None,
           device: str | Device | None = None) -> Tensor:  # fmt: skip
    if step == 0:
        raise ShapeError("[arange] step must be nonzero")
    if stop is None:
        start, stop = 0, start
    ints = all(float(v).is_integer() for v in (start, stop, step))
    dt = as_dtype(dtype if dtype is not None else (int32 if ints else float32), "arange")
    return _upload(np.arange(start, stop, step).astype(dt), device, "arange")


def randn(
    shape: Sequence[int] | int,
    seed: int | np.random.Generator | None = None,
    dtype: Any = float32,
    std: float = 1.0,
    device: str | Device | None = None,
) -> Tensor:
    """Standard normal values from a seeded host RNG (the same numbers on every backend).

    The float64 draws are made and rounded in chunks, so the host holds the result's bytes
    and no float64 copy of it (a float32 request of 3.6 TiB had failed in numpy asking
    for 7.3 TiB of float64)."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    dt = as_dtype(dtype, "randn")
    if not is_float(dt):
        raise DTypeError(f"[randn] needs a float dtype; got {dt.name}")
    dims = _shape(shape)
    if any(d < 0 for d in dims):
        raise ShapeError(f"[randn] dims must be >= 0; got shape {dims}")
    out = _host_array("randn", dims, dt)
    flat = out.reshape(-1)
    for i in range(0, flat.size, _CHUNK):  # one stream: chunked draws are the same numbers
        flat[i : i + _CHUNK] = rng.standard_normal(min(_CHUNK, flat.size - i)) * std
    return _upload(out, device, "randn")


#: Draws per chunk of ``randn`` (8 MiB of float64 at a time).
_CHUNK = 1 << 20


def _host_array(op: str, dims: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """An empty host array, or an OutOfMemoryError naming the op, shape, dtype and size."""
    try:
        return np.empty(dims, dtype=dt)
    except (MemoryError, ValueError) as exc:  # ValueError: "array is too big"
        nbytes = math.prod(dims) * dt.itemsize
        raise OutOfMemoryError(
            f"[{op}] the host cannot hold shape {dims} {dt.name}: {nbytes:,} bytes "
            f"({nbytes / 2**40:.2f} TiB) ({type(exc).__name__}: {exc})"
        ) from None
