"""The CUDA backend's host code, run on a validating fake driver (tests/cuda_fake_driver.py).

No GPU here: the fake stands in for ``cuda.bindings.driver`` while NVRTC compiles the real
kernels, and checks every call against the driver's contracts (argument counts from the
kernels' own signatures, live pointers, copy ranges, block sizes, contexts, streams,
stream-ordered frees). Launches compute nothing by default, so most tests check the calls,
never the values a kernel would have written; copies are real, so uploads and downloads
are checked bit for bit. Each contract check is also shown to fail on a planted fault.
The last tests run each launched kernel on PoCL instead and check the values as well.
"""

from __future__ import annotations

import ctypes
import gc
import inspect
import re
import threading
import types

import numpy as np
import pytest

pytest.importorskip("cuda.bindings.driver", reason="the fake borrows cuda.bindings' enums")
compiler = pytest.importorskip("riftco.backends.cuda.compiler")
if compiler.nvrtc_status():
    pytest.skip(f"NVRTC cannot compile here: {compiler.nvrtc_status()}", allow_module_level=True)

import riftco  # noqa: E402
import riftco.ops as ops  # noqa: E402
from cuda.bindings import driver as real_driver  # noqa: E402
from cuda_fake_compute import pocl_reason  # noqa: E402
from cuda_fake_driver import POISON, DriverContractError, FakeCudaDriver, install  # noqa: E402
from cuda_kernel_signatures import cubin_kernels, source_kernels  # noqa: E402
from riftco.backends.cuda import driver, runtime  # noqa: E402
from riftco.kernel_host.sources import families, program_source  # noqa: E402


@pytest.fixture
def fake(monkeypatch, registry):
    """A fake driver behind a fresh registry; every breach it saw fails the test."""
    drv = install(monkeypatch)
    yield drv
    gc.collect()  # buffers freed in __del__ are checked too
    drv.assert_clean()


def _backend():
    return riftco.device("cuda").backend


def _planted(fake: FakeCudaDriver, match: str) -> None:
    """The last breach recorded matches ``match``; then forget the planted ones."""
    assert fake.violations, "the planted fault was not caught"
    assert match in fake.violations[-1], fake.violations[-1]
    fake.violations.clear()


# -- the signatures the fake checks launches against -------------------------------------------
#: float32 here; every program the conformance pass below loads (float64 too) is compared
#: again by the fake itself.
_PROGRAMS = [(f, np.float32, np.int32, None) for f in families() if f != "cast"]
_PROGRAMS += [("cast", np.float64, np.int64, {"SRC": "float"})]


@pytest.mark.parametrize("family,dtype,index,defines", _PROGRAMS)
def test_source_signatures_agree_with_the_cubin(family, dtype, index, defines):
    """Counted from the ``KERNEL`` signatures (macro-made kernels included) and read from the
    CUBIN's per-kernel parameter records, independently: the same kernels, the same counts."""
    src = program_source(family, np.dtype(dtype), np.dtype(index), defines)
    from_source = source_kernels(src)
    from_cubin = cubin_kernels(compiler.compile_cubin(src, family, "sm_90"))
    assert from_source == from_cubin
    assert from_source and all(n >= 1 for n in from_source.values())


def test_signature_parser_on_nested_macros():
    src = """
    #define KERNEL extern "C" __global__
    /* KERNEL void commented_out(int a) */
    #define ONE(name, extra) KERNEL void name##_k(GLOBAL T* a ARG(0), GLOBAL const int* P \\
        ARG(1) extra THREAD_ARGS) { }
    #define TWO(op) ONE(op, ) ONE(op##2, )
    TWO(sum)
    KERNEL void plain(GLOBAL T* out ARG(0), GLOBAL const int* P ARG(1),
                      GLOBAL const T* F ARG(2) THREAD_ARGS) { f(a, (b, c)); }
    """
    assert source_kernels(src) == {"sum_k": 2, "sum2_k": 2, "plain": 3}


def _documented(name: str) -> tuple[int, int]:
    """(parameters, returned values besides the CUresult) of a cuda.bindings entry point,
    read from its docstring: the first line is its signature, then a numpy-style Returns."""
    doc = getattr(real_driver, name).__doc__
    head = doc.splitlines()[0]
    inner = head[head.index("(") + 1 : head.rindex(")")]
    params = len([p for p in inner.split(",") if p.strip()])
    block = re.search(r"\n *Returns\n *-+\n(.*?)(?:\n\s*\n|$)", doc, re.S)
    assert block, name
    lines = block.group(1).splitlines()
    indent = min(len(ln) - len(ln.lstrip()) for ln in lines)
    names = [ln.strip() for ln in lines if len(ln) - len(ln.lstrip()) == indent]
    assert names[0].startswith("CUresult"), (name, names)
    return params, len(names) - 1


def test_fake_entry_points_are_spelled_like_cuda_bindings():
    """Each entry point takes as many arguments and returns as many values as cuda.bindings'
    own (its docstrings), so host code that runs on the fake unpacks real results alike."""
    points = [n for n in dir(FakeCudaDriver) if n.startswith("cu") and n != "cuuint64_t"]
    assert len(points) >= 35
    for name in points:
        method = getattr(FakeCudaDriver, name)
        params = len(inspect.signature(method).parameters) - 1  # self
        assert (params, method.returns) == _documented(name), name


# -- a training step and a conformance pass through the fake -----------------------------------
@pytest.mark.parametrize("capture", [False, True], ids=["eager", "replayed"])
@pytest.mark.parametrize("attention", ["materialized", "flash"])
def test_training_step_calls(fake, attention, capture):
    """Three steps of the tiny GPT (clipping, AdamW; replayed by riftco.capture too): every
    call valid, the same kernels each step, one stream, and a step that waits on the host
    only for the loss and the status word (as tests/kernels/test_gpu_training_step.py has it).
    Not the label-smoothing head: its host check reads a flag that a kernel computes."""
    from train_helpers import tiny_device_trainer

    trainer = tiny_device_trainer(riftco.device("cuda"), attention, capture)
    per_step = []
    for _ in range(3):
        start = len(fake.calls)
        trainer.train_step()
        per_step.append(fake.calls[start:])
    names = [c.name for c in per_step[-1]]

    def kernels(calls: list) -> list[int]:
        return [int(c.args[0]) for c in calls if c.name == "cuLaunchKernel"]

    assert len(kernels(per_step[-1])) > 50
    assert kernels(per_step[1]) == kernels(per_step[2]), "steps 2 and 3 launch differently"
    assert "cuModuleLoadData" not in names, "kernels compiled again after the first step"
    assert names.count("cuMemcpyDtoHAsync") == 2  # the loss and the status word
    assert names.count("cuStreamSynchronize") == 2
    streams = {int(c.args[8]) for c in fake.calls if c.name == "cuLaunchKernel"}
    assert len(streams) == 1 and fake.count("cuStreamCreate") == 1
    launched = {launch.kernel for launch in fake.launches}
    wanted = {"flash": "flash_backward_dq", "materialized": "attention_softmax"}[attention]
    assert {wanted, "embedding_forward", "cross_entropy_forward"} <= launched, sorted(launched)
    assert any(k.startswith("adamw") for k in launched), sorted(launched)
    assert all(launch.block == (256, 1, 1) for launch in fake.launches)


#: Crashes a conformance case may show on the fake for want of computed values: the host
#: reads an id check or a loss the kernels never wrote.
_VALUE_CRASHES = ("DomainError: ", "RuntimeWarning: invalid value")


def test_conformance_pass_calls(fake):
    """Every conformance case (edges only) on the fake: no call breaks a contract; what
    needs no kernel result (protocol, bad-input errors) passes; anything else may fail on
    values, or crash only where the host read a value the fake never computed."""
    from conformance.runner import RunSettings
    from conformance.suite import _run_safely, plan, resolve

    (target,) = resolve("cuda")
    results = [r for case in plan(target, RunSettings(max_examples=0)) for r in _run_safely(case)]
    assert len(results) > 300
    assert len(fake.launches) > 1000
    for r in results:
        if r.group in ("protocol", "errors"):
            assert r.status == "pass", (r.case_id, r.reason)
        elif r.status == "error":
            assert r.reason.startswith(_VALUE_CRASHES), (r.case_id, r.reason)
    assert {r.group for r in results} >= {"protocol", "errors", "numeric", "capture", "model"}
    launched = {launch.kernel for launch in fake.launches}
    unused = [f for f in families() if not launched & set(source_kernels(program_source(f, F32)))]
    assert unused == ["flash_attention_cpu"], unused  # its kernels are the CPU runtimes'


# -- copies are real: uploads and downloads round-trip bit for bit -------------------------------
def test_uploads_and_downloads_round_trip(fake):
    """Small uploads go through the pinned staging ring (wrapped several times: the fake runs
    each copy as late as CUDA allows and flags staging bytes rewritten before it ran), large
    ones from pageable memory."""
    backend = _backend()
    small = np.arange(1000, dtype=np.float32)
    many = [backend.from_numpy(small + i) for i in range(3000)]
    big = np.arange(3 * runtime.STAGE_CHUNK // 8 + 5, dtype=np.float64)
    np.testing.assert_array_equal(backend.from_numpy(big).numpy(), big)
    for i in (0, 1, 1500, 2999):
        np.testing.assert_array_equal(many[i].numpy(), small + i)
    assert fake.count("cuEventSynchronize") > 0  # the ring came round to a used chunk


def test_other_threads_make_the_context_current(fake):
    backend = _backend()
    x = backend.from_numpy(np.ones(300, dtype=np.float32))
    out: list[np.ndarray] = []
    worker = threading.Thread(target=lambda: out.append(ops.add(x, x).numpy()), name="w1")
    worker.start()
    worker.join()
    assert out and out[0].shape == (300,)
    assert [c.name for c in fake.calls if c.thread == "w1"][0] == "cuCtxSetCurrent"


def test_plain_allocations_without_memory_pools(monkeypatch, registry):
    fake = install(monkeypatch, memory_pools=False)
    x = _backend().from_numpy(np.arange(5.0))
    np.testing.assert_array_equal(ops.add(x, x).numpy().shape, (5,))
    del x
    gc.collect()
    assert fake.count("cuMemAllocAsync") == 0 and fake.count("cuMemAlloc") > 0
    fake.assert_clean()


# -- each contract check fails on a planted fault -------------------------------------------
F32 = np.dtype(np.float32)


def _binary_add(backend):
    """``binary_add`` (out, x, y, P: four buffers) compiled by the runtime."""
    src = program_source("elementwise", np.dtype(np.float32))
    return backend.runtime.compile(src, "elementwise.cl").kernel("binary_add")


def test_wrong_argument_count_fails(fake):
    backend = _backend()
    rt, kernel = backend.runtime, _binary_add(backend)
    bufs = [rt.allocate(64) for _ in range(5)]
    rt.launch(kernel, 16, bufs[:4])  # right
    with pytest.raises(DriverContractError, match="takes 4 buffers .*bound 3"):
        rt.launch(kernel, 16, bufs[:3])
    with pytest.raises(DriverContractError, match="takes 4 buffers .*bound 5"):
        rt.launch(kernel, 16, bufs)
    _planted(fake, "bound 5")


def test_freed_pointer_fails(fake):
    backend = _backend()
    rt, kernel = backend.runtime, _binary_add(backend)
    bufs = [rt.allocate(64) for _ in range(4)]
    stale = types.SimpleNamespace(ptr=bufs[2].ptr)
    bufs[2] = None  # the runtime frees it (cuMemFreeAsync) when the last reference goes
    gc.collect()
    with pytest.raises(DriverContractError, match="argument 2 0x[0-9a-f]+ was freed"):
        rt.launch(kernel, 16, [*bufs[:2], stale, bufs[3]])
    _planted(fake, "was freed")


def test_out_of_range_copy_fails(fake):
    rt = _backend().runtime
    buf = rt.allocate(100)
    assert rt.download(buf, 100).nbytes == 100
    with pytest.raises(DriverContractError, match="runs past its allocation .* by 4 bytes"):
        rt.download(buf, 104)
    _planted(fake, "by 4 bytes")


def _by_hand(fake: FakeCudaDriver, name: str = "binary_add"):
    """A context made current, a stream, and one kernel of the elementwise program, set up
    with driver calls only (no runtime)."""
    _, dev = fake.cuDeviceGet(0)
    _, ctx = fake.cuDevicePrimaryCtxRetain(dev)
    fake.cuCtxSetCurrent(ctx)
    _, stream = fake.cuStreamCreate(0)
    src = program_source("elementwise", np.dtype(np.float32))
    cubin = compiler.compile_cubin(src, "elementwise.cl", "sm_90")
    fake.register_source(cubin, src)
    _, module = fake.cuModuleLoadData(cubin)
    err, fn = fake.cuModuleGetFunction(module, name.encode())
    assert err == fake.CUresult.CUDA_SUCCESS
    ptrs = [int(fake.cuMemAllocAsync(64, stream)[1]) for _ in range(4)]
    return types.SimpleNamespace(ctx=ctx, stream=stream, fn=fn, ptrs=ptrs, cubin=cubin)


class _Params:
    """A ``void**`` kernel-parameter array over device pointer values (kept alive here)."""

    def __init__(self, values: list[int]) -> None:
        self.values = np.array(values, dtype=np.uint64)
        base = self.values.ctypes.data
        self.slots = np.array([base + 8 * i for i in range(len(values))], dtype=np.uint64)
        self.address = int(self.slots.ctypes.data)


def _launch(fake, h, params, block=256, stream=None):
    stream = h.stream if stream is None else stream
    return fake.cuLaunchKernel(h.fn, 1, 1, 1, block, 1, 1, 0, stream, params, 0)


def test_unbound_slots_and_bad_launch_shapes_fail():
    """Without the runtime hook the fake still sees a slot left over from a previous launch
    (it poisons what it read); block sizes, the stream and the thread's context are checked
    on every launch."""
    fake = FakeCudaDriver()
    h = _by_hand(fake)
    params = _Params(h.ptrs)
    assert _launch(fake, h, params.address) == (fake.CUresult.CUDA_SUCCESS,)
    assert int(params.values[3]) == POISON + 3
    params.values[:3] = h.ptrs[:3]  # a launch binding only three
    with pytest.raises(DriverContractError, match="argument 3 was not bound"):
        _launch(fake, h, params.address)
    params.values[:] = h.ptrs
    with pytest.raises(DriverContractError, match="takes 4 buffers; 3 were bound"):
        _launch(fake, h, (tuple(h.ptrs[:3]), (None,) * 3))
    for block in (100, 2048):
        with pytest.raises(DriverContractError, match=r"must be \(32k, 1, 1\)"):
            _launch(fake, h, (tuple(h.ptrs), (None,) * 4), block=block)
    fake.kernel_limits["binary_add"] = 128
    with pytest.raises(DriverContractError, match="32k <= 128"):
        _launch(fake, h, (tuple(h.ptrs), (None,) * 4), block=256)
    with pytest.raises(DriverContractError, match="not a stream of the current context"):
        _launch(fake, h, (tuple(h.ptrs), (None,) * 4), block=128, stream=0)
    failed: list[BaseException] = []

    def elsewhere() -> None:
        try:
            _launch(fake, h, (tuple(h.ptrs), (None,) * 4), block=128)
        except DriverContractError as exc:
            failed.append(exc)

    worker = threading.Thread(target=elsewhere, name="no-context")
    worker.start()
    worker.join()
    assert failed and "no context is current on thread 'no-context'" in str(failed[0])
    assert len(fake.violations) == 7


def test_unordered_free_double_free_and_rewritten_staging_fail():
    fake = FakeCudaDriver()
    h = _by_hand(fake)
    _, other = fake.cuStreamCreate(0)
    _launch(fake, h, (tuple(h.ptrs), (None,) * 4))
    with pytest.raises(DriverContractError, match="not ordered after them"):
        fake.cuMemFreeAsync(h.ptrs[0], other)  # the launch on h.stream has not run
    fake.cuStreamSynchronize(h.stream)
    assert fake.cuMemFreeAsync(h.ptrs[1], other) == (fake.CUresult.CUDA_SUCCESS,)
    with pytest.raises(DriverContractError, match="double free"):
        fake.cuMemFreeAsync(h.ptrs[1], h.stream)
    with pytest.raises(DriverContractError, match="runs past its allocation"):
        fake.cuMemsetD8Async(h.ptrs[2] + 32, 0, 33, h.stream)
    _, pinned = fake.cuMemHostAlloc(64, 0)
    staged = np.ctypeslib.as_array((ctypes.c_uint8 * 64).from_address(pinned))
    staged[:] = 7
    fake.cuMemcpyHtoDAsync(h.ptrs[3], pinned, 64, h.stream)
    staged[:] = 9  # the copy has not run yet
    fake.cuStreamSynchronize(h.stream)
    assert "was rewritten before the copy ran" in fake.violations[-1]
    assert len(fake.violations) == 4


# -- failure injection: what the fallback and error-naming paths are tested with ---------------
def test_fail_returns_the_error_where_and_as_often_as_asked():
    fake = FakeCudaDriver()
    h = _by_hand(fake)
    R = fake.CUresult
    always = fake.fail("cuMemAllocAsync", "CUDA_ERROR_NOT_SUPPORTED", times=None)
    for _ in range(3):
        assert fake.cuMemAllocAsync(64, h.stream) == (R.CUDA_ERROR_NOT_SUPPORTED, None)
    assert always.hits == 3 and fake.cuMemAlloc(64)[0] == R.CUDA_SUCCESS
    fake.clear_injections()
    second = fake.fail("cuMemHostAlloc", R.CUDA_ERROR_OUT_OF_MEMORY, after=1)
    assert fake.cuMemHostAlloc(64, 0)[0] == R.CUDA_SUCCESS
    assert fake.cuMemHostAlloc(64, 0)[0] == R.CUDA_ERROR_OUT_OF_MEMORY
    assert fake.cuMemHostAlloc(64, 0)[0] == R.CUDA_SUCCESS and second.hits == 1
    fake.fail("cuModuleGetFunction", "CUDA_ERROR_INVALID_HANDLE", when=lambda m, n: n == b"cmp_lt")
    _, module = fake.cuModuleLoadData(h.cubin)
    assert fake.cuModuleGetFunction(module, b"cmp_lt")[0] == R.CUDA_ERROR_INVALID_HANDLE
    assert fake.cuModuleGetFunction(module, b"cmp_gt")[0] == R.CUDA_SUCCESS
    assert fake.cuModuleGetFunction(module, b"nonesuch")[0] == R.CUDA_ERROR_NOT_FOUND
    assert [c.name for c in fake.calls if c.injected] == [
        "cuMemAllocAsync", "cuMemAllocAsync", "cuMemAllocAsync", "cuMemHostAlloc",
        "cuModuleGetFunction",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="no entry point 'cuMemAllocManaged'"):
        fake.fail("cuMemAllocManaged")
    assert fake.cuGetErrorName(R.CUDA_ERROR_NOT_SUPPORTED) == (
        R.CUDA_SUCCESS,
        b"CUDA_ERROR_NOT_SUPPORTED",
    )
    assert b"not supported" in fake.cuGetErrorString(R.CUDA_ERROR_NOT_SUPPORTED)[1]
    assert fake.violations == []


def test_launch_fault_surfaces_at_the_next_sync_and_sticks(fake):
    """An illegal address is reported by the next synchronising call, not by the launch,
    and then by every call of the context (the runtime names the CUresult)."""
    backend = _backend()
    rt, kernel = backend.runtime, _binary_add(backend)
    bufs = [rt.allocate(64) for _ in range(4)]
    injected = fake.fault_launch(kernel="binary_add")
    rt.launch(kernel, 16, bufs)  # accepted
    assert injected.hits == 1
    with pytest.raises(riftco.DeviceLostError, match="binary_add.*CUDA_ERROR_ILLEGAL_ADDRESS"):
        rt.synchronize()
    allocs = fake.count("cuMemAllocAsync")
    with pytest.raises(riftco.DeviceLostError, match="lost since an earlier error.*ILLEGAL"):
        rt.allocate(64)  # refused at once, naming the first error
    with pytest.raises(riftco.DeviceLostError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        rt.download(bufs[0], 4)
    assert fake.count("cuMemAllocAsync") == allocs  # the lost context was not asked again


def test_a_non_sticky_launch_fault_is_reported_once():
    fake = FakeCudaDriver()
    h = _by_hand(fake)
    R = fake.CUresult
    fake.fault_launch("CUDA_ERROR_LAUNCH_TIMEOUT", after=1)
    args = (tuple(h.ptrs), (None,) * 4)
    for _ in range(3):
        assert _launch(fake, h, args) == (R.CUDA_SUCCESS,)
    assert fake.cuCtxSynchronize() == (R.CUDA_ERROR_LAUNCH_TIMEOUT,)
    assert fake.cuCtxSynchronize() == (R.CUDA_SUCCESS,)
    assert fake.cuMemAlloc(64)[0] == R.CUDA_SUCCESS


def test_out_of_memory_is_named(monkeypatch, registry):
    fake = install(monkeypatch, total_memory=1 << 20)
    rt = _backend().runtime
    keep = rt.allocate(1 << 19)
    with pytest.raises(driver.CudaOutOfMemoryError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        rt.allocate(1 << 20)
    del keep
    fake.assert_clean()


def test_a_lowered_kernel_limit_lowers_the_block(fake):
    fake.kernel_limits["binary_add"] = 96
    x = _backend().from_numpy(np.ones(1000, dtype=np.float32))
    ops.add(x, x)
    (launch,) = [launch for launch in fake.launches if launch.kernel == "binary_add"]
    assert launch.block == (96, 1, 1) and launch.grid == (-(-1000 // 96), 1, 1)


def test_two_gpus_interleaved_on_one_thread(monkeypatch, registry):
    """Each GPU's work runs under its own context: switching devices on one thread makes the
    other context current first (the fake rejects a pointer or stream of the wrong one)."""
    fake = install(monkeypatch, devices=2)
    b0, b1 = riftco.device("cuda:0").backend, riftco.device("cuda:1").backend
    x0 = b0.from_numpy(np.arange(6.0))
    x1 = b1.from_numpy(np.arange(6.0) + 1)
    for _ in range(2):
        ops.add(x0, x0)
        ops.mul(x1, x1)
    np.testing.assert_array_equal(x1.numpy(), np.arange(6.0) + 1)
    switches = [int(c.args[0]) for c in fake.calls if c.name == "cuCtxSetCurrent"]
    assert len(set(switches)) == 2 and len(switches) >= 5, switches
    assert len({launch.stream for launch in fake.launches}) == 2
    fake.assert_clean()


def test_threads_sharing_a_gpu(fake):
    """Four threads run ops on one backend at once: each makes the context current on its
    own thread, and their launches (one argument array per runtime) never mix pointers."""
    backend = _backend()
    xs = [backend.from_numpy(np.full(500, i, dtype=np.float32)) for i in range(4)]
    errors: list[BaseException] = []

    def work(x) -> None:
        try:
            for _ in range(50):
                ops.add(ops.mul(x, x), x)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(x,), name=f"t{i}") for i, x in enumerate(xs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {c.thread for c in fake.calls if c.name == "cuCtxSetCurrent"} >= {"t0", "t1", "t2", "t3"}
    assert len(fake.launches) == 4 * 50 * 2


# -- with each kernel run on PoCL, the values too -------------------------------------------
_NO_POCL = pocl_reason()
needs_pocl = pytest.mark.skipif(bool(_NO_POCL), reason=f"no OpenCL device to run on: {_NO_POCL}")
#: Opt in to the whole conformance suite with values (both dtypes, capture included): 478
#: cases, ~100,000 launches, 95 s on one core (2026-12-04).
FULL_ENV = "RIFTCO_CUDA_FAKE_FULL"
#: What every make test checks with values (float32, no capture): an op of each kernel family.
_VALUE_OPS = [
    "adam_update", "attention", "cast", "copy_strided", "cross_entropy", "add", "where",
    "embedding", "flash_attention", "gelu", "layer_norm", "matmul", "linear", "sum", "max",
    "argmax", "softmax", "rms_norm",
]  # fmt: skip


@pytest.fixture
def computing(fake):
    from cuda_fake_compute import OpenCLExecutor

    fake.executor = OpenCLExecutor()
    return fake


@needs_pocl
@pytest.mark.parametrize("capture", [False, True], ids=["eager", "replayed"])
@pytest.mark.parametrize("attention", ["materialized", "flash"])
def test_training_matches_the_cpu_with_kernels_on_pocl(computing, attention, capture):
    """Three steps through the CUDA runtime and the fake (kernels on PoCL) against the
    same three on the CPU backend, which shares no kernel or host code with them."""
    from train_helpers import tiny_device_trainer

    cuda = tiny_device_trainer(riftco.device("cuda"), attention, capture)
    cpu = tiny_device_trainer(riftco.device("cpu"), attention)
    got = [cuda.train_step() for _ in range(3)]
    want = [cpu.train_step() for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(cuda.params, cpu.params, strict=True):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-5)
    assert computing.executor.launches > 3 * 50


@needs_pocl
def test_conformance_values_with_kernels_on_pocl(computing):
    """An op of every kernel family passes conformance (edges, float32) through the CUDA runtime
    and the fake; RIFTCO_CUDA_FAKE_FULL=1 runs every case of both dtypes instead."""
    import os

    from conformance.runner import RunSettings
    from conformance.suite import _run_safely, plan, resolve

    (target,) = resolve("cuda")
    full = os.environ.get(FULL_ENV) == "1"
    if not full:
        target.ops, target.only = _VALUE_OPS, (F32,)
    planned = [c for c in plan(target, RunSettings(max_examples=0)) if full or "/" not in c.case_id]
    results = [r for case in planned for r in _run_safely(case)]
    bad = [
        (r.case_id, r.status, r.reason[:200]) for r in results if r.status not in ("pass", "skip")
    ]
    assert bad == []
    assert len(results) >= (450 if full else 20), len(results)
    launched = {launch.kernel for launch in computing.launches}
    unused = [f for f in families() if not launched & set(source_kernels(program_source(f, F32)))]
    assert unused == ["flash_attention_cpu"], unused


@needs_pocl
def test_half_storage_values_with_kernels_on_pocl(computing):
    """float16 / bfloat16 through the CUDA runtime and the fake (NVRTC compiles the CUDA
    branch of half.h; PoCL runs the same source): casts round once to nearest even, fill
    and strided copies move the bits, and an elementwise op in half storage computes in
    float32 and rounds once; numpy / ml_dtypes say what each must give."""
    from riftco.dtypes import LOW_PRECISION

    be = _backend()
    x = np.array([1 + 2**-11, 1 + 2**-8, 65520.0, -0.0, 2**-25 + 2**-40, 1 / 3, -2.5, 7.0],
                 dtype=np.float32)  # fmt: skip
    for half in sorted(LOW_PRECISION, key=str):
        assert half in be.dtypes and "add" in be.low_precision_ops
        with np.errstate(over="ignore"):
            want = x.astype(half)
            twice = (want.astype(np.float32) * 2).astype(half)
        t = be.cast(be.from_numpy(x), half)
        np.testing.assert_array_equal(be.to_numpy(t).view(np.uint16), want.view(np.uint16))
        sums = be.to_numpy(be.binary("add", t, t))
        np.testing.assert_array_equal(sums.view(np.uint16), twice.view(np.uint16))
        np.testing.assert_array_equal(
            be.to_numpy(be.cast(t, np.dtype(np.float64))), want.astype(np.float64)
        )
        grid = be.cast(be.from_numpy(x.reshape(2, 4)), half)
        got = be.to_numpy(be.copy_strided(grid.permute(1, 0)))
        np.testing.assert_array_equal(got.view(np.uint16), want.reshape(2, 4).T.view(np.uint16))
        be.fill(t, 1 / 3)
        np.testing.assert_array_equal(be.to_numpy(t), np.full(8, 1 / 3).astype(half))
