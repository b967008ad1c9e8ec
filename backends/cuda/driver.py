"""The CUDA driver through ``cuda.bindings``: a time-bounded probe and checked calls.

The probe answers "is there an NVIDIA driver and GPU here, and what is it?" without ever
raising and within :data:`PROBE_TIMEOUT_S` (``RIFTCO_CUDA_PROBE_TIMEOUT``): ``cuInit`` runs
in a daemon thread, because on a broken install it can hang, and listing backends must not.
Where no driver library exists (CI, laptops) ``cuda.bindings`` fails at once and the reason
says so.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from riftco.errors import DeviceLostError, RiftcoError

PROBE_TIMEOUT_ENV = "RIFTCO_CUDA_PROBE_TIMEOUT"
PROBE_TIMEOUT_S = 15.0


class CudaDriverError(RiftcoError, RuntimeError):
    """A CUDA driver call failed (launch failure, illegal address, ...); names the call."""


class CudaOutOfMemoryError(CudaDriverError, MemoryError):
    """The device has no room for an allocation (pooled buffers were already returned)."""


class CudaDeviceLostError(CudaDriverError, DeviceLostError):
    """A sticky error: the context can run nothing more in this process (CUDA keeps
    returning the same error from every call), so riftco stops instead of cascading."""


#: Errors after which the context is unusable until the process exits (the CUDA driver
#: API documents these as persisting: "the process must be terminated and relaunched").
STICKY = frozenset(
    {
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_LAUNCH_FAILED",
        "CUDA_ERROR_LAUNCH_TIMEOUT",
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        "CUDA_ERROR_INVALID_PC",
        "CUDA_ERROR_ASSERT",
        "CUDA_ERROR_ECC_UNCORRECTABLE",
        "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    }
)


@functools.lru_cache(maxsize=1)
def load() -> tuple[Any, str]:
    """``(cuda.bindings.driver, "")`` or ``(None, reason)``."""
    try:
        from cuda.bindings import driver
    except Exception as exc:
        return None, (
            f"cuda.bindings is not importable ({type(exc).__name__}: {exc}); "
            "pip install 'riftco[cuda]' (cuda-bindings, nvidia-cuda-nvrtc)"
        )
    return driver, ""


def error_name(drv: Any, err: Any) -> str:
    try:
        _, name = drv.cuGetErrorName(err)
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return str(err)


def error_text(drv: Any, err: Any) -> str:
    """``CUDA_ERROR_X (code N: the driver's description)``: the name alone hides which
    call of several failed, the number is what NVIDIA's tables list."""
    name = error_name(drv, err)
    try:
        code = int(err)
    except (TypeError, ValueError):
        code = None
    try:
        _, desc = drv.cuGetErrorString(err)
        desc = desc.decode() if isinstance(desc, bytes) else str(desc or "")
    except Exception:
        desc = ""
    inner = "; ".join(p for p in (f"code {code}" if code is not None else "", desc) if p)
    return f"{name} ({inner})" if inner else name


def error_class(name: str) -> type[CudaDriverError]:
    if "OUT_OF_MEMORY" in name:
        return CudaOutOfMemoryError
    return CudaDeviceLostError if name in STICKY else CudaDriverError


def check(drv: Any, result: tuple[Any, ...], what: str) -> Any:
    """The value(s) of a ``cuda.bindings`` call's result tuple; raise on a non-zero status,
    naming the call and the CUresult."""
    err = result[0]
    if err != drv.CUresult.CUDA_SUCCESS:
        raise error_class(error_name(drv, err))(f"[cuda] {what} failed: {error_text(drv, err)}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


@dataclass(frozen=True)
class DeviceProps:
    """What riftco needs to know about one GPU (read once by the probe)."""

    index: int
    name: str
    capability: tuple[int, int]
    total_memory: int
    multiprocessors: int
    max_threads_per_block: int
    max_shared_per_block: int
    l2_bytes: int
    memory_pools: bool

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


@dataclass(frozen=True)
class Probe:
    """The probe's result: devices found, driver version, or the reason there are none."""

    devices: tuple[DeviceProps, ...] = ()
    driver_version: int = 0
    reason: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _attr(drv: Any, dev: Any, name: str) -> int:
    attr = getattr(drv.CUdevice_attribute, name)
    return int(check(drv, drv.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({name})"))


def _read_devices(drv: Any) -> Probe:
    check(drv, drv.cuInit(0), "cuInit")
    version = int(check(drv, drv.cuDriverGetVersion(), "cuDriverGetVersion"))
    count = int(check(drv, drv.cuDeviceGetCount(), "cuDeviceGetCount"))
    found = []
    for i in range(count):
        dev = check(drv, drv.cuDeviceGet(i), "cuDeviceGet")
        raw = check(drv, drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
        name = raw.split(b"\0", 1)[0].decode(errors="replace").strip()
        a = functools.partial(_attr, drv, dev)
        found.append(
            DeviceProps(
                index=i,
                name=name,
                capability=(
                    a("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                    a("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"),
                ),
                total_memory=int(check(drv, drv.cuDeviceTotalMem(dev), "cuDeviceTotalMem")),
                multiprocessors=a("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
                max_threads_per_block=a("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
                max_shared_per_block=a("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
                l2_bytes=a("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
                memory_pools=bool(a("CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED")),
            )
        )
    if not found:
        return Probe((), version, "the CUDA driver reports no GPU (cuDeviceGetCount = 0)")
    return Probe(tuple(found), version, "")


def _timeout() -> float:
    try:
        return max(0.1, float(os.environ.get(PROBE_TIMEOUT_ENV, PROBE_TIMEOUT_S)))
    except ValueError:
        return PROBE_TIMEOUT_S


def _no_driver_reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "DynamicLibNotFound" in type(exc).__name__ or "driver library" in text:
        return f"no NVIDIA driver: libcuda is not installed here ({text})"
    return f"CUDA driver probe failed: {type(exc).__name__}: {text}"


@functools.lru_cache(maxsize=1)
def probe() -> Probe:
    """Devices present, read once per process; never raises, never waits past the timeout."""
    drv, reason = load()
    if drv is None:
        return Probe(reason=reason)
    box: dict[str, Probe] = {}

    def run() -> None:
        try:
            box["probe"] = _read_devices(drv)
        except CudaDriverError as exc:
            msg = str(exc).removeprefix("[cuda] ")
            if "NO_DEVICE" in msg:
                msg = f"no NVIDIA GPU visible to the driver ({msg})"
            box["probe"] = Probe(reason=msg)
        except BaseException as exc:  # the driver library is missing, or worse
            box["probe"] = Probe(reason=_no_driver_reason(exc))

    limit = _timeout()
    worker = threading.Thread(target=run, name="riftco-cuda-probe", daemon=True)
    worker.start()
    worker.join(limit)
    if "probe" not in box:
        return Probe(reason=f"the CUDA driver did not answer within {limit:g} s (cuInit hung)")
    return box["probe"]
