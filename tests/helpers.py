"""Shared test helpers: a comparison that says where and by how much, and runtime plugins.

Import as ``from helpers import assert_close`` (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from riftco.hookspecs import hookimpl


def to_numpy(x: Any) -> np.ndarray:
    """Tensors (anything with ``.numpy()``), arrays, numbers and lists as a numpy array."""
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        return np.asarray(x.numpy())
    return np.asarray(x)


def assert_close(
    actual: Any,
    expected: Any,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    msg: str = "",
    check_dtype: Any = None,
) -> None:
    """``|actual - expected| <= atol + rtol * |expected|`` elementwise, shapes equal.

    NaN must match NaN and infinities must match exactly. On failure the message names the
    largest absolute and relative errors, the index of the worst element and both values
    there. ``check_dtype`` (a dtype) also checks the dtype of ``actual``.
    """
    a = to_numpy(actual)
    e = to_numpy(expected)
    prefix = f"{msg}: " if msg else ""
    if check_dtype is not None and a.dtype != np.dtype(check_dtype):
        raise AssertionError(f"{prefix}dtype {a.dtype} != expected {np.dtype(check_dtype)}")
    if a.shape != e.shape:
        raise AssertionError(f"{prefix}shape {a.shape} != expected {e.shape}")
    if a.size == 0:
        return
    a64 = a.astype(np.float64)
    e64 = e.astype(np.float64)
    nan_a, nan_e = np.isnan(a64), np.isnan(e64)
    if (nan_a != nan_e).any():
        idx = np.unravel_index(int(np.argmax(nan_a != nan_e)), a.shape)
        raise AssertionError(
            f"{prefix}NaN mismatch at index {idx}: actual {a64[idx]!r}, expected {e64[idx]!r}"
        )
    inf_e = np.isinf(e64)
    if (np.isinf(a64) != inf_e).any() or (a64[inf_e] != e64[inf_e]).any():
        bad = (np.isinf(a64) != inf_e) | (inf_e & (a64 != e64))
        idx = np.unravel_index(int(np.argmax(bad)), a.shape)
        raise AssertionError(
            f"{prefix}infinity mismatch at index {idx}: actual {a64[idx]!r}, expected {e64[idx]!r}"
        )
    finite = ~(nan_e | inf_e)
    diff = np.where(finite, np.abs(a64 - e64), 0.0)
    rel = diff / np.maximum(np.abs(e64), np.finfo(np.float64).tiny)
    bad = diff > atol + rtol * np.abs(np.where(finite, e64, 0.0))
    if bad.any():
        worst = np.unravel_index(int(np.argmax(np.where(bad, diff, -1.0))), a.shape)
        raise AssertionError(
            f"{prefix}{int(bad.sum())} of {a.size} elements differ beyond "
            f"rtol={rtol:g}, atol={atol:g}; max abs err {diff.max():.3e}, "
            f"max rel err {rel[finite].max():.3e}; worst at index {worst}: "
            f"actual {a64[worst]!r}, expected {e64[worst]!r}"
        )


def plugin_for(*classes: type) -> Any:
    """A plugin object whose ``riftco_backends`` hook returns ``classes`` (for ``register``)."""

    class _Plugin:
        @hookimpl
        def riftco_backends(self) -> list[type]:
            return list(classes)

    return _Plugin()


def add_backend(registry: Any, cls: type, distribution: tuple[str, str] = ("tests", "0")) -> Any:
    """Register ``cls`` in ``registry`` at runtime and return its device-0 instance."""
    registry.register(plugin_for(cls), name=f"test-{cls.name}", distribution=distribution)
    return registry.instance(cls.name, 0)
