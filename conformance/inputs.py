"""Inputs: drawn once on the host, uploaded twice (backend under test, CPU float64).

An op unit describes each tensor argument as an ``Arr`` (``riftco.ops.samples``): float64
host values plus the *layout* to present them in. Non-dense layouts are built on the device
with Tensor views (``transpose``, ``permute``, ``broadcast_to``, slicing), so the backend
sees real strided or offset operands (core densifies them, with the backend's own
``copy_strided``, for backends that do not accept views). The reference always receives
the same logical values, rounded to the tested dtype first, so the comparison measures the
backend's arithmetic and nothing else.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from riftco import ops
from riftco.dtypes import compute_dtype
from riftco.ops.samples import Arr, Example, broadcast_axis
from riftco.tensor import Tensor


def host_value(arr: Arr, dtype: np.dtype) -> np.ndarray:
    """The logical values as the backend under test will hold them."""
    if arr.kind == "index":
        return arr.value.astype(arr.index_dtype or np.int32)
    if arr.kind == "stat":  # saved statistics live in the compute dtype (float32 for half)
        dtype = compute_dtype(np.dtype(dtype))
    with np.errstate(over="ignore", invalid="ignore"):
        return arr.value.astype(dtype)


def reference_value(arr: Arr, dtype: np.dtype) -> np.ndarray:
    """The same values for the CPU reference: rounded to ``dtype``, then widened."""
    v = host_value(arr, dtype)
    return v if arr.kind == "index" else v.astype(np.float64)


def upload(arr: Arr, backend: Any, dtype: np.dtype) -> Tensor:
    """Put ``arr`` on ``backend`` in its layout (views are built on the device)."""
    v = host_value(arr, dtype)
    layout = arr.layout
    if layout in ("transposed", "permuted") and v.ndim < 2:
        layout = "sliced"
    if layout == "rows" and v.ndim < 1:
        layout = "offset"
    if layout == "transposed":
        return ops.upload(backend, _c(np.swapaxes(v, -1, -2))).transpose(-1, -2)
    if layout == "permuted":
        a0, a1 = (1, 2) if v.ndim >= 3 else (0, 1)
        return ops.upload(backend, _c(np.swapaxes(v, a0, a1))).transpose(a0, a1)
    if layout == "broadcast":
        axis = broadcast_axis(v.shape)
        if axis is not None:
            # stride 0 over the first slice of a buffer exactly as large as the view (the
            # rest of it other values), so a fast path that trusts the buffer's size instead
            # of the strides reads wrong data
            first = tuple(slice(0, 1) if i == axis else slice(None) for i in range(v.ndim))
            buffer = _c(v)
            rest = tuple(slice(1, None) if i == axis else slice(None) for i in range(v.ndim))
            buffer[rest] = buffer[rest] + 1
            return ops.upload(backend, buffer)[first].broadcast_to(v.shape)
        return ops.upload(backend, _c(v))
    if layout == "sliced" and v.ndim >= 1:
        # every other element of a wider buffer, starting at offset 1: strided and offset
        wide = np.zeros(v.shape[:-1] + (2 * v.shape[-1] + 1,), dtype=v.dtype)
        wide[..., 1::2] = v
        return ops.upload(backend, wide)[..., 1::2]
    if layout == "offset":
        # C-contiguous values starting at element 1 of their buffer: x[1:] of a flat array
        flat = np.concatenate([np.zeros(1, dtype=v.dtype), v.reshape(-1)])
        return ops.upload(backend, flat)[1:].reshape(v.shape)
    if layout == "rows":
        # the first columns of a wider array: rows padded, last axis sliced
        wide = np.zeros(v.shape[:-1] + (v.shape[-1] + 3,), dtype=v.dtype)
        wide[..., : v.shape[-1]] = v
        return ops.upload(backend, wide)[..., : v.shape[-1]]
    return ops.upload(backend, _c(v))


def upload_args(example: Example, backend: Any, dtype: np.dtype, reference: bool) -> list[Any]:
    """Materialise an example's arguments on ``backend`` (dense float64 for the reference)."""
    out: list[Any] = []
    for a in example.args:
        if isinstance(a, list) and a and isinstance(a[0], Arr):
            out.append([_one(x, backend, dtype, reference) for x in a])
        else:
            out.append(_one(a, backend, dtype, reference))
    return out


def _one(a: Any, backend: Any, dtype: np.dtype, reference: bool) -> Any:
    if isinstance(a, float) and reference:
        # the backend computes with the scalar in its compute dtype (float32 for half)
        return float(compute_dtype(np.dtype(dtype)).type(a))
    if not isinstance(a, Arr):
        return a
    if reference:
        return ops.upload(backend, _c(reference_value(a, dtype)))
    return upload(a, backend, dtype)


def tensors(args: list[Any]) -> list[Tensor]:
    """Every Tensor among ``args`` (lists included), in order."""
    out: list[Tensor] = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif isinstance(a, list):
            out.extend(x for x in a if isinstance(x, Tensor))
    return out


def _c(v: np.ndarray) -> np.ndarray:
    """C-contiguous copy that keeps 0-d arrays 0-d (``np.ascontiguousarray`` makes them 1-d)."""
    return np.array(v, order="C", copy=True)
