"""Inputs: drawn once on the host, uploaded twice (backend under test, CPU float64).

A case describes each tensor argument as an :class:`Arr`: float64 host values plus the
*layout* to present them in. Non-dense layouts are built on the device with Tensor views
(``transpose``, ``permute``, ``broadcast_to``, slicing) so the backend sees real strided
operands (core densifies them for backends that do not accept strides). The reference
always receives the same logical values, rounded to the tested dtype first, so the
comparison measures the backend's arithmetic and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

LAYOUTS = ("dense", "transposed", "permuted", "broadcast", "sliced")


@dataclass
class Arr:
    """One tensor argument. ``kind``: "float" (tested dtype), "index" or "mask"."""

    value: np.ndarray
    kind: str = "float"
    layout: str = "dense"
    index_dtype: np.dtype | None = None  # for kind == "index"

    def __post_init__(self) -> None:
        self.value = np.asarray(self.value)
        if self.layout == "broadcast":
            axis = broadcast_axis(self.value.shape)
            if axis is None:  # nothing to broadcast along: still present a strided view
                self.layout = "sliced"
            else:
                first = np.take(self.value, [0], axis=axis)
                self.value = np.broadcast_to(first, self.value.shape).copy()

    def describe(self) -> str:
        lay = "" if self.layout == "dense" else f" {self.layout}"
        return f"{tuple(self.value.shape)}{lay}"


@dataclass
class Example:
    """One set of arguments for an op; ``label`` names edge cases in reports."""

    label: str
    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        parts = []
        for a in self.args:
            if isinstance(a, Arr):
                parts.append(a.describe())
            elif isinstance(a, list) and a and isinstance(a[0], Arr):
                parts.append("[" + ", ".join(x.describe() for x in a) + "]")
            else:
                parts.append(repr(a))
        parts += [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.label}: ({', '.join(parts)})"


def broadcast_axis(shape: tuple[int, ...]) -> int | None:
    """The axis a "broadcast" layout repeats along: the first leading axis of size > 1.

    Never the last axis, so a row-wise op (softmax, LayerNorm) still sees varied rows
    instead of a degenerate constant row."""
    for axis, dim in enumerate(shape[:-1]):
        if dim > 1:
            return axis
    return None


def host_value(arr: Arr, dtype: np.dtype) -> np.ndarray:
    """The logical values as the backend under test will hold them."""
    if arr.kind == "index":
        return arr.value.astype(arr.index_dtype or np.int32)
    return arr.value.astype(dtype)


def reference_value(arr: Arr, dtype: np.dtype) -> np.ndarray:
    """The same values for the CPU reference: rounded to ``dtype``, then widened."""
    v = host_value(arr, dtype)
    return v if arr.kind == "index" else v.astype(np.float64)


def upload(arr: Arr, backend: Any, dtype: np.dtype) -> Any:
    """Put ``arr`` on ``backend`` in its layout (views are built on the device)."""
    v = host_value(arr, dtype)
    layout = arr.layout
    if layout in ("transposed", "permuted") and v.ndim < 2:
        layout = "sliced"
    if layout == "transposed":
        return backend.from_numpy(_c(np.swapaxes(v, -1, -2))).transpose(-1, -2)
    if layout == "permuted":
        a0, a1 = (1, 2) if v.ndim >= 3 else (0, 1)
        return backend.from_numpy(_c(np.swapaxes(v, a0, a1))).transpose(a0, a1)
    if layout == "broadcast":
        axis = broadcast_axis(v.shape)
        if axis is not None:
            return backend.from_numpy(_c(np.take(v, [0], axis=axis))).broadcast_to(v.shape)
        return backend.from_numpy(_c(v))
    if layout == "sliced" and v.ndim >= 1:
        # every other element of a wider buffer, starting at offset 1: strided and offset
        shape = v.shape[:-1] + (2 * v.shape[-1] + 1,)
        wide = np.zeros(shape, dtype=v.dtype)
        wide[..., 1::2] = v
        return backend.from_numpy(wide)[..., 1::2]
    return backend.from_numpy(_c(v))


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
        return float(np.dtype(dtype).type(a))  # the backend sees the scalar in its dtype
    if not isinstance(a, Arr):
        return a
    if reference:
        return backend.from_numpy(_c(reference_value(a, dtype)))
    return upload(a, backend, dtype)


# -- value generators shared by the case tables ------------------------------------------------
def normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return rng.standard_normal(shape) * scale


def log_uniform(
    rng: np.random.Generator, shape: tuple[int, ...], lo: float, hi: float
) -> np.ndarray:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size=shape))


def signed_away_from_zero(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return log_uniform(rng, shape, 0.1, 10.0) * rng.choice([-1.0, 1.0], size=shape)


def grid(rng: np.random.Generator, shape: tuple[int, ...], levels: int = 5) -> np.ndarray:
    """Values on a coarse grid so ties and equalities really occur."""
    return rng.integers(-levels, levels + 1, size=shape).astype(np.float64) / 2.0


def _c(v: np.ndarray) -> np.ndarray:
    """C-contiguous copy that keeps 0-d arrays 0-d (``np.ascontiguousarray`` makes them 1-d)."""
    return np.array(v, order="C", copy=True)
