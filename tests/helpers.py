"""Shared test helpers: a comparison that says where and by how much, runtime plugins, and a
primitives-only backend that refuses views.

Import as ``from helpers import assert_close`` (``tests/conftest.py`` puts ``tests/`` on
``sys.path`` for every subfolder).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import riftco
from riftco.backend import FUSED_OPS, PRIMITIVE_OPS
from riftco.backends.cpu.backend import CPUBackend
from riftco.errors import RiftcoError
from riftco.hookspecs import hookimpl
from riftco.tensor import Tensor


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


def native_backend_module() -> Any:
    """``riftco.backends.native.backend``, skipping the calling test module where the native
    backend cannot load (no cffi, no C compiler): the native tests' first lines, once."""
    native_mod = pytest.importorskip("riftco.backends.native.backend")
    ok, why = native_mod.NativeBackend.is_available()
    if not ok:
        pytest.skip(f"native backend unavailable: {why}", allow_module_level=True)
    return native_mod


def device_or_skip(name: str) -> riftco.Device:
    """The device ``name``, or skip the test saying why it is unavailable."""
    try:
        return riftco.device(name)
    except RiftcoError as err:
        pytest.skip(f"{name} backend unavailable: {err}")


def cpu_native_opencl() -> list[str]:
    """``cpu`` and ``native``, and ``opencl`` where a device is there: the backends the
    optimizer tests run in float32 (parametrize lists are built at collection)."""
    names = ["cpu", "native"]
    entry = riftco.get_registry().entries.get("opencl")
    if entry is not None and entry.available and entry.devices():
        names.append("opencl")
    return names


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


#: Primitives that move data: by contract they may receive views (``copy_strided`` exists
#: to read them), so the dense-only spy leaves them alone.
TRANSFER_OPS = frozenset(
    {"allocate", "from_numpy", "to_numpy", "copy_strided", "synchronize", "memory_stats"}
)


def _dense_only(name: str) -> Any:
    base = getattr(CPUBackend, name)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        for arg in args:
            for x in arg if isinstance(arg, (list, tuple)) else (arg,):
                if isinstance(x, Tensor) and not x.is_dense:
                    raise AssertionError(f"{name} received a non-dense operand {x}")
        return base(self, *args, **kwargs)

    return method


def primitives_only_backend(name: str) -> type:
    """A CPU backend named ``name`` with no fused op (each runs as core's composite) and
    ``accepts_strided = False``, whose primitives raise on any non-dense operand: a spy
    for "core hands such a backend dense tensors only"."""
    return type(
        f"PrimitivesOnly[{name}]",
        (CPUBackend,),
        {
            "name": name,
            "accepts_strided": False,
            **{op: None for op in FUSED_OPS},  # None is not callable: every fused op composite
            **{op: _dense_only(op) for op in PRIMITIVE_OPS if op not in TRANSFER_OPS},
        },
    )


def backend_device(name: str, monkeypatch: pytest.MonkeyPatch) -> riftco.Device:
    """Device 0 of backend ``name`` (``metal`` runs on the OpenCL stand-in:
    RIFTCO_METAL_STANDIN=1), or skip the test saying why it cannot run here."""
    if name == "metal":
        monkeypatch.setenv("RIFTCO_METAL_STANDIN", "1")
    entry = riftco.get_registry().entries.get(name)
    if entry is None or not entry.available or not entry.devices():
        pytest.skip(f"{name} cannot run here: {entry.reason if entry else 'not registered'}")
    return riftco.device(name)


def run_in_threads(work: Any, n: int, switch_interval: float = 1e-6) -> dict[int, Any]:
    """``work(k)`` for k < n in n threads at once, with the interpreter switching threads
    every ``switch_interval`` seconds (so they interleave inside each call): each one's
    result, or the exception it raised."""
    import sys
    import threading

    results: dict[int, Any] = {}

    def run(k: int) -> None:
        try:
            results[k] = work(k)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            results[k] = exc

    old = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval)
    try:
        threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    return results
