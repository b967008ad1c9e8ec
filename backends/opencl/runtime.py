"""The OpenCL runtime: one in-order queue per device, over pyopencl.

Devices are enumerated across every platform (GPUs and accelerators first, in platform
order, then CPU devices such as PoCL), so ``opencl:0`` is the best device present.
Contexts and compiled programs are shared per device and source, so several backend
instances (e.g. tests at different group sizes) compile each program once.

Launch cost matters for small training steps: kernel objects are created once per
program and name, arguments are set with ``set_args`` and launched with an explicit
local size, and parameter buffers are built with ``COPY_HOST_PTR`` (no extra enqueue).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from riftco.errors import BackendUnavailableError, KernelCompileError
from riftco.kernel_host.build_log import BuildLog, capture_compiler_output
from riftco.kernel_host.cache import KernelCache, cache_enabled
from riftco.kernel_host.runtime import KernelsByName, RuntimeCapabilities, checked_group_size

from .pocl import cpu_rank, pocl_version

try:  # pyopencl is optional: the backend reports itself unavailable without it
    import pyopencl as cl
except Exception as exc:  # pragma: no cover - depends on the environment
    cl = None
    IMPORT_ERROR = f"pyopencl is not importable ({type(exc).__name__}: {exc})"
else:
    IMPORT_ERROR = ""

#: The largest group a kernel may see: reduction arrays are sized for 1024 threads.
MAX_GROUP = 1024
GROUP_ENV = "RIFTCO_OPENCL_GROUP_SIZE"
FAST_MATH_ENV = "RIFTCO_FAST_MATH"
#: Metal compiles with fast math unless told otherwise; these make an OpenCL compiler
#: assume the same (no NaN or infinity, reassociation, relaxed builtins), so a kernel that
#: only works with IEEE specials fails on Linux first. PoCL (clang) honours them: it folds
#: ``x != x`` to false under either flag (checked in tests/kernels/test_kernel_specials.py).
FAST_MATH_OPTIONS = ("-cl-fast-relaxed-math", "-cl-finite-math-only")


_PROBE_SOURCE = "__kernel void riftco_probe(__global float* x) { x[get_global_id(0)] = 1.0f; }"


@functools.lru_cache(maxsize=1)
def enumerate_devices() -> tuple[list[Any], str]:
    """``(devices, error)``: every usable OpenCL device, GPUs first, then CPU devices
    ranked by :func:`pocl.cpu_rank` (vendor runtimes, then the newest PoCL and LLVM);
    ``error`` when none.

    Each device must build a one-line probe kernel: an ICD whose compiler cannot target
    this CPU (PoCL built on an LLVM too old for the host reports "unknown target CPU
    'generic'") would otherwise be picked as ``opencl:0`` and fail on the first op.
    Unusable devices are left out and named in :data:`BROKEN`.
    """
    BROKEN.clear()
    if cl is None:
        return [], IMPORT_ERROR
    try:
        platforms = cl.get_platforms()
    except Exception as exc:  # clGetPlatformIDs fails with -1001 when no ICD is installed
        return [], f"no OpenCL platform ({type(exc).__name__}: {exc})"
    found: list[Any] = []
    for platform in platforms:
        try:
            devices = platform.get_devices()
        except Exception:  # a broken platform must not hide the others
            continue
        for device in devices:
            problem = _probe_build(device)
            if problem:
                BROKEN[f"{device.name.strip()} ({platform.version.strip()})"] = problem
            else:
                found.append(device)
    if not found:
        detail = "; ".join(f"{k}: {v}" for k, v in BROKEN.items())
        return [], "no usable OpenCL device" + (f" ({detail})" if detail else "")
    gpu = [d for d in found if not d.type & cl.device_type.CPU]
    # the same CPU may come twice (Debian's PoCL and the pip wheel's): best first (pocl.py)
    cpu = sorted((d for d in found if d.type & cl.device_type.CPU), key=cpu_rank)
    return gpu + cpu, ""


#: Devices that failed the probe build, with the compiler's complaint.
BROKEN: dict[str, str] = {}


def _probe_build(device: Any) -> str:
    said: list[str] = []
    try:
        with capture_compiler_output(said, duplicates=(cl.CompilerWarning,)):
            cl.Program(cl.Context([device]), _PROBE_SOURCE).build()
    except Exception as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if "error" in ln.lower()]
        return (lines[-1] if lines else str(exc).strip().splitlines()[0])[:200]
    return ""


def device_identity(device: Any) -> str:
    """Everything about a device and its driver that changes a compiled program (the key of
    its kernel cache folder)."""
    platform = device.platform
    return " | ".join(
        str(x).strip()
        for x in (
            platform.name, platform.version, device.name, device.version,
            device.driver_version,
        )
    )  # fmt: skip


def kernel_cache(device: Any) -> KernelCache | None:
    """The on-disk cache of ``device``'s compiled programs, or None when it is turned off."""
    return KernelCache("opencl", device_identity(device)) if cache_enabled() else None


def is_gpu(device: Any) -> bool:
    return not device.type & cl.device_type.CPU


def has_fp64(device: Any) -> bool:
    return "cl_khr_fp64" in device.extensions.split()


def fast_math_from_env(default: bool = False) -> bool:
    """``RIFTCO_FAST_MATH``: 1/true/yes/on turns fast math on, 0/false/no/off off, unset
    (or empty) leaves ``default``; anything else is an error naming the variable."""
    raw = os.environ.get(FAST_MATH_ENV, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise BackendUnavailableError(
        f"[opencl] {FAST_MATH_ENV}={os.environ[FAST_MATH_ENV]!r} must be 1 or 0 (true/false)"
    )


def group_size_for(device: Any, requested: int | None = None) -> int:
    """The launch group size: ``requested`` or RIFTCO_OPENCL_GROUP_SIZE or 256, checked."""
    limit = min(int(device.max_work_group_size), MAX_GROUP)
    return checked_group_size("opencl", GROUP_ENV, limit, device.name.strip(), requested, 32)


_shared_lock = threading.Lock()
_contexts: dict[int, tuple[Any, Any]] = {}
_programs: dict[tuple[int, str, bool], tuple[Any, BuildLog]] = {}


def _context(index: int, device: Any) -> tuple[Any, Any]:
    with _shared_lock:
        if index not in _contexts:
            ctx = cl.Context([device])
            _contexts[index] = (ctx, cl.CommandQueue(ctx, device))
        return _contexts[index]


class OpenCLProgram(KernelsByName[Any]):
    """A built ``cl.Program``; each ``cl.Kernel`` is made once and its arguments set per launch."""

    def __init__(self, program: Any, name: str, device_name: str, build_log: BuildLog) -> None:
        super().__init__(name, build_log)
        self.program = program
        self.device_name = device_name

    def _lookup(self, name: str) -> Any:
        try:
            return cl.Kernel(self.program, name)
        except cl.Error as exc:
            raise KernelCompileError(
                f"[compile] kernel {name!r} not found in {self.name} on {self.device_name}: {exc}"
            ) from None


class OpenCLRuntime:
    """Implements ``riftco.kernel_host.runtime.Runtime`` on one OpenCL device."""

    def __init__(
        self, index: int, group_size: int | None = None, fast_math: bool | None = None
    ) -> None:
        devices, error = enumerate_devices()
        if error or not 0 <= index < len(devices):
            raise BackendUnavailableError(f"[opencl] no device {index}: {error or 'out of range'}")
        self.index = index
        self.device = devices[index]
        self.device_name = self.device.name.strip()
        self.context, self.queue = _context(index, self.device)
        self.group_size = group_size_for(self.device, group_size)
        #: Build with FAST_MATH_OPTIONS (argument, else RIFTCO_FAST_MATH, else off).
        self.fast_math = fast_math_from_env() if fast_math is None else bool(fast_math)
        self._kernel_groups: dict[int, int] = {}
        #: CPU devices get kernels shaped for caches and SIMD rather than for threadgroups
        #: (matmul_panel), and a work-item per row beats a threadgroup tree there (barriers
        #: are costly). The group size is known here (unlike Metal): row kernels launch one
        #: group per row. ``matmul_wide`` is CUDA's alone (docs/DECISIONS.md).
        cpu = not is_gpu(self.device)
        self.capabilities = RuntimeCapabilities(
            is_cpu=cpu,
            serial_rows=cpu,
            group_size_hint=self.group_size,
            matmul_wide_min_tiles=math.inf,
        )
        #: The driver caches compiled programs on disk itself (PoCL): riftco's kernel cache
        #: then keeps only their build logs (see ``_build``).
        self.keeps_own_cache = pocl_version(self.device.platform.version) is not None
        #: The largest single buffer the device allows (larger ones fail at creation).
        self.max_alloc_bytes = int(self.device.max_mem_alloc_size)

    def allocate(self, nbytes: int) -> Any:
        if nbytes > self.max_alloc_bytes:  # clCreateBuffer would say INVALID_BUFFER_SIZE
            raise MemoryError(
                f"{nbytes:,} bytes exceed the largest buffer {self.device_name} allows "
                f"(CL_DEVICE_MAX_MEM_ALLOC_SIZE = {self.max_alloc_bytes:,} bytes)"
            )
        try:
            return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=max(int(nbytes), 1))
        except cl.MemoryError as exc:
            raise MemoryError(f"{self.device_name}: {exc}") from exc

    def upload(self, buffer: Any, array: np.ndarray) -> None:
        # Non-blocking: pyopencl's NannyEvent keeps the host copy alive until it is done.
        try:
            cl.enqueue_copy(self.queue, buffer, np.ascontiguousarray(array), is_blocking=False)
        except cl.MemoryError as exc:  # a lazily allocated buffer (PoCL) failing at first use
            raise MemoryError(f"{self.device_name}: {exc}") from exc

    def download(self, buffer: Any, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, dtype=np.uint8)
        cl.enqueue_copy(self.queue, out, buffer, is_blocking=True)
        return out

    def constant(self, data: bytes) -> Any:
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        return cl.Buffer(self.context, flags, hostbuf=np.frombuffer(data, dtype=np.uint8))

    def compile(self, source: str, name: str) -> OpenCLProgram:
        """Build ``source`` once per device, source and options in this process; across
        processes the kernel cache keeps the binary (loaded when its entry is sound and the
        driver accepts it; built under the entry's lock otherwise, so concurrent processes
        build it once), or only the build log where the driver caches programs itself."""
        key = (self.index, source, self.fast_math)
        with _shared_lock:
            built = _programs.get(key)
        if built is None:
            options = ["-cl-std=CL1.2", *(FAST_MATH_OPTIONS if self.fast_math else ())]
            built = self._build(source, options, f"{name} on {self.device_name}")
            with _shared_lock:
                _programs[key] = built
        return OpenCLProgram(built[0], name, self.device_name, built[1])

    def _build_source(self, source: str, options: list[str], label: str) -> tuple[Any, BuildLog]:
        said: list[str] = []
        try:
            with capture_compiler_output(said, duplicates=(cl.CompilerWarning,)):
                program = cl.Program(self.context, source).build(options=options)
        except cl.Error as exc:  # RuntimeError subclass carrying the build log
            extra = "".join(f"\n{text}" for text in said)
            raise KernelCompileError(f"[compile] {label} failed to build:\n{exc}{extra}") from None
        log = program.get_build_info(self.device, cl.program_build_info.LOG) or ""
        return program, BuildLog.parse("\n".join([log.strip(), *said]), label)

    def _build(self, source: str, options: list[str], label: str) -> tuple[Any, BuildLog]:
        cache = kernel_cache(self.device)
        if cache is None:
            return self._build_source(source, options, label)
        if self.keeps_own_cache:
            # NOTE: PoCL caches both compile stages on disk itself (POCL_CACHE_DIR, keyed by
            # source, options and device), and exporting its binary compiles every kernel
            # once more for a generic group size: layer_norm.cl took 13 s to export against
            # 0.65 s to build (2-core EPYC, pip PoCL 3.0). So only the log is kept here.
            built = self._build_source(source, options, label)
            key = cache.key(source, options)
            if cache.load(key) is None:
                cache.store(key, b"", built[1].text, label, options)
            return built
        fresh: list[tuple[Any, BuildLog]] = []

        def build() -> tuple[bytes, str]:
            fresh.append(self._build_source(source, options, label))
            program, log = fresh[0]
            return bytes(program.get_info(cl.program_info.BINARIES)[0]), log.text

        entry = cache.get_or_build(source, options, label, build)
        if fresh:
            return fresh[0]
        try:
            with capture_compiler_output([], duplicates=(cl.CompilerWarning,)):
                program = cl.Program(self.context, [self.device], [entry.binary])
                program = program.build(options=options)
        except cl.Error:  # e.g. a driver update made the stored binary unloadable
            return self._build_source(source, options, label)
        return program, BuildLog.parse(entry.log, label)

    def _group_for(self, kernel: Any) -> int:
        """The run's group size, lowered to the kernel's own limit (as Metal does)."""
        key = id(kernel)
        g = self._kernel_groups.get(key)
        if g is None:
            limit = kernel.get_work_group_info(
                cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device
            )
            g = min(self.group_size, max(32, int(limit) // 32 * 32))
            self._kernel_groups[key] = g
        return g

    def launch(self, kernel: Any, global_threads: int, buffers: Sequence[Any]) -> None:
        g = self._group_for(kernel)
        total = -(-global_threads // g) * g
        kernel.set_args(*buffers)
        try:  # some drivers (PoCL) allocate a buffer's memory at its first use, here
            cl.enqueue_nd_range_kernel(self.queue, kernel, (total,), (g,))
        except cl.MemoryError as exc:
            raise MemoryError(f"{self.device_name}: {exc}") from exc

    def synchronize(self) -> None:
        self.queue.finish()
