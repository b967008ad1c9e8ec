"""The CUDA backend without a GPU (availability, probe, launch plumbing) and, where an NVIDIA
GPU is present, every primitive case on ``cuda:0`` against float64 numpy.

Here (CI, no driver) the backend must list itself unavailable with a reason, never raise
while probing and never wait long; the device cases skip saying why.
"""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest
from _gpu_cases import CASES, GROUP_SENSITIVE, assert_close
from riftco.errors import BackendUnavailableError

backend_mod = pytest.importorskip("riftco.backends.cuda.backend")
from riftco.backends.cuda import driver, runtime  # noqa: E402

_OK, _WHY = backend_mod.availability()
needs_gpu = pytest.mark.skipif(not _OK, reason=f"no usable NVIDIA GPU here: {_WHY}")


# -- availability and the probe -----------------------------------------------------------------
@pytest.mark.skipif(_OK, reason="an NVIDIA GPU is present: nothing to report unavailable")
def test_unavailable_here_with_a_reason():
    import riftco

    entry = riftco.get_registry().entry("cuda")
    assert not entry.available
    assert entry.reason == _WHY and len(_WHY) > 10
    assert any(w in _WHY.lower() for w in ("driver", "gpu", "cuda.bindings", "nvrtc")), _WHY
    assert backend_mod.CudaBackend.priority == 30  # constant: probing happens lazily
    assert entry.devices() == []
    with pytest.raises(BackendUnavailableError, match="cuda"):
        riftco.device("cuda")


class _FakeDriver:
    """Just enough of ``cuda.bindings.driver`` for the probe."""

    class CUresult:
        CUDA_SUCCESS = 0
        CUDA_ERROR_NO_DEVICE = 100

    class CUdevice_attribute:
        pass

    def __init__(self, init_delay: float = 0.0, init_error: int = 0) -> None:
        self.init_delay = init_delay
        self.init_error = init_error

    def cuInit(self, flags):
        time.sleep(self.init_delay)
        return (self.init_error,)

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_NO_DEVICE" if err == 100 else b"CUDA_ERROR_UNKNOWN")

    def cuDriverGetVersion(self):
        return (0, 13000)

    def cuDeviceGetCount(self):
        return (0, 0)


@pytest.fixture
def fake_driver(monkeypatch):
    def install(fake):
        monkeypatch.setattr(driver, "load", lambda: (fake, ""))
        driver.probe.cache_clear()

    yield install
    driver.probe.cache_clear()


def test_probe_is_bounded_in_time(fake_driver, monkeypatch):
    monkeypatch.setenv(driver.PROBE_TIMEOUT_ENV, "0.3")
    fake_driver(_FakeDriver(init_delay=5.0))
    start = time.perf_counter()
    found = driver.probe()
    assert time.perf_counter() - start < 2.0
    assert found.devices == () and "did not answer within 0.3 s" in found.reason


def test_probe_reports_no_device_and_zero_count(fake_driver):
    fake_driver(_FakeDriver(init_error=100))
    assert "no NVIDIA GPU" in driver.probe().reason
    fake_driver(_FakeDriver())
    assert "no GPU" in driver.probe().reason


def test_probe_never_raises(fake_driver):
    class Broken(_FakeDriver):
        def cuInit(self, flags):
            raise OSError("libcuda.so.1: cannot open shared object file")

    fake_driver(Broken())
    found = driver.probe()
    assert found.devices == () and "libcuda.so.1" in found.reason


def test_check_names_the_call_and_error():
    fake = _FakeDriver()
    assert driver.check(fake, (0, 42), "cuThing") == 42
    assert driver.check(fake, (0, 1, 2), "cuThing") == (1, 2)
    with pytest.raises(
        driver.CudaDriverError, match=r"\[cuda\] cuThing failed: CUDA_ERROR_NO_DEVICE"
    ):
        driver.check(fake, (100,), "cuThing")


# -- runtime pieces that need no device -----------------------------------------------------------
def _props(max_threads: int = 1024) -> driver.DeviceProps:
    return driver.DeviceProps(
        0, "Fake GPU", (9, 0), 1 << 30, 132, max_threads, 49152, 1 << 25, True
    )


def test_group_size_default_and_validation(monkeypatch):
    monkeypatch.delenv(runtime.GROUP_ENV, raising=False)
    assert runtime.group_size_for(_props()) == 256
    assert runtime.group_size_for(_props(max_threads=160)) == 160 // 32 * 32
    assert runtime.group_size_for(_props(), 96) == 96
    for bad in (0, 100, 2048):
        with pytest.raises(BackendUnavailableError, match="multiple of 32"):
            runtime.group_size_for(_props(), bad)
    monkeypatch.setenv(runtime.GROUP_ENV, "352")
    assert runtime.group_size_for(_props()) == 352
    monkeypatch.setenv(runtime.GROUP_ENV, "lots")
    with pytest.raises(BackendUnavailableError, match="not an integer"):
        runtime.group_size_for(_props())


class _LaunchRecorder:
    """A stand-in driver that records cuLaunchKernel and reads the argument array back."""

    class CUresult:
        CUDA_SUCCESS = 0

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        import ctypes

        pointers = (ctypes.c_uint64 * 4).from_address(params)
        values = [ctypes.c_uint64.from_address(p).value for p in pointers]
        self.calls.append((f, gx, bx, values))
        return (0,)


def test_launch_rounds_up_to_whole_blocks_and_passes_pointers():
    """The pointer-array plumbing, checked against a recording driver (no GPU needed)."""
    rec = _LaunchRecorder()
    rt = runtime.CudaRuntime.__new__(runtime.CudaRuntime)
    dev = types.SimpleNamespace(
        lock=threading.RLock(), stream="s", enter=lambda: None, launched=lambda name: None
    )
    rt._dev, rt.drv, rt._sync_each = dev, rec, False
    rt._args = np.zeros(runtime.MAX_ARGS, dtype=np.uint64)
    base = rt._args.ctypes.data
    rt._arg_ptrs = np.array([base + 8 * i for i in range(runtime.MAX_ARGS)], dtype=np.uint64)
    rt._arg_ptrs_addr = int(rt._arg_ptrs.ctypes.data)
    k = runtime.CudaKernel("fn", "k", 96, {"max_threads": 96, "registers": 1, "shared_bytes": 0})
    bufs = [types.SimpleNamespace(ptr=p) for p in (0x7F0000001000, 0x7F0000002000, 2**63 + 5, 7)]
    rt.launch(k, 1000, bufs)
    rt.launch(k, 96, bufs[:1])
    assert rec.calls[0] == ("fn", 11, 96, [0x7F0000001000, 0x7F0000002000, 2**63 + 5, 7])
    assert rec.calls[1][:3] == ("fn", 1, 96) and rec.calls[1][3][0] == 0x7F0000001000
    with pytest.raises(driver.CudaDriverError, match="at most"):
        rt.launch(k, 1, [bufs[0]] * (runtime.MAX_ARGS + 1))


# -- on a GPU -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuda_backends():
    made: dict[int | None, object] = {}

    def get(group_size: int | None = None):
        if group_size not in made:
            made[group_size] = backend_mod.CudaBackend(0, group_size=group_size)
        return made[group_size]

    return get


@needs_gpu
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_primitive_on_cuda(cuda_backends, name, dtype):
    got, want, tol = CASES[name](cuda_backends(), np.random.default_rng(7), np.dtype(dtype))
    assert_close(name, got, want, tol)


@needs_gpu
@pytest.mark.parametrize("name", GROUP_SENSITIVE)
@pytest.mark.parametrize("group", [32, 96, 352])
def test_primitive_on_cuda_irregular_groups(cuda_backends, name, group):
    backend = cuda_backends(group)
    assert backend.runtime.group_size == group
    got, want, tol = CASES[name](backend, np.random.default_rng(11), np.dtype(np.float32))
    assert_close(f"{name}@{group}", got, want, tol)


@needs_gpu
def test_wide_matmul_runs_on_cuda(monkeypatch):
    """``RIFTCO_CUDA_WIDE_MIN_TILES`` (read when the runtime is created) forces the kernel."""
    import riftco.ops as ops

    monkeypatch.setenv(runtime.WIDE_ENV, "1")
    backend = backend_mod.CudaBackend(0)
    assert backend.runtime.capabilities.matmul_wide_min_tiles == 1
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 300, 170))
    b = rng.standard_normal((3, 260, 170))
    got = ops.matmul(backend.from_numpy(a), backend.from_numpy(b), False, True).numpy()
    np.testing.assert_allclose(got, a @ b.transpose(0, 2, 1), rtol=1e-11, atol=1e-11)
    assert any(key[-1] == "matmul_wide" for key in backend._kernels)


@needs_gpu
def test_uploads_and_downloads_round_trip(cuda_backends):
    backend = cuda_backends()
    big = np.arange(3 * runtime.STAGE_CHUNK // 8 + 5, dtype=np.float64)  # pageable path
    small = np.arange(1000, dtype=np.float32)  # pinned staging
    many = [backend.from_numpy(small + i) for i in range(3000)]  # wraps the staging ring
    np.testing.assert_array_equal(backend.from_numpy(big).numpy(), big)
    for i in (0, 1500, 2999):
        np.testing.assert_array_equal(many[i].numpy(), small + i)
