"""NVRTC: the shaders/ sources compiled to CUBIN for one GPU architecture.

CUBIN, not PTX: a driver refuses PTX written by a newer compiler than itself (pip's NVRTC
is usually newer than the machine's driver), while machine code for the device's own
architecture loads on any driver of the same major version. NVRTC needs no GPU and no
driver, so the same function checks every kernel family in CI
(tests/backends/cuda/test_cuda_compile.py).

The NVRTC library comes from the ``nvidia-cuda-nvrtc`` wheel (or a CUDA toolkit), found by
``cuda.bindings`` through ``cuda.pathfinder``; without it :func:`nvrtc_status` says why.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Sequence
from typing import Any

from riftco.errors import KernelCompileError
from riftco.kernel_host.build_log import BuildLog
from riftco.kernel_host.cache import KernelCache, cache_enabled

#: Options every program is built with. No fast math: the kernels' IEEE behaviour is what
#: conformance checks (``--use_fast_math`` would flush denormals and approximate exp/log).
BASE_OPTIONS: tuple[str, ...] = ("--std=c++17", "-default-device")

_lock = threading.Lock()
_cubins: dict[tuple[str, tuple[str, ...], str], tuple[bytes, BuildLog]] = {}


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Any, str]:
    try:
        from cuda.bindings import nvrtc
    except Exception as exc:  # pragma: no cover - depends on the environment
        return None, (
            f"cuda.bindings is not importable ({type(exc).__name__}: {exc}); "
            "pip install 'riftco[cuda]'"
        )
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # the wheel is there but libnvrtc.so is not
        return None, (
            f"NVRTC library not found ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
            "pip install nvidia-cuda-nvrtc"
        )
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return None, f"nvrtcVersion failed: {err!r}"
    return nvrtc, ""


def nvrtc_status() -> str:
    """Empty when NVRTC can compile here, else the reason it cannot."""
    return _load()[1]


def nvrtc_version() -> tuple[int, int]:
    """NVRTC's ``(major, minor)``; raises ``KernelCompileError`` when NVRTC is missing."""
    nvrtc = _require()
    _, major, minor = nvrtc.nvrtcVersion()
    return int(major), int(minor)


def supported_archs() -> list[int]:
    """The ``sm_XY`` targets this NVRTC can emit, as integers ``XY`` (e.g. 90)."""
    nvrtc = _require()
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    return [int(a) for a in archs] if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else []


def arch_for(capability: tuple[int, int]) -> str:
    """The CUBIN target of a device of compute capability ``(major, minor)``: ``sm_90``."""
    major, minor = capability
    return f"sm_{int(major)}{int(minor)}"


def compile_options(arch: str, extra: Sequence[str] = ()) -> list[str]:
    """NVRTC's option list for a CUBIN of ``arch`` (``sm_XY``; ``compute_XY`` is refused)."""
    if not re.fullmatch(r"sm_\d{2,3}[af]?", arch):
        raise KernelCompileError(
            f"[compile] CUDA target {arch!r} must be a real architecture such as 'sm_90' "
            "(riftco loads CUBIN, never PTX)"
        )
    return [f"-arch={arch}", *BASE_OPTIONS, *extra]


def _require() -> Any:
    nvrtc, reason = _load()
    if nvrtc is None:
        raise KernelCompileError(f"[compile] NVRTC is unavailable: {reason}")
    return nvrtc


def _log(nvrtc: Any, prog: Any) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0").decode("utf-8", errors="replace").strip()


def kernel_cache() -> KernelCache | None:
    """The on-disk cache of CUBINs (one folder per NVRTC version, the target architecture
    being part of each entry's options), or None when it is turned off."""
    if not cache_enabled():
        return None
    major, minor = nvrtc_version()
    return KernelCache("cuda", f"NVRTC {major}.{minor}")


def compile_cubin(source: str, name: str, arch: str, extra: Sequence[str] = ()) -> bytes:
    """The CUBIN of ``source`` for ``arch`` (see :func:`build`)."""
    return build(source, name, arch, extra)[0]


def build(source: str, name: str, arch: str, extra: Sequence[str] = ()) -> tuple[bytes, BuildLog]:
    """The CUBIN of ``source`` for ``arch`` and what NVRTC said; ``KernelCompileError``
    naming ``name`` with NVRTC's log otherwise. Results are kept per (source, options) in
    this process and in the on-disk kernel cache (keyed by NVRTC's version too), so a
    family is compiled once per machine, not once per process."""
    options = tuple(compile_options(arch, extra))
    key = (source, options, arch)
    with _lock:
        cached = _cubins.get(key)
    if cached is not None:
        return cached
    label = f"{name} for CUDA {arch}"
    cache = kernel_cache()
    if cache is not None:
        entry = cache.get_or_build(
            source, options, label, lambda: _nvrtc_compile(source, name, arch, options)
        )
        cubin, log = entry.binary, entry.log
    else:
        cubin, log = _nvrtc_compile(source, name, arch, options)
    built = (cubin, BuildLog.parse(log, label))
    with _lock:
        _cubins[key] = built
    return built


def _nvrtc_compile(
    source: str, name: str, arch: str, options: tuple[str, ...]
) -> tuple[bytes, str]:
    nvrtc = _require()
    file_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "program"
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{file_name}.cu".encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise KernelCompileError(f"[compile] nvrtcCreateProgram failed for {name}: {err!r}")
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise KernelCompileError(
                f"[compile] {name} failed to build for CUDA {arch} "
                f"({' '.join(options)}):\n{_log(nvrtc, prog)}"
            )
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size == 0:
            raise KernelCompileError(f"[compile] {name}: NVRTC produced no CUBIN for {arch}")
        cubin = b"\0" * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise KernelCompileError(f"[compile] {name}: nvrtcGetCUBIN failed: {err!r}")
        return cubin, _log(nvrtc, prog)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
