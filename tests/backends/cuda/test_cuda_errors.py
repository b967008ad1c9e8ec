"""The CUDA runtime's error and fallback paths, on the validating fake driver: CUresults
named with code and description, a sticky fault that marks the device lost (and a
conformance run that stops there), RIFTCO_CUDA_SYNC naming the faulting kernel, and the
memory fallbacks (pools -> cuMemAlloc, pinned -> pageable), each said, never silent."""

from __future__ import annotations

import gc
import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cuda.bindings.driver", reason="the fake borrows cuda.bindings' enums")
compiler = pytest.importorskip("riftco.backends.cuda.compiler")
if compiler.nvrtc_status():
    pytest.skip(f"NVRTC cannot compile here: {compiler.nvrtc_status()}", allow_module_level=True)

import riftco  # noqa: E402
import riftco.ops as ops  # noqa: E402
from cuda_fake_driver import install  # noqa: E402
from riftco.backends.cuda import runtime  # noqa: E402
from riftco.kernel_host.sources import program_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def fake(monkeypatch, registry):
    monkeypatch.delenv(runtime.SYNC_ENV, raising=False)
    monkeypatch.delenv(runtime.POOLS_ENV, raising=False)
    drv = install(monkeypatch)
    yield drv
    gc.collect()
    drv.assert_clean()


def _backend():
    return riftco.device("cuda").backend


def _add_kernel(backend):
    src = program_source("elementwise", np.dtype(np.float32))
    return backend.runtime.compile(src, "elementwise.cl").kernel("binary_add")


def test_errors_name_the_call_the_curesult_its_code_and_description(fake):
    backend = _backend()
    fake.fail("cuMemcpyDtoHAsync", "CUDA_ERROR_INVALID_VALUE")
    x = backend.runtime.allocate(16)
    with pytest.raises(riftco.RiftcoError) as info:
        backend.runtime.download(x, 16)
    msg = str(info.value)
    assert "cuMemcpyDtoHAsync(16 bytes) failed: CUDA_ERROR_INVALID_VALUE (code 1;" in msg
    assert len(msg.split("(code 1; ", 1)[1]) > 10  # the driver's own description follows


def test_a_missing_function_names_its_curesult(fake):
    backend = _backend()
    src = program_source("elementwise", np.dtype(np.float32))
    program = backend.runtime.compile(src, "elementwise.cl")
    with pytest.raises(riftco.KernelCompileError, match="not found .*CUDA_ERROR_NOT_FOUND"):
        program.kernel("no_such_kernel")
    fake.fail("cuModuleGetFunction", "CUDA_ERROR_INVALID_HANDLE")
    with pytest.raises(riftco.RiftcoError, match="cuModuleGetFunction.*INVALID_HANDLE") as info:
        program.kernel("binary_sub")
    assert "not found" not in str(info.value)  # not every failure is a missing kernel


def test_a_sync_error_names_the_kernels_since_the_last_sync(fake):
    backend = _backend()
    rt, kernel = backend.runtime, _add_kernel(backend)
    bufs = [rt.allocate(64) for _ in range(3)] + [rt.constant(np.int32([4]).tobytes())]
    rt.launch(kernel, 4, bufs)
    fake.fault_launch("CUDA_ERROR_LAUNCH_FAILED", kernel="binary_add")
    rt.launch(kernel, 4, bufs)
    rt.launch(kernel, 4, bufs)
    with pytest.raises(riftco.DeviceLostError) as info:
        rt.synchronize()
    msg = str(info.value)
    assert "after 3 launches (first binary_add, last binary_add" in msg
    assert "RIFTCO_CUDA_SYNC=1 names the failing one" in msg and "LAUNCH_FAILED" in msg


def test_sync_mode_names_the_faulting_kernel_at_its_launch(fake, monkeypatch):
    monkeypatch.setenv(runtime.SYNC_ENV, "1")
    backend = _backend()
    rt, kernel = backend.runtime, _add_kernel(backend)
    bufs = [rt.allocate(64) for _ in range(3)] + [rt.constant(np.int32([4]).tobytes())]
    syncs = fake.count("cuStreamSynchronize")
    rt.launch(kernel, 4, bufs)
    assert fake.count("cuStreamSynchronize") == syncs + 1  # each launch waited for
    fake.fault_launch("CUDA_ERROR_ILLEGAL_ADDRESS", kernel="binary_add")
    with pytest.raises(
        riftco.DeviceLostError, match=r"binary_add \(1 x \d+ threads, RIFTCO_CUDA_SYNC=1\)"
    ):
        rt.launch(kernel, 4, bufs)


def test_a_lost_device_stops_conformance_at_one_case(fake):
    """The planted-fault script of the device check, run against the fake: the fault is
    injected into a launch on a live buffer (the GPU run points at address 16 instead)."""
    spec = importlib.util.spec_from_file_location("gpu_fault", ROOT / "bench" / "gpu_fault.py")
    assert spec and spec.loader
    gpu_fault = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_fault)
    backend = _backend()
    live = backend.runtime.allocate(1 << 22)
    fake.fault_launch("CUDA_ERROR_ILLEGAL_ADDRESS", kernel="unary_neg", after=1)
    assert gpu_fault.main(["--device", "cuda:0"], pointer=live.ptr) == 0


def test_pools_refused_fall_back_to_cumemalloc_said(fake):
    fake.fail("cuMemAllocAsync", "CUDA_ERROR_NOT_SUPPORTED", times=None)
    backend = _backend()
    with pytest.warns(RuntimeWarning, match="cuMemAllocAsync failed with CUDA_ERROR_NOT_SUPPORTED"):
        x = backend.from_numpy(np.arange(6, dtype=np.float32))
    ops.add(x, x)  # launches bind cuMemAlloc'd pointers (the fake checks them live)
    assert np.array_equal(x.numpy(), np.arange(6))  # copies are real on the fake
    memory, _ = runtime.memory_paths(0, True)
    assert memory.startswith("cuMemAlloc/cuMemFree (cuMemAllocAsync failed with")
    assert type(backend).devices()[0].details["memory"] == memory  # riftco backends' words
    assert fake.count("cuMemAlloc") >= 1
    del x
    gc.collect()
    assert fake.count("cuMemFreeAsync") == 0  # plain allocations are freed plainly


def test_out_of_memory_is_not_a_reason_to_leave_the_pool(fake):
    fake.fail("cuMemAllocAsync", "CUDA_ERROR_OUT_OF_MEMORY")
    backend = _backend()
    with pytest.raises(MemoryError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        backend.runtime.allocate(1 << 20)
    assert backend.runtime._dev.pools  # still the stream-ordered pool
    assert runtime.memory_paths(0, True)[0].startswith("stream-ordered pool")


def test_pinned_staging_refused_uploads_pageable_said(fake):
    fake.fail("cuMemHostAlloc", "CUDA_ERROR_OUT_OF_MEMORY", times=None)
    with pytest.warns(RuntimeWarning, match="pinned staging refused"):
        backend = _backend()
        x = backend.from_numpy(np.arange(5, dtype=np.float32))
    assert np.array_equal(x.numpy(), np.arange(5))
    assert runtime.memory_paths(0, True)[1].startswith("pageable copies (pinned staging refused")


def test_pools_off_forces_the_plain_paths(fake, monkeypatch):
    monkeypatch.setenv(runtime.POOLS_ENV, "0")
    backend = _backend()
    x = backend.from_numpy(np.arange(7, dtype=np.float32))
    assert np.array_equal(x.numpy(), np.arange(7))
    assert fake.count("cuMemAllocAsync") == 0 and fake.count("cuMemHostAlloc") == 0
    assert runtime.memory_paths(0, True) == (
        "cuMemAlloc/cuMemFree (RIFTCO_CUDA_POOLS=0)",
        "pageable copies (RIFTCO_CUDA_POOLS=0)",
    )
