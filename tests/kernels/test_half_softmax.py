"""softmax.cl in half storage: rows loaded to float32, statistics in float32, each output
rounded once (the forward takes the exp again instead of parking it in the half output).

Two checks per build: within one half ulp of numpy's float64 softmax rounded to the half
(exp is a builtin), and bit for bit what core's widened path gives on the same backend
(cast to float32, the float32 kernel, cast back: one rounding of the same float32
values), which a kernel that rounded twice would miss on many elements. Run as IEEE C,
with fast math at group size 96 and on the Metal stand-in; rows of 5 (one thread each)
and 700 (a team per row on GPU-shaped runs), with -inf entries and a NaN row.
"""

from __future__ import annotations

import numpy as np
import pytest
from half_helpers import half_backend, half_ulps, widened
from riftco.dtypes import LOW_PRECISION
from riftco.ieee import quiet

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

F32 = np.dtype(np.float32)
HALVES = sorted(LOW_PRECISION, key=str)


def _rows(dtype: np.dtype, cols: int) -> np.ndarray:
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((6, cols)) * 4
    x[1, ::3] = -np.inf  # masked entries give exactly 0
    x[2, 1] = np.nan  # a NaN row is NaN throughout
    return x.astype(dtype)


def _softmax64(x: np.ndarray) -> np.ndarray:
    v = x.astype(np.float64)
    with quiet():
        e = np.exp(v - np.nanmax(np.where(np.isfinite(v), v, -np.inf), axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("cols", [5, 700])
@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", ["ieee", "fast96", "metal"])
def test_softmax_rounds_once(kind, dtype, cols):
    be = half_backend(kind)
    assert "softmax" in be.low_precision_ops and "softmax_backward" in be.low_precision_ops
    x = _rows(dtype, cols)
    tx = be.from_numpy(x)
    y = be.to_numpy(be.softmax(tx))
    assert y.dtype == dtype
    want = _softmax64(x).astype(F32).astype(dtype)
    assert np.max(half_ulps(y, want)) <= 1
    np.testing.assert_array_equal(y.view(np.uint16), widened(be, "softmax", tx)[0].view(np.uint16))
    dy = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    ty, tdy = be.from_numpy(y), be.from_numpy(dy)
    dx = be.to_numpy(be.softmax_backward(tdy, ty))
    wide_dx = widened(be, "softmax_backward", tdy, ty)[0]
    np.testing.assert_array_equal(dx.view(np.uint16), wide_dx.view(np.uint16))
    y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
    with quiet():
        dx64 = y64 * (dy64 - (dy64 * y64).sum(axis=-1, keepdims=True))
    finite = np.isfinite(dx64)
    scale = np.abs(dy64).max() * 2.0**-7  # a few units of a half's roundoff of the row
    assert np.all(np.abs(dx.astype(np.float64) - dx64)[finite] <= scale)
