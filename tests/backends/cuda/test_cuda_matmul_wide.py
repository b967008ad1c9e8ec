"""``matmul_wide`` (the GPU matmul CUDA picks for large products) against float64 numpy.

The kernel is plain shaders/ code, so it is checked here on OpenCL (PoCL), told to take the
wide path for every product, at the fast group size (256) and at sizes that exercise the
multi-pass and direct-staging paths (96, 352): every transpose pair, batches, and edges that
are not multiples of the 128x128 tile or the 8-deep K slice.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

_SHAPES = [  # m, k, n, batch, transpose_a, transpose_b
    (130, 37, 129, 2, False, False),
    (130, 37, 129, 1, True, False),
    (257, 19, 131, 1, False, True),
    (128, 8, 128, 1, True, True),
    (200, 300, 140, 3, False, True),
    (9, 1, 300, 1, False, False),
]


@pytest.fixture(scope="module")
def wide_backends():
    from riftco.backends.opencl.backend import OpenCLBackend

    made = {}

    def get(group):
        if group not in made:
            b = OpenCLBackend(0, group_size=group)
            caps = b.runtime.capabilities.shaped_for(cpu=False)
            b.runtime.capabilities = dataclasses.replace(caps, matmul_wide_min_tiles=1)
            made[group] = b
        return made[group]

    return get


@pytest.mark.parametrize("group", [256, 96, 352])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_wide_matches_numpy(wide_backends, group, dtype):
    import riftco.ops as ops

    backend = wide_backends(group)
    if np.dtype(dtype) not in backend.dtypes:
        pytest.skip(f"device has no {dtype}")
    rng = np.random.default_rng(group)
    for m, k, n, batch, ta, tb in _SHAPES:
        a = rng.standard_normal((batch, k, m) if ta else (batch, m, k))
        b = rng.standard_normal((batch, n, k) if tb else (batch, k, n))
        want = (a.transpose(0, 2, 1) if ta else a) @ (b.transpose(0, 2, 1) if tb else b)
        got = ops.matmul(
            backend.from_numpy(a.astype(dtype)), backend.from_numpy(b.astype(dtype)), ta, tb
        ).numpy()
        tol = 4e-6 * np.sqrt(k) if dtype == "float32" else 1e-13 * np.sqrt(k)
        scale = np.abs(a).max() * np.abs(b).max() * k
        err = np.abs(got - want).max() / scale
        assert err < tol, f"{(m, k, n, batch, ta, tb)} {dtype}@{group}: error {err:.2e}"
    assert "matmul_wide" in {key[-1] for key in backend._kernels}


def test_wide_path_is_opt_in():
    """Runtimes whose ``matmul_wide_min_tiles`` is ``math.inf`` (OpenCL, Metal) keep their
    kernels."""
    import riftco.ops as ops
    from riftco.backends.opencl.backend import OpenCLBackend

    backend = OpenCLBackend(0)
    backend.runtime.capabilities = backend.runtime.capabilities.shaped_for(cpu=False)
    x = backend.from_numpy(np.ones((256, 256), dtype=np.float32))
    np.testing.assert_allclose(ops.matmul(x, x, False, False).numpy(), 256.0)
    assert "matmul_wide" not in {key[-1] for key in backend._kernels}
