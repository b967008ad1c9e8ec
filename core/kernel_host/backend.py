"""KernelBackend: the Backend protocol implemented once over the small ``Runtime`` interface.

OpenCL, Metal and the Metal stand-in differ only in their runtime (``runtime.py``); this
class owns everything else: program compilation and caching, parameter buffers, the
caching allocator, transfers and their accounting, and (through the mixins) every op.

Kernel methods call :meth:`KernelBackend.launch`, which binds buffers in the order the
kernel signature lists them: the tensors' buffers, then an int32 parameter buffer (when
``ints`` is given), then a parameter buffer of the element type (when ``floats`` is
given). metalcompute has no scalar arguments, so every size and constant travels this way
on every runtime. Launches are asynchronous; only ``to_numpy`` (hence ``item``) and
``synchronize`` wait for the device. Index-taking kernels also get the device status buffer
(``status=(op, bound)``, bound after the tensors); those sync points read it when such a
kernel ran since the last read and raise the deferred DomainError (``status.py``).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..backend import BackendBase
from ..dtypes import compute_dtype
from ..errors import DeviceLostError, DTypeError, OutOfMemoryError, ShapeError
from ..ieee import quiet
from ..tensor import Tensor
from .allocator import CachingAllocator
from .fused import FusedPlans
from .half_linear import HALF_LINEAR_OPS
from .half_storage import HALF_NATIVE_OPS, half_bits, is_half
from .layout import collapse
from .primitives import PrimitivePlans
from .runtime import Program, Runtime
from .sources import program_source
from .status import DeviceStatus

#: Parameter buffers are immutable and keyed by content, so hot loops reuse them.
_CONSTANT_CACHE_SIZE = 4096
#: Elements per thread of ``copy_strided_rows`` (CR_RUN in shaders/copy.cl).
_COPY_RUN = 64
#: Kernels index elements with int32 (sizes travel in int32 parameter buffers, and
#: ``row * cols`` is int arithmetic in places): a larger tensor could address out of bounds.
MAX_ELEMENTS = 2**31 - 1


def _encode(dtype: Any, values: tuple[Any, ...]) -> bytes:
    """A parameter buffer's bytes (1e308 as float32 is inf (IEEE), not news)."""
    with quiet():
        return np.asarray(values, dtype=dtype).tobytes()


@dataclass
class TransferStats:
    """Host<->device traffic. Tests assert on it: a training step downloads only the loss."""

    uploads: int = 0
    upload_bytes: int = 0
    downloads: int = 0
    download_bytes: int = 0
    launches: int = 0
    param_buffers: int = 0  # new parameter buffers (cache misses), a few bytes each
    compiles: int = 0
    synchronizations: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class KernelBackend(FusedPlans, PrimitivePlans, BackendBase):
    """Base of every backend that runs ``shaders/`` kernels. Subclasses supply a runtime."""

    name: ClassVar[str] = "kernel"
    #: elementwise.cl loads halves, computes in float32 and stores once (half_storage.py);
    #: the linear backwards widen their operands one at a time (half_linear.py)
    low_precision_ops: ClassVar[frozenset[str]] = HALF_NATIVE_OPS | HALF_LINEAR_OPS

    def __init__(self, device_index: int = 0, runtime: Runtime | None = None) -> None:
        super().__init__(device_index)
        self.runtime: Runtime = runtime if runtime is not None else self.make_runtime(device_index)
        self.allocator = CachingAllocator(self.runtime.allocate)
        self._programs: dict[tuple[Any, ...], Program] = {}
        self._kernels: dict[tuple[Any, ...], Any] = {}
        self._constants: OrderedDict[tuple[Any, ...] | bytes, Any] = OrderedDict()
        self._launchable: dict[tuple[Any, ...], Any] = {}
        self._stats = TransferStats()
        #: Serialises every call into the runtime: a device is shared by the threads that
        #: use it (docs/DECISIONS.md, "Threads sharing a device"). A kernel object's
        #: arguments are set, then it is queued: two threads interleaving those two calls
        #: would launch each other's buffers. Re-entrant: ``to_numpy`` launches a copy.
        self.lock = threading.RLock()
        self.device_status = DeviceStatus(
            self.runtime.allocate, self.runtime.upload, self._read_status
        )

    def _read_status(self, buffer: Any, nbytes: int) -> np.ndarray:
        raw = self.runtime.download(buffer, nbytes)
        self._stats.downloads += 1
        self._stats.download_bytes += nbytes
        return raw

    def make_runtime(self, device_index: int) -> Runtime:
        """The runtime for ``device_index``; subclasses override."""
        raise NotImplementedError(f"{type(self).__name__} must provide a runtime")

    # -- programs and launches ----------------------------------------------------------------
    def compile_source(self, source: str, name: str) -> Program:
        """Compile a complete source string (raises ``KernelCompileError`` with the log)."""
        self._stats.compiles += 1
        return self.runtime.compile(source, name)

    def kernel(
        self,
        family: str,
        kernel: str,
        dtype: np.dtype,
        index_dtype: np.dtype | None = None,
        defines: Mapping[str, str] | None = None,
    ) -> Any:
        """The compiled kernel object, building its family's program on first use."""
        pkey = (family, np.dtype(dtype), np.dtype(index_dtype or np.int32), _frozen(defines))
        key = (*pkey, kernel)
        k = self._kernels.get(key)
        if k is None:
            program = self._programs.get(pkey)
            if program is None:
                src = program_source(family, dtype, index_dtype, defines)
                program = self.compile_source(src, f"{family}.cl [{np.dtype(dtype).name}]")
                self._programs[pkey] = program
            k = self._kernels[key] = program.kernel(kernel)
        return k

    def launch(
        self,
        family: str,
        kernel: str,
        dtype: np.dtype,
        threads: int,
        *args: Tensor,
        ints: Sequence[int] = (),
        floats: Sequence[float] = (),
        index_dtype: np.dtype | None = None,
        defines: Mapping[str, str] | None = None,
        status: tuple[str, int] | None = None,
        guarded: bool = False,
        per_call: bool = False,
    ) -> None:
        """Queue ``kernel`` of ``shaders/<family>.cl`` over ``threads`` threads (1-D).

        ``status=(op, bound)`` binds the device status buffer after the tensors, and appends
        its slot to ``ints``, for a kernel that checks its ids against ``bound``
        (``status.py``). ``guarded`` binds it after the tensors for a kernel that reads
        it and writes nothing once a bad id was flagged (the optimizers'). ``per_call`` says
        the parameter values change on every call (the optimizer's step and learning rate):
        their buffer is made for this launch and dies with it (released once the work that
        binds it is done), where caching it would only fill the cache with dead entries and
        grow what a long run holds (issue 29's long-run figures)."""
        if threads <= 0:
            return
        with self.lock:  # kernel arguments are set, then queued (see __init__)
            # Hot path (a training step launches hundreds of kernels): one dict probe for the
            # kernel, parameter buffers keyed by the Python values (no numpy on a cache hit).
            fast = (family, kernel, dtype, index_dtype) if defines is None else None
            k = self._launchable.get(fast) if fast is not None else None
            if k is None:
                k = self.kernel(family, kernel, dtype, index_dtype, defines)
                if fast is not None:
                    self._launchable[fast] = k
            buffers = [t.storage.buffer.raw for t in args]
            if guarded:
                buffers.append(self.device_status.raw())
            if status is not None:  # the status buffer, and its slot as the last int
                raw, slot = self.device_status.buffer(*status)
                buffers.append(raw)
                ints = (*ints, slot)
            if ints:
                buffers.append(self._constant(np.int32, tuple(ints), not per_call))
            if floats:
                # in the compute dtype: float32 for a half program (half_storage.py)
                ptype = compute_dtype(np.dtype(dtype))
                buffers.append(self._constant(ptype, tuple(floats), not per_call))
            self.runtime.launch(k, int(threads), buffers)
            self._stats.launches += 1

    def _constant(self, dtype: Any, values: tuple[Any, ...], cached: bool = True) -> Any:
        if not cached:
            return self._new_constant(_encode(dtype, values))
        # -0.0 == 0.0 would share a buffer with 0.0: key such values by their bytes
        data = _encode(dtype, values) if 0.0 in values else None
        key: tuple[Any, ...] | bytes = (dtype, values) if data is None else data
        buf = self._constants.get(key)
        if buf is not None:
            self._constants.move_to_end(key)
            return buf
        buf = self._new_constant(_encode(dtype, values) if data is None else data)
        self._constants[key] = buf
        if len(self._constants) > _CONSTANT_CACHE_SIZE:
            self._constants.popitem(last=False)
        return buf

    def _new_constant(self, data: bytes) -> Any:
        self._stats.param_buffers += 1
        return self.runtime.constant(data)

    def empty(self, shape: Sequence[int], dtype: np.dtype) -> Tensor:
        """A dense tensor with undefined contents from the caching allocator."""
        shape = tuple(int(s) for s in shape)
        dtype = np.dtype(dtype)
        n = math.prod(shape)
        if any(d < 0 for d in shape):
            raise ShapeError(f"[allocate] shape {shape} has a negative dimension ({dtype.name})")
        nbytes = n * dtype.itemsize
        if n > MAX_ELEMENTS:  # a MemoryError, so dispatch names the op that asked for it
            raise OutOfMemoryError(
                f"[allocate] {self.name}:{self.device_index} cannot hold {nbytes:,} bytes "
                f"(shape {shape}, {n:,} elements of {dtype.name}): its kernels index tensors "
                f"with int32, at most {MAX_ELEMENTS:,} elements"
            )
        try:
            buf = self.allocator.allocate(nbytes)
        except DeviceLostError:  # not a full device: the context is gone (a sticky fault)
            raise
        except Exception as exc:  # the runtime's own words: pyopencl, metalcompute, ...
            raise OutOfMemoryError(
                f"[allocate] {self.name}:{self.device_index} could not allocate {nbytes:,} "
                f"bytes (shape {shape}, {dtype.name}; {self.allocator.allocated_bytes:,} "
                f"bytes in live tensors): {type(exc).__name__}: {str(exc).strip()}"
            ) from exc
        return self.wrap(buf, shape, dtype)

    # -- allocation and transfer ----------------------------------------------------------------
    def _check_dtype(self, op: str, dtype: np.dtype) -> None:
        if dtype not in self.dtypes:
            names = ", ".join(sorted(d.name for d in self.dtypes))
            raise DTypeError(
                f"[{op}] {self.name}:{self.device_index} does not support {dtype.name} "
                f"(supports {names})"
            )

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> Tensor:
        self._check_dtype("allocate", np.dtype(dtype))
        return self.empty(shape, dtype)

    def from_numpy(self, array: np.ndarray) -> Tensor:
        shape = np.shape(array)  # ascontiguousarray turns 0-d into (1,): keep the real shape
        arr = np.ascontiguousarray(array)
        self._check_dtype("from_numpy", arr.dtype)
        out = self.empty(shape, arr.dtype)
        if arr.nbytes:
            with self.lock:
                self.runtime.upload(out.storage.buffer.raw, arr)
                self._stats.uploads += 1
                self._stats.upload_bytes += arr.nbytes
        return out

    def to_numpy(self, x: Tensor) -> np.ndarray:
        with self.lock:
            self.device_status.check()  # raises the deferred DomainError of a flagged kernel
            if x.size == 0:
                return np.empty(x.shape, dtype=x.dtype)
            src = x if x.is_dense else self.copy_strided(x)
            raw = self.runtime.download(src.storage.buffer.raw, src.nbytes)
            self._stats.downloads += 1
            self._stats.download_bytes += src.nbytes
        return raw.view(x.dtype).reshape(x.shape)

    def copy_strided(self, x: Tensor) -> Tensor:
        out = self.empty(x.shape, x.dtype)
        if x.size == 0:
            return out
        shape, strides = collapse(x.shape, x.strides)
        if len(shape) > 8:
            raise DTypeError(f"[copy_strided] views of rank > 8 are not supported; got {x.shape}")
        if len(shape) <= 4 and self.runtime.capabilities.is_cpu:
            pad = 4 - len(shape)
            shape, strides = [1] * pad + shape, [0] * pad + strides
            ints = [x.size, 4, x.offset, *shape, *strides]
            runs = x.size // shape[-1] * -(-shape[-1] // _COPY_RUN)
            self.launch("copy", "copy_strided_rows", x.dtype, runs, out, x, ints=ints)
            return out
        ints = [x.size, len(shape), x.offset, *shape, *strides]
        self.launch("copy", "copy_strided", x.dtype, x.size, out, x, ints=ints)
        return out

    def fill(self, x: Tensor, value: float) -> None:
        n = x.size
        if is_half(x.dtype):  # rounded once here; the kernel writes the bits
            bits = half_bits(value, x.dtype)
            self.launch("copy", "fill_bits", x.dtype, n, x, ints=[n, bits])
            return
        self.launch("copy", "fill_value", x.dtype, n, x, ints=[n], floats=[value])

    def same_allocation(self, a: Any, b: Any) -> bool:
        """Core's isolation check for two tensors' buffers (``DeviceBuffer``): the pool hands
        a live runtime buffer to one ``DeviceBuffer`` only, so a shared ``raw`` is an alias."""
        return getattr(a, "raw", a) is getattr(b, "raw", b)

    def check_deferred(self) -> None:
        """Raise the deferred DomainError now if a flagged kernel ran since the last check
        (one 4-byte read, which waits for the queue); free when none ran. Called before
        updates that do not guard themselves (``riftco.ops.deferred.check_before_update``)."""
        with self.lock:
            self.device_status.check()

    def synchronize(self) -> None:
        with self.lock:
            self.runtime.synchronize()
            self._stats.synchronizations += 1
            self.device_status.check()

    def memory_stats(self) -> dict[str, int]:
        return self.allocator.stats()

    def reset_peak(self) -> None:
        self.allocator.reset_peak()

    def empty_cache(self) -> None:
        """Return pooled buffers to the driver (they are kept for reuse otherwise)."""
        self.allocator.empty_cache()

    def transfer_stats(self) -> dict[str, int]:
        """Counts since creation (or the last reset): uploads, downloads, bytes, launches."""
        return self._stats.as_dict()

    def reset_transfer_stats(self) -> None:
        self._stats = TransferStats()


def _frozen(defines: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((defines or {}).items()))
