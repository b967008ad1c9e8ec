"""Every primitive kernel on the OpenCL backend against float64 numpy.

Runs at the default group size for float32 and float64, and at the irregular group
sizes Metal may pick (32, 96, 352) for the kernels whose correctness depends on it.
Compiled programs are shared across backend instances (see backends/opencl/runtime.py),
so the extra group sizes cost launches, not compiles.
"""

from __future__ import annotations

import numpy as np
import pytest
from _gpu_cases import CASES, GROUP_SENSITIVE, assert_close

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")


@pytest.fixture(scope="module")
def backends():
    from riftco.backends.opencl.backend import OpenCLBackend

    made: dict[int | None, OpenCLBackend] = {}

    def get(group_size: int | None = None) -> OpenCLBackend:
        if group_size not in made:
            made[group_size] = OpenCLBackend(0, group_size=group_size)
        return made[group_size]

    return get


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_primitive_default_group(backends, name, dtype):
    backend = backends()
    if np.dtype(dtype) not in backend.dtypes:
        pytest.skip(f"device has no {dtype}")
    rng = np.random.default_rng(7)
    got, want, tol = CASES[name](backend, rng, np.dtype(dtype))
    assert_close(name, got, want, tol)


@pytest.mark.parametrize("name", GROUP_SENSITIVE)
@pytest.mark.parametrize("group", [32, 96, 352])
def test_primitive_irregular_groups(backends, name, group):
    backend = backends(group)
    assert backend.runtime.group_size == group
    got, want, tol = CASES[name](backend, np.random.default_rng(11), np.dtype(np.float32))
    assert_close(f"{name}@{group}", got, want, tol)


@pytest.mark.parametrize(
    "name", [n for n in GROUP_SENSITIVE if n.startswith(("matmul_", "views_"))]
)
@pytest.mark.parametrize("group", [96, 352])
def test_gpu_shaped_kernels_on_cpu_device(name, group):
    """On PoCL the host picks CPU-shaped kernels (matmul_panel, copy_strided_rows); the
    GPU-shaped ones (matmul_tiled, copy_strided) that Metal and real GPUs run must keep
    working here too, so this backend is told its device is not a CPU."""
    from riftco.backends.opencl.backend import OpenCLBackend

    backend = OpenCLBackend(0, group_size=group)
    backend.runtime.capabilities = backend.runtime.capabilities.shaped_for(cpu=False)
    got, want, tol = CASES[name](backend, np.random.default_rng(5), np.dtype(np.float32))
    assert_close(f"{name}@{group} (GPU kernels)", got, want, tol)
    used = {key[-1] for key in backend._kernels}
    assert not used & {"matmul_panel", "copy_strided_rows"}, used


def test_cpu_device_uses_cpu_shaped_kernels(backends):
    backend = backends()
    if not backend.runtime.capabilities.is_cpu:
        pytest.skip("the device is a GPU: the CPU-shaped kernels are not chosen")
    import riftco.ops as ops

    a = backend.from_numpy(np.arange(24 * 40, dtype=np.float32).reshape(24, 40) / 100)
    got = ops.matmul(a, a, False, True).numpy()
    want = (np.arange(24 * 40).reshape(24, 40) / 100) @ (np.arange(24 * 40).reshape(24, 40) / 100).T
    np.testing.assert_allclose(got, want, rtol=1e-5)
    used = {key[-1] for key in backend._kernels}
    assert {"matmul_panel", "copy_strided_rows"} <= used, used


def test_group_size_env_is_validated(monkeypatch):
    from riftco.errors import BackendUnavailableError

    monkeypatch.setenv(rt.GROUP_ENV, "100")
    with pytest.raises(BackendUnavailableError, match="multiple of 32"):
        rt.group_size_for(_devices[0])
    monkeypatch.setenv(rt.GROUP_ENV, "96")
    assert rt.group_size_for(_devices[0]) == 96


def test_chain_of_ops_never_downloads(backends):
    backend = backends()
    x = backend.from_numpy(np.linspace(-2, 2, 4096, dtype=np.float32).reshape(64, 64))
    w = backend.from_numpy(np.eye(64, dtype=np.float32) * 0.5)
    backend.reset_transfer_stats()
    import riftco.ops as ops

    y = x
    for _ in range(5):
        y = ops.tanh(ops.add_scalar(ops.matmul(y, w), 0.1))
    loss = ops.sum(ops.mul(y, y), (0, 1))
    stats = backend.transfer_stats()
    assert stats["downloads"] == 0 and stats["uploads"] == 0, stats
    assert stats["synchronizations"] == 0
    assert stats["launches"] >= 16
    value = loss.item()
    after = backend.transfer_stats()
    assert after["downloads"] == 1 and after["download_bytes"] == 4
    # independent float64 recomputation
    ref = np.linspace(-2, 2, 4096).reshape(64, 64)
    for _ in range(5):
        ref = np.tanh(ref @ (np.eye(64) * 0.5) + 0.1)
    assert value == pytest.approx(float((ref * ref).sum()), rel=1e-5)


def test_allocator_reuses_freed_buffers(backends):
    backend = backends()
    x = backend.from_numpy(np.ones((100, 100), dtype=np.float32))
    import riftco.ops as ops

    for _ in range(3):  # warm: the pool now holds a buffer of this size class
        ops.exp(x)
    before = backend.memory_stats()
    for _ in range(20):
        y = ops.exp(x)
        del y
    after = backend.memory_stats()
    assert after["device_allocations"] == before["device_allocations"]
    assert after["reuses"] >= before["reuses"] + 20
    live = backend.memory_stats()["allocated_bytes"]
    z = ops.exp(x)
    assert backend.memory_stats()["allocated_bytes"] == live + 40000
    del z
    assert backend.memory_stats()["allocated_bytes"] == live
    assert backend.memory_stats()["peak_bytes"] >= live + 40000


def test_param_buffers_are_cached(backends):
    backend = backends()
    import riftco.ops as ops

    x = backend.from_numpy(np.ones(777, dtype=np.float32))
    ops.mul_scalar(x, 3.0)
    before = backend.transfer_stats()["param_buffers"]
    for _ in range(10):
        ops.mul_scalar(x, 3.0)
    assert backend.transfer_stats()["param_buffers"] == before


def test_optimizer_step_parameters_are_not_cached(backends):
    """The step's learning rate and bias corrections change every call: cached, each step
    would add a buffer that nothing reads again, and a long run's live objects would grow
    for thousands of steps (issue 29). The values still arrive: the update matches float64."""
    backend = backends()
    rng = np.random.default_rng(0)
    p0, g = rng.standard_normal((2, 257)).astype(np.float32)
    param, grad = backend.from_numpy(p0), backend.from_numpy(g)
    m = backend.from_numpy(np.zeros(257, np.float32))
    v = backend.from_numpy(np.zeros(257, np.float32))
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    backend.adam_update(param, grad, m, v, lr, b1, b2, eps, 0.0, 1)
    cached = len(backend._constants)
    for step in range(2, 41):
        backend.adam_update(param, grad, m, v, lr * step, b1, b2, eps, 0.0, step)
    assert len(backend._constants) == cached
    want, mm, vv = p0.astype(np.float64), np.zeros(257), np.zeros(257)
    for step in range(1, 41):
        mm = b1 * mm + (1 - b1) * g
        vv = b2 * vv + (1 - b2) * g.astype(np.float64) ** 2
        mhat, vhat = mm / (1 - b1**step), vv / (1 - b2**step)
        want -= lr * (1 if step == 1 else step) * mhat / (np.sqrt(vhat) + eps)
    np.testing.assert_allclose(backend.to_numpy(param), want, rtol=2e-5, atol=2e-5)


def test_compile_error_carries_name_and_log(backends):
    from riftco.errors import KernelCompileError

    backend = backends()
    bad = "__kernel void broken_kernel(__global float* x) { x[0] = undefined_symbol_xyz; }"
    with pytest.raises(KernelCompileError) as info:
        backend.compile_source(bad, "broken.cl [float32]")
    msg = str(info.value)
    assert "broken.cl" in msg and "undefined_symbol_xyz" in msg
    with pytest.raises(KernelCompileError, match="no_such_kernel"):
        backend.kernel("elementwise", "no_such_kernel", np.dtype(np.float32))


def test_unsupported_dtype_is_refused(backends):
    from riftco.errors import DTypeError

    backend = backends()
    with pytest.raises(DTypeError, match="int16"):  # float16 is declared (issue 34)
        backend.from_numpy(np.ones(3, dtype=np.int16))


def test_devices_and_priority():
    from riftco.backends.opencl.backend import OpenCLBackend

    ok, reason = OpenCLBackend.is_available()
    assert ok, reason
    devs = OpenCLBackend.devices()
    assert devs and devs[0].index == 0 and "float32" in devs[0].dtypes
    gpu = any(d.details["type"] == "gpu" for d in devs)
    assert OpenCLBackend.priority == (10 if gpu else -1)
