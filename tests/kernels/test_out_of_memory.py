"""Allocation failures inside an op are riftco errors naming the op, shapes, dtypes and bytes.

``allocate`` and ``upload`` always wrapped a backend's failure; these tests cover what an
op allocates itself (a result, a scratch buffer, a composite's intermediates): numpy's
``_ArrayMemoryError``, the OpenCL runtime's refusal and a backend whose allocator raises
all become ``OutOfMemoryError("[op] ...")``, fast and without touching the memory asked
for, and an in-place op that fails leaves every tensor it was given unchanged.
"""

from __future__ import annotations

import resource
import time
import weakref
from typing import Any, ClassVar

import numpy as np
import pytest
import riftco
from riftco import ops
from riftco.backends.cpu.backend import CPUBackend
from riftco.errors import OutOfMemoryError, ShapeError
from riftco.kernel_host.allocator import CachingAllocator

F32 = np.dtype(np.float32)
#: More than any test here may add to the process's peak resident memory.
_RSS_SLACK_KB = 256 * 1024


def _peak_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class Starved(CPUBackend):
    """The CPU backend with an allocation budget: the result after ``budget`` raises
    MemoryError, as a device that is full would. ``softmax`` and ``adam_update`` go through
    core's composites (several allocations each)."""

    name: ClassVar[str] = "starved"
    softmax = None  # type: ignore[assignment]
    adam_update = None  # type: ignore[assignment]

    def __init__(self, budget: int = 10**9) -> None:
        super().__init__()
        self.budget = budget

    def result(self, array: Any, dtype: np.dtype | None = None) -> Any:
        if self.budget <= 0:
            raise MemoryError("device full (test)")
        self.budget -= 1
        return super().result(array, dtype)


def _up(backend: Any, array: np.ndarray) -> Any:
    if not isinstance(backend, Starved):
        return ops.upload(backend, array)
    saved, backend.budget = backend.budget, 10**9
    try:
        return ops.upload(backend, array)
    finally:
        backend.budget = saved


# -- dispatch turns a MemoryError inside an op into OutOfMemoryError ----------------------------
def test_failed_result_allocation_names_op_operands_and_bytes() -> None:
    be = Starved()
    a = _up(be, np.ones((3, 4), F32))
    b = _up(be, np.ones((4, 5), F32))
    be.budget = 0
    with pytest.raises(OutOfMemoryError) as info:
        ops.matmul(a, b)
    msg = str(info.value)
    assert msg.startswith("[matmul] backend starved:0 ran out of memory")
    assert "out (3, 5) float32" in msg and "need 60 bytes" in msg  # 3 * 5 * 4
    assert "(3, 4) float32, (4, 5) float32" in msg and "device full (test)" in msg
    assert isinstance(info.value.__cause__, MemoryError)
    be.budget = 10**9  # the backend works normally afterwards
    np.testing.assert_array_equal(ops.matmul(a, b).numpy(), np.full((3, 5), 4.0, F32))


@pytest.mark.parametrize("budget", [0, 1, 2, 3])
def test_composite_failing_part_way_names_the_fused_op_and_the_primitive(budget: int) -> None:
    be = Starved()
    x = _up(be, np.arange(12, dtype=F32).reshape(3, 4))
    be.budget = budget
    with pytest.raises(OutOfMemoryError) as info:
        ops.softmax(x)
    msg = str(info.value)
    assert msg.startswith("[softmax] backend starved:0 ran out of memory: its outputs (out (3, 4)")
    assert "OutOfMemoryError: [" in msg  # the primitive of the composite that failed


def _adam_inputs(be: Any) -> tuple[Any, ...]:
    rng = np.random.default_rng(0)
    return tuple(_up(be, rng.standard_normal((4, 5)).astype(F32)) for _ in range(4))


@pytest.mark.parametrize("budget", range(24))
def test_adam_composite_failing_anywhere_changes_nothing(budget: int) -> None:
    """AdamW's composite allocates sixteen intermediates and then three copies: whichever
    fails, param, m and v keep their values (and versions)."""
    be = Starved()
    param, grad, m, v = _adam_inputs(be)
    before = [t.numpy().copy() for t in (param, m, v)]
    versions = [t.version for t in (param, m, v)]
    be.budget = budget
    try:
        ops.adam_update(param, grad, m, v, 0.1, step=3)
    except OutOfMemoryError as exc:
        assert str(exc).startswith("[adam_update] backend starved:0 ran out of memory: it works")
        be.budget = 10**9
        for t, want, ver in zip((param, m, v), before, versions, strict=True):
            np.testing.assert_array_equal(t.numpy(), want)
            assert t.version == ver
    else:  # enough budget for the whole step: it must then have written all three
        be.budget = 10**9
        assert budget >= 19  # sixteen intermediates, then the three copies
        assert all((t.numpy() != w).any() for t, w in zip((param, m, v), before, strict=True))


def test_assign_that_cannot_copy_leaves_destination_unchanged() -> None:
    be = Starved()
    dst = _up(be, np.zeros((2, 3), F32))
    src = _up(be, np.ones((3, 2), F32)).transpose()
    be.budget = 0
    with pytest.raises(OutOfMemoryError, match=r"^\[copy_strided\]"):
        ops.assign_(dst, src)
    be.budget = 10**9
    np.testing.assert_array_equal(dst.numpy(), np.zeros((2, 3), F32))
    assert dst.version == 0


def test_cpu_adam_computes_everything_before_writing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU backend's own (native) AdamW: a failure after the moments are computed (here
    in the square root) must not leave m and v updated and param not."""
    import riftco.backends.cpu.optim as cpu_optim

    be = riftco.device("cpu").backend
    param, grad, m, v = _adam_inputs(be)
    before = [t.numpy().copy() for t in (param, m, v)]

    class NoSqrt:
        def __getattr__(self, name: str) -> Any:
            if name == "sqrt":
                raise MemoryError("no memory for sqrt (test)")
            return getattr(np, name)

    monkeypatch.setattr(cpu_optim, "np", NoSqrt())
    with pytest.raises(OutOfMemoryError, match=r"^\[adam_update\] backend cpu:0"):
        ops.adam_update(param, grad, m, v, 0.1, step=3)
    monkeypatch.undo()
    for t, want in zip((param, m, v), before, strict=True):
        np.testing.assert_array_equal(t.numpy(), want)


# -- numpy on impossible sizes: at once, without touching memory -------------------------------
@pytest.fixture(params=["cpu", "native"])
def host_backend(request: pytest.FixtureRequest) -> Any:
    entry = riftco.get_registry().entry(request.param)
    if not entry.available:
        pytest.skip(f"{request.param} is unavailable: {entry.reason}")
    return riftco.device(request.param).backend


def test_huge_matmul_result_fails_fast(host_backend: Any) -> None:
    a = ops.upload(host_backend, np.ones((2**20, 1), F32))
    b = ops.upload(host_backend, np.ones((1, 2**20), F32))
    live = host_backend.memory_stats()["allocated_bytes"]
    rss, t0 = _peak_rss_kb(), time.perf_counter()
    with pytest.raises(OutOfMemoryError) as info:
        ops.matmul(a, b)
    assert time.perf_counter() - t0 < 5.0
    assert _peak_rss_kb() - rss < _RSS_SLACK_KB
    msg = str(info.value)
    assert msg.startswith(f"[matmul] backend {host_backend.name}:0 ran out of memory")
    assert "out (1048576, 1048576) float32" in msg and "4,398,046,511,104 bytes" in msg
    assert "(1048576, 1) float32, (1, 1048576) float32" in msg
    assert host_backend.memory_stats()["allocated_bytes"] == live


def test_huge_broadcast_view_through_an_op_fails_fast(host_backend: Any) -> None:
    """``shape (2**40, 2**20) float32``: a stride-0 view costs nothing, its result 4 EiB."""
    x = ops.upload(host_backend, np.full((1, 1), 2.0, F32)).broadcast_to(2**40, 2**20)
    rss, t0 = _peak_rss_kb(), time.perf_counter()
    with pytest.raises(OutOfMemoryError) as info:
        ops.exp(x)
    assert time.perf_counter() - t0 < 5.0
    assert _peak_rss_kb() - rss < _RSS_SLACK_KB
    msg = str(info.value)
    assert msg.startswith("[exp]") and "(1099511627776, 1048576) float32" in msg
    assert f"{2**62:,} bytes" in msg
    with pytest.raises(OutOfMemoryError, match=r"^\[allocate\].*4,611,686,018,427,387,904"):
        ops.allocate(host_backend, (2**40, 2**20), F32)


def test_views_beyond_any_address_space_or_with_negative_dims_are_refused() -> None:
    x = riftco.tensor(np.ones((1, 1), F32))
    with pytest.raises(ShapeError, match=r"^\[broadcast_to\] shape .* bytes"):
        x.broadcast_to(2**40, 2**30)
    with pytest.raises(ShapeError, match=r"^\[broadcast_to\] dims must be >= 0"):
        x.broadcast_to(1, -3)
    assert x.broadcast_to(2**40, 2**20).shape == (2**40, 2**20)  # 2**62 bytes: addressable
    # empty, yet numpy cannot index it: the non-zero dims count (the fuzz found these)
    with pytest.raises(ShapeError, match=r"^\[broadcast_to\] shape \(4611686018427387904, 0, 1\)"):
        x.broadcast_to(2**62, 0, 1)
    empty = riftco.tensor(np.ones((0, 5), F32))
    with pytest.raises(ShapeError, match=r"^\[reshape\] shape \(4611686018427387904, 0\)"):
        empty.reshape(2**62, 0)
    with pytest.raises(ShapeError, match=r"^\[allocate\] shape \(0, 4611686018427387904\)"):
        ops.allocate(riftco.device("cpu").backend, (0, 2**62), F32)
    assert empty.reshape(2**40, 0).shape == (2**40, 0)


# -- kernel backends: the runtime's refusal becomes OutOfMemoryError ----------------------------
def _kernel_backend(kind: str) -> Any:
    rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="pyopencl import failed")
    devices, why = rt.enumerate_devices()
    if not devices:
        pytest.skip(f"no usable OpenCL device: {why}")
    if kind == "opencl":
        from riftco.backends.opencl.backend import OpenCLBackend

        return OpenCLBackend(0)
    from riftco.backends.metal import standin
    from riftco.backends.metal.backend import MetalBackend

    return MetalBackend(0, mc_module=standin)


@pytest.fixture(scope="module", params=["opencl", "metal-standin"])
def kernel_backend(request: pytest.FixtureRequest) -> Any:
    return _kernel_backend(request.param)


def test_kernel_matmul_past_int32_indexing_names_the_op(kernel_backend: Any) -> None:
    a = ops.upload(kernel_backend, np.ones((65536, 1), F32))
    b = ops.upload(kernel_backend, np.ones((1, 32768), F32))
    with pytest.raises(OutOfMemoryError) as info:
        ops.matmul(a, b)  # 2**31 elements: one more than int32 indexing reaches
    msg = str(info.value)
    assert msg.startswith(f"[matmul] backend {kernel_backend.name}:0 ran out of memory")
    assert "out (65536, 32768) float32" in msg and f"{2**33:,} bytes" in msg
    assert "int32" in msg


def test_opencl_buffer_past_the_device_limit_names_the_op() -> None:
    """A result larger than CL_DEVICE_MAX_MEM_ALLOC_SIZE but within int32 indexing: the
    runtime refuses it before clCreateBuffer (which would raise INVALID_BUFFER_SIZE)."""
    be = _kernel_backend("opencl")
    limit = be.runtime.max_alloc_bytes
    n = 46340  # n * n = 2,147,395,600: just within int32 indexing
    dt = np.dtype(np.float64) if np.dtype(np.float64) in be.dtypes else F32
    if n * n * dt.itemsize <= limit:
        pytest.skip(f"max_mem_alloc_size {limit:,} reaches past int32 indexing: tested above")
    a = ops.upload(be, np.ones((n, 1), dt))
    b = ops.upload(be, np.ones((1, n), dt))
    with pytest.raises(OutOfMemoryError) as info:
        ops.matmul(a, b)
    msg = str(info.value)
    assert msg.startswith("[matmul] backend opencl:0 ran out of memory")
    assert f"{n * n * dt.itemsize:,} bytes" in msg and "CL_DEVICE_MAX_MEM_ALLOC_SIZE" in msg


def test_kernel_runtime_failure_is_translated_and_fill_writes_nothing(
    kernel_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = ops.upload(kernel_backend, np.arange(6, dtype=F32))

    def refuse(nbytes: int) -> Any:
        raise RuntimeError("clCreateBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE (test)")

    monkeypatch.setattr(kernel_backend.allocator, "_allocate", refuse)
    kernel_backend.empty_cache()
    with pytest.raises(OutOfMemoryError) as info:
        ops.exp(x[::2])  # a view: made dense by copy_strided, which needs a buffer
    msg = str(info.value)
    assert msg.startswith(f"[exp] backend {kernel_backend.name}:0 ran out of memory")
    assert "OutOfMemoryError: [copy_strided]" in msg and "(3,) float32" in msg
    assert "MEM_OBJECT_ALLOCATION_FAILURE (test)" in msg

    def no_constant(data: bytes) -> Any:
        raise MemoryError("no room for a parameter buffer (test)")

    monkeypatch.setattr(kernel_backend.runtime, "constant", no_constant)
    kernel_backend._constants.clear()
    version = x.version
    with pytest.raises(OutOfMemoryError, match=r"^\[fill\] .*it works in place"):
        ops.fill_(x, 123.0)
    monkeypatch.undo()
    np.testing.assert_array_equal(x.numpy(), np.arange(6, dtype=F32))
    assert x.version == version


# -- the caching allocator gives its pool back before it gives up -------------------------------
def test_allocator_empties_its_pool_and_retries_once() -> None:
    class Raw:  # a device buffer: its memory is held while the object lives
        __slots__ = ("nbytes", "__weakref__")

        def __init__(self, nbytes: int) -> None:
            self.nbytes = nbytes

    live: weakref.WeakSet[Raw] = weakref.WeakSet()
    calls: list[int] = []

    def device(nbytes: int) -> Raw:
        calls.append(nbytes)
        if sum(r.nbytes for r in live) + nbytes > 4096:
            raise RuntimeError("device full (test)")
        raw = Raw(nbytes)
        live.add(raw)
        return raw

    alloc = CachingAllocator(device)
    bufs = [alloc.allocate(1024) for _ in range(4)]
    del bufs  # all four go back to the pool, and the pool keeps the device full
    assert alloc.stats()["pooled_bytes"] == 4096 and len(live) == 4
    calls.clear()
    big = alloc.allocate(2048)  # no pooled buffer of its class: refused, pool dropped, retried
    assert calls == [2048, 2048] and big.nbytes == 2048
    assert alloc.stats()["pooled_bytes"] == 0 and len(live) == 1
    hog = device(2048)  # someone else fills the rest
    calls.clear()
    with pytest.raises(RuntimeError, match="device full"):
        alloc.allocate(2048)  # nothing pooled to give back: the runtime's error goes through
    assert calls == [2048] and hog.nbytes == 2048


# -- conformance's out-of-memory case ------------------------------------------------------------
class RaisesRuntimeErrorWhenFull(CPUBackend):
    """An allocator that reports a full device as a bare RuntimeError (torch's CPU
    allocator does): core cannot tell it from a bug, so nothing names the op."""

    name: ClassVar[str] = "runtime_error_oom"

    def exp(self, x: Any) -> Any:
        if x.nbytes > 2**40:
            raise RuntimeError(
                f"[enforce fail at alloc_cpu.cpp:114] DefaultCPUAllocator: not enough memory: "
                f"you tried to allocate {x.nbytes} bytes."
            )
        return super().exp(x)


class RaisesBareMemoryError(CPUBackend):
    name: ClassVar[str] = "bare_memory_error"

    def exp(self, x: Any) -> Any:
        if x.nbytes > 2**40:
            raise MemoryError("cudaMalloc failed (test)")
        return super().exp(x)


def test_conformance_out_of_memory_case_passes_backends_that_raise_memory_error() -> None:
    from riftco.conformance.memory_check import out_of_memory_result

    for be in (riftco.device("cpu").backend, RaisesBareMemoryError()):
        res = out_of_memory_result(be)
        assert (res.status, res.reason, res.op) == ("pass", "", "exp"), res


def test_conformance_out_of_memory_case_fails_any_other_error_with_what_to_do() -> None:
    from riftco.conformance.memory_check import out_of_memory_result

    res = out_of_memory_result(RaisesRuntimeErrorWhenFull())
    assert res.status == "fail" and res.case_id == "errors/out_of_memory_exp"
    assert res.reason.startswith(f"a {2**62:,}-byte result raised RuntimeError: [enforce fail")
    assert "expected MemoryError from the backend" in res.reason
    assert "raise MemoryError (or a subclass) where an allocation fails" in res.reason
    assert "exp(ones((1, 1)).broadcast_to" in res.example


def test_conformance_out_of_memory_case_runs_in_the_suite(tmp_path: Any) -> None:
    import json

    from riftco.conformance import cli

    out = tmp_path / "report.json"
    rc = cli.main(["cpu", "--ops", "exp", "--max-examples", "0", "--json", str(out), "--quiet"])
    cases = {c["id"]: c for d in json.loads(out.read_text())["devices"] for c in d["cases"]}
    assert rc == 0 and cases["errors/out_of_memory_exp"]["status"] == "pass"


def test_embedding_backward_of_an_unaddressable_table_names_the_op() -> None:
    """num_embeddings is the one output size a caller gives as a number: a table larger
    than any address space is refused before the backend (numpy said ValueError)."""
    import riftco
    import riftco.ops as ops

    b = riftco.device("cpu").backend
    dy = b.from_numpy(np.ones((1, 1), np.float32))
    ids = b.from_numpy(np.zeros(1, np.int32))
    with pytest.raises(riftco.OutOfMemoryError, match=r"\[embedding_backward\] num_embeddings"):
        ops.embedding_backward(dy, ids, 2**63)
