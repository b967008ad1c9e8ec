"""The small runtime interface a GPU API must offer for ``KernelBackend`` to run on it.

Everything device specific (OpenCL, metalcompute, the Metal stand-in, CUDA) lives behind
these few calls and one declared record of what the device wants (``RuntimeCapabilities``);
the host layer in ``backend.py`` does the rest (docs/ARCHITECTURE.md tabulates both).
Launches are asynchronous and ordered: a runtime must execute launches, uploads and
downloads in submission order (an in-order queue), which is what lets the caching
allocator hand a freed buffer to the next op without waiting.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

from ..errors import BackendUnavailableError
from .build_log import BuildLog

#: The launch group size a CUDA or OpenCL runtime takes when none is asked for.
DEFAULT_GROUP_SIZE = 256


@dataclass(frozen=True, kw_only=True)
class RuntimeCapabilities:
    """What a runtime tells the host layer about its device, declared once per runtime.

    The host layer (``KernelBackend`` and its op mixins) picks kernel shapes from these
    and from nothing else, so a new runtime states every choice it makes instead of
    inheriting silent defaults. Frozen: a runtime sets them when it is created; to force a
    different choice (tests run the GPU-shaped kernels on PoCL), assign a new record made
    with :meth:`shaped_for` or :func:`dataclasses.replace` to ``runtime.capabilities``.
    """

    #: The device is a CPU (PoCL): take the kernels shaped for caches and SIMD lanes
    #: (``matmul_panel``, ``copy_strided_rows``, the barrier-free flash kernels of
    #: ``flash_attention_cpu.cl``) instead of those shaped for threadgroups and barriers.
    is_cpu: bool
    #: Reduce rows of 64 or more with one thread per row (``*_rows_small``) instead of a
    #: threadgroup tree per row: faster where barriers are costly (CPU devices).
    serial_rows: bool
    #: The threadgroup size every launch uses, when the runtime fixes it (OpenCL, CUDA):
    #: row kernels then launch one group per row. ``None`` where the API picks it per
    #: pipeline (Metal); the host then assumes 256 (the kernels loop either way).
    group_size_hint: int | None
    #: Products with at least this many 128x128 output tiles take ``matmul_wide``;
    #: ``math.inf`` where the kernel does not pay (every runtime but CUDA).
    matmul_wide_min_tiles: float

    def shaped_for(self, *, cpu: bool) -> RuntimeCapabilities:
        """These capabilities with the CPU-shaped kernel choices on (``cpu=True``) or off.

        ``serial_rows`` follows ``is_cpu`` as on OpenCL, where both come from the device
        type; this is the documented way to run one device's kernels of the other shape."""
        return replace(self, is_cpu=cpu, serial_rows=cpu)


class Program(Protocol):
    """A compiled source: kernels are looked up by function name."""

    #: What the compiler said while building it, captured by the runtime (never printed):
    #: ``riftco backends --verbose`` lists it, a failed build raises it.
    build_log: BuildLog

    def kernel(self, name: str) -> Any:
        """The launchable kernel ``name``; raise ``KernelCompileError`` if it is missing."""
        ...


K = TypeVar("K")


def checked_group_size(
    api: str, env: str, limit: int, device: str, requested: int | None, floor: int = 0
) -> int:
    """The launch group size of a CUDA or OpenCL runtime, by one rule for both.

    ``requested``, else the integer in environment variable ``env``, must be a positive
    multiple of 32 and at most ``limit`` (``BackendUnavailableError`` naming ``api`` and
    ``device`` otherwise); with neither, 256 rounded down to a multiple of 32 within
    ``limit``, and at least ``floor`` (OpenCL keeps 32 where a device reports less)."""
    value = requested
    if value is None and os.environ.get(env):
        try:
            value = int(os.environ[env])
        except ValueError:
            raise BackendUnavailableError(
                f"[{api}] {env}={os.environ[env]!r} is not an integer"
            ) from None
    if value is None:
        return max(floor, min(DEFAULT_GROUP_SIZE, limit) // 32 * 32)
    if value <= 0 or value % 32 or value > limit:
        raise BackendUnavailableError(
            f"[{api}] group size {value} must be a positive multiple of 32 and at most "
            f"{limit} on {device}"
        )
    return value


class KernelsByName(Generic[K]):
    """A compiled program that makes each of its kernel objects once, on first use.

    The CUDA and OpenCL runtimes share one compiled program among every backend instance
    of a device and source, and looking a kernel up is a driver call
    (``cuModuleGetFunction`` and its attribute queries, ``clCreateKernel``), so the program
    keeps what it made. A runtime's program class says how one kernel is made
    (``_lookup``, which raises ``KernelCompileError`` for a name the source lacks) and
    keeps its API's handle itself. Metal's program does not derive from it: it looks a
    function up on each call, and ``KernelBackend`` keeps what it got per backend."""

    def __init__(self, name: str, build_log: BuildLog) -> None:
        #: The source's name (``flash_attention.cl``), for error messages.
        self.name = name
        #: What the compiler said while building it (shown by ``riftco backends -v``).
        self.build_log = build_log
        self._kernels: dict[str, K] = {}

    def kernel(self, name: str) -> K:
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = self._lookup(name)
        return k

    def _lookup(self, name: str) -> K:
        raise NotImplementedError


@runtime_checkable
class Runtime(Protocol):
    """A device queue with buffers, a compiler and a 1-D launcher."""

    #: Human-readable device name (for error messages and ``devices()``).
    device_name: str
    #: The kernel shapes this device wants (``RuntimeCapabilities``); set at creation.
    capabilities: RuntimeCapabilities

    def allocate(self, nbytes: int) -> Any:
        """A device buffer of at least ``nbytes`` bytes (``nbytes`` > 0)."""
        ...

    def upload(self, buffer: Any, array: np.ndarray) -> None:
        """Copy the bytes of C-contiguous ``array`` to the start of ``buffer`` (ordered)."""
        ...

    def download(self, buffer: Any, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of ``buffer`` as a uint8 array, after all queued work."""
        ...

    def constant(self, data: bytes) -> Any:
        """A read-only buffer holding ``data`` (kernel parameters); never written again."""
        ...

    def compile(self, source: str, name: str) -> Program:
        """Build ``source``; raise ``KernelCompileError`` naming ``name`` with the log."""
        ...

    def launch(self, kernel: Any, global_threads: int, buffers: Sequence[Any]) -> None:
        """Queue a 1-D launch of at least ``global_threads`` threads (rounded up to whole
        groups), binding ``buffers`` in order as arguments 0, 1, ... Returns at once."""
        ...

    def synchronize(self) -> None:
        """Block until every queued command has completed."""
        ...
