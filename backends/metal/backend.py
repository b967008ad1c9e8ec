"""The Metal backend: the portable kernels of ``riftco.shaders`` on Apple GPUs via metalcompute.

Metal has no double, so this backend offers float32 (and int32 indices); it compiles each
kernel family with ``T = float``, ``IDX = int``. On a Mac with ``metalcompute`` installed it
is available with priority 20, so ``auto`` prefers it. Elsewhere it is listed unavailable
with the reason.

``RIFTCO_METAL_STANDIN=1`` (or ``MetalBackend(mc_module=standin)``) runs this very host
code on ``standin.py``, a metalcompute look-alike over OpenCL that dispatches with Metal's
rules; it then reports priority -2, so ``auto`` never picks a stand-in over a real device.
See docs/METAL.md for what that does and does not verify.
"""

from __future__ import annotations

import os
import sys
from typing import Any, ClassVar

import numpy as np
from riftco.backend import DeviceInfo
from riftco.kernel_host.backend import KernelBackend

from .runtime import MetalRuntime

STANDIN_ENV = "RIFTCO_METAL_STANDIN"
#: What a Mac user runs when metalcompute is missing (docs/METAL.md, "Installing").
INSTALL_HINT = (
    "pip install metalcompute (wheels: macOS 14+ on Apple silicon, Python 3.9-3.13; "
    "elsewhere pip builds it from source, which needs the Xcode command line tools)"
)


def _use_standin() -> bool:
    return os.environ.get(STANDIN_ENV, "") not in ("", "0", "false", "no")


def load_metalcompute() -> tuple[Any, str]:
    """``(module, "")`` for the metalcompute surface to use, or ``(None, reason)``."""
    if _use_standin():
        try:
            from . import standin
        except Exception as exc:
            return None, f"{STANDIN_ENV} is set but the stand-in failed: {exc}"
        devices, error = standin.clrt.enumerate_devices()
        return (standin, "") if devices else (None, f"{STANDIN_ENV} is set but {error}")
    if sys.platform != "darwin":
        return None, (
            f"metalcompute is macOS-only (this is {sys.platform}); {STANDIN_ENV}=1 runs the "
            "Metal host code on an OpenCL stand-in"
        )
    try:
        import metalcompute
    except Exception as exc:
        return None, f"metalcompute is not importable ({exc}); {INSTALL_HINT}"
    return metalcompute, ""


def _probe_priority() -> int:
    try:
        return -2 if _use_standin() else 20
    except Exception:
        return 20


class MetalBackend(KernelBackend):
    name: ClassVar[str] = "metal"
    priority: ClassVar[int] = _probe_priority()
    dtypes: ClassVar[frozenset[np.dtype]] = frozenset({np.dtype(np.float32), np.dtype(np.int32)})

    def __init__(self, device_index: int = 0, mc_module: Any = None) -> None:
        self._mc = mc_module
        super().__init__(device_index)

    def make_runtime(self, device_index: int) -> MetalRuntime:
        mc = self._mc
        if mc is None:
            mc, reason = load_metalcompute()
            if mc is None:
                from riftco.errors import BackendUnavailableError

                raise BackendUnavailableError(f"[metal] unavailable: {reason}")
        return MetalRuntime(mc, device_index)

    def transfer_stats(self) -> dict[str, int]:
        """The kernel layer's counts plus the runtime's host waits (``drains``) and the
        uploads that needed none (``upload_waits_skipped``): see docs/METAL.md."""
        stats = super().transfer_stats()
        stats.update(getattr(self.runtime, "counters", {}))
        return stats

    def reset_transfer_stats(self) -> None:
        super().reset_transfer_stats()
        counters = getattr(self.runtime, "counters", {})
        for key in counters:
            counters[key] = 0

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        mc, reason = load_metalcompute()
        if mc is None:
            return False, reason
        try:
            if not mc.get_devices():
                return False, "metalcompute reports no Metal device"
        except Exception as exc:
            return False, f"metalcompute.get_devices() failed: {exc}"
        return True, ""

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        mc, _ = load_metalcompute()
        if mc is None:
            return []
        out = []
        for i, d in enumerate(mc.get_devices()):
            details = {
                "unified_memory": bool(d.hasUnifiedMemory),
                "working_set_bytes": int(d.recommendedWorkingSetSize),
                "runtime": "stand-in (OpenCL)"
                if getattr(mc, "__name__", "").endswith("standin")
                else "metalcompute",
            }
            out.append(DeviceInfo(i, str(d.deviceName), ("float32", "int32"), details))
        return out
