"""The Metal backend: the portable kernels of ``riftco.shaders`` on Apple GPUs.

Two runtimes drive Metal (docs/METAL.md): riftco's own over the Objective-C runtime
(``objc_runtime.py``, through cffi; the default) and metalcompute (``runtime.py``).
``RIFTCO_METAL_RUNTIME=objc|metalcompute`` picks one; when the objc runtime cannot start
on a Mac the backend says why and uses metalcompute (a warning, and the device's
``runtime_why`` detail in ``riftco backends``), never silently.

Metal has no double, so this backend offers float32 (and int32 indices); it compiles each
kernel family with ``T = float``, ``IDX = int``. On a Mac it is available with priority 20,
so ``auto`` prefers it. Elsewhere it is listed unavailable with the reason.

``RIFTCO_METAL_STANDIN=1`` runs this very host code on Linux: the objc runtime on
``objc_fake.py`` (a fake Objective-C runtime and Metal over OpenCL), or with
``RIFTCO_METAL_RUNTIME=metalcompute`` the metalcompute runtime on ``standin.py``; it then
reports priority -2, so ``auto`` never picks a stand-in over a real device.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from riftco.backend import DeviceInfo
from riftco.dtypes import LOW_PRECISION
from riftco.env_values import flag
from riftco.errors import BackendUnavailableError
from riftco.kernel_host.backend import KernelBackend
from riftco.kernel_host.runtime import Runtime

from .runtime import MetalRuntime

STANDIN_ENV = "RIFTCO_METAL_STANDIN"
RUNTIME_ENV = "RIFTCO_METAL_RUNTIME"
RUNTIMES = ("objc", "metalcompute")
#: What a Mac user runs when metalcompute is missing (docs/METAL.md, "Installing").
INSTALL_HINT = (
    "pip install metalcompute (wheels: macOS 14+ on Apple silicon, Python 3.9-3.13; "
    "elsewhere pip builds it from source, which needs the Xcode command line tools)"
)


def _use_standin() -> bool:
    return flag(STANDIN_ENV, default=False)


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
            f"Metal is macOS-only (this is {sys.platform}); {STANDIN_ENV}=1 runs the "
            "Metal host code on an OpenCL stand-in"
        )
    try:
        import metalcompute
    except Exception as exc:
        return None, f"metalcompute is not importable ({exc}); {INSTALL_HINT}"
    return metalcompute, ""


@dataclass(frozen=True)
class RuntimeChoice:
    """Which runtime the backend uses and why (``riftco backends`` shows both)."""

    kind: str  # "objc" or "metalcompute"; "" when none can run
    why: str
    make: Callable[[int], Runtime] | None = None


def _fast_math() -> bool:
    """``RIFTCO_FAST_MATH`` (default off: the objc runtime compiles with safe math)."""
    from riftco.backends.opencl.runtime import fast_math_from_env

    return fast_math_from_env(default=False)


def _objc_factory(library_factory: Callable[[], Any]) -> Callable[[int], Runtime]:
    def make(index: int) -> Runtime:
        from .objc_runtime import ObjCMetalRuntime

        return ObjCMetalRuntime(library_factory(), index, fast_math=_fast_math())

    return make


def _metalcompute_choice(why: str) -> RuntimeChoice:
    mc, reason = load_metalcompute()
    if mc is None:
        return RuntimeChoice("", f"{why}; metalcompute: {reason}" if why else reason)
    return RuntimeChoice("metalcompute", why or "metalcompute", lambda i: MetalRuntime(mc, i))


def _system_objc_problem() -> str:
    """'' when this Mac's Objective-C runtime and a Metal device are reachable, else why."""
    try:
        from .objc import ffi, load_system_library

        library = load_system_library()
        device = library.create_system_default_device()
        if device == ffi.NULL:
            return "MTLCreateSystemDefaultDevice() returned nil"
        from .objc import ObjC

        ObjC(library).release(int(ffi.cast("uintptr_t", device)))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


_SYSTEM_PROBE: dict[str, str] = {}
#: No double on Metal. float16 is MSL's half; bfloat16 (with ml_dtypes) is 16-bit storage
#: converted by integer bit work (MSL's bfloat needs 3.1, the runtime asks for 2.3).
_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.int32)}) | LOW_PRECISION
_DTYPE_NAMES = tuple(sorted(dt.name for dt in _DTYPES))


def choose_runtime() -> RuntimeChoice:
    """The runtime ``RIFTCO_METAL_RUNTIME`` (default ``objc``) and the stand-in switch ask for."""
    raw = os.environ.get(RUNTIME_ENV, "").strip().lower()
    if raw and raw not in RUNTIMES:
        return RuntimeChoice("", f"{RUNTIME_ENV}={raw!r} must be one of {', '.join(RUNTIMES)}")
    kind = raw or "objc"
    said = f"{RUNTIME_ENV}={raw}" if raw else "the default"
    if kind == "metalcompute":
        return _metalcompute_choice(f"metalcompute ({said})")
    if _use_standin():
        from riftco.backends.opencl.runtime import enumerate_devices

        devices, error = enumerate_devices()
        if not devices:
            return RuntimeChoice("", f"{STANDIN_ENV} is set but {error}")

        def fake() -> Any:
            from .objc_fake import FakeObjC

            return FakeObjC()

        why = f"objc ({said}) on the fake Objective-C runtime over OpenCL ({STANDIN_ENV}=1)"
        return RuntimeChoice("objc", why, _objc_factory(fake))
    if sys.platform != "darwin":
        return RuntimeChoice("", (
            f"Metal is macOS-only (this is {sys.platform}); {STANDIN_ENV}=1 runs the Metal "
            "host code on a fake Objective-C runtime over OpenCL"
        ))  # fmt: skip
    if "problem" not in _SYSTEM_PROBE:
        _SYSTEM_PROBE["problem"] = _system_objc_problem()
    problem = _SYSTEM_PROBE["problem"]
    if not problem:
        from .objc import load_system_library

        return RuntimeChoice("objc", f"objc ({said})", _objc_factory(load_system_library))
    fallback = _metalcompute_choice(
        f"the objc runtime could not start ({problem}); using metalcompute"
    )
    if fallback.kind:
        warnings.warn(f"[metal] {fallback.why}", RuntimeWarning, stacklevel=2)
    return fallback


def _probe_priority() -> int:
    try:
        return -2 if _use_standin() else 20
    except Exception:
        return 20


class MetalBackend(KernelBackend):
    name: ClassVar[str] = "metal"
    priority: ClassVar[int] = _probe_priority()
    dtypes: ClassVar[frozenset[np.dtype]] = _DTYPES

    def __init__(
        self, device_index: int = 0, mc_module: Any = None, objc_library: Any = None
    ) -> None:
        """``mc_module`` (a metalcompute-like module) or ``objc_library`` (an
        ``objc.ObjCLibrary``, e.g. ``objc_fake.FakeObjC()``) fixes the runtime; by default
        :func:`choose_runtime` decides."""
        self._mc = mc_module
        self._objc_library = objc_library
        #: Which runtime runs this backend and why (as ``riftco backends`` says).
        self.runtime_kind = ""
        self.runtime_why = ""
        super().__init__(device_index)

    def make_runtime(self, device_index: int) -> Runtime:
        if self._mc is not None:
            self.runtime_kind, self.runtime_why = "metalcompute", "given metalcompute module"
            return MetalRuntime(self._mc, device_index)
        if self._objc_library is not None:
            from .objc_runtime import ObjCMetalRuntime

            self.runtime_kind, self.runtime_why = "objc", "given Objective-C library"
            return ObjCMetalRuntime(self._objc_library, device_index, fast_math=_fast_math())
        choice = choose_runtime()
        if choice.make is None:
            raise BackendUnavailableError(f"[metal] unavailable: {choice.why}")
        self.runtime_kind, self.runtime_why = choice.kind, choice.why
        return choice.make(device_index)

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
        choice = choose_runtime()
        if choice.make is None:
            return False, choice.why
        if choice.kind == "objc":
            return True, ""
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
        choice = choose_runtime()
        if choice.make is None:
            return []
        if choice.kind == "objc":
            return [_objc_device(choice)]
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
                "runtime_why": choice.why,
            }
            out.append(DeviceInfo(i, str(d.deviceName), _DTYPE_NAMES, details))
        return out


def _objc_device(choice: RuntimeChoice) -> DeviceInfo:
    """The system default device as the objc runtime sees it (its facts, read once)."""
    assert choice.make is not None
    runtime = choice.make(0)
    try:
        facts = runtime.facts  # type: ignore[attr-defined]
        details = {
            "unified_memory": bool(facts["unified_memory"]),
            "working_set_bytes": int(facts["working_set_bytes"]),
            "max_threadgroup_memory": int(facts["max_threadgroup_memory"]),
            "runtime": "objc",
            "runtime_why": choice.why,
            "objc": runtime.library_description,  # type: ignore[attr-defined]
        }
        return DeviceInfo(0, runtime.device_name, _DTYPE_NAMES, details)
    finally:
        runtime.close()  # type: ignore[attr-defined]
