"""The native backend's ops on float16/bfloat16 storage (kernels_half_ops.c): elementwise
add/sub/mul/div, softmax and LayerNorm computing in float32 and rounding once.

Two checks each: against float64 math on the same rounded inputs, within what one rounding
to the 2-byte dtype (unit roundoff u) plus float32 arithmetic can cost; and bit for bit
against the widened path's definition (the inputs widened exactly, the op in float32 by
numpy, rounded once by numpy/ml_dtypes) where float32 arithmetic is exact enough to pin
every bit (+, -, *, / of 2-byte values: 24 bits >= 2p + 2, so rounding twice is harmless).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import native_backend_module
from riftco.tensor import Tensor

native_mod = native_backend_module()
ml_dtypes = pytest.importorskip("ml_dtypes")

F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
U = {F16: 2.0**-11, BF16: 2.0**-8}
#: half the smallest subnormal's spacing: the absolute error one rounding may cost near 0
TINY = {F16: 2.0**-25, BF16: 2.0**-134}
HALVES = pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
PATHS = pytest.mark.parametrize("path", ["auto", "portable"])


@pytest.fixture(scope="module", params=["auto", "portable"])
def nb(request):
    mp = pytest.MonkeyPatch()
    mp.setenv("RIFTCO_NATIVE_HALF", request.param)
    try:
        return native_mod.NativeBackend()
    finally:
        mp.undo()


def rounded(rng, shape, dtype, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


@HALVES
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("shape", [(7,), (300, 129), (3, 1100)])
def test_elementwise_rounds_once(nb, dtype, op, shape) -> None:
    rng = np.random.default_rng(5)
    a, b = rounded(rng, shape, dtype, 50), rounded(rng, shape, dtype, 50)
    ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op]
    got = nb.to_numpy(getattr(nb, op)(nb.from_numpy(a), nb.from_numpy(b)))
    assert got.dtype == dtype and got.shape == shape
    with np.errstate(all="ignore"):
        want = ufunc(a.astype(np.float32), b.astype(np.float32)).astype(dtype)
        exact = ufunc(a.astype(np.float64), b.astype(np.float64))
    assert np.array_equal(bits(got), bits(want))
    finite = np.abs(exact) < float(ml_dtypes.finfo(dtype).max)  # beyond: inf, pinned above
    err = np.abs(got.astype(np.float64) - exact)[finite]
    tol = (U[dtype] + 2.0**-23) * np.abs(exact[finite]) + TINY[dtype]
    assert np.all(err <= tol), float(np.max(err - tol))


@HALVES
def test_elementwise_broadcast_row_and_views(nb, dtype) -> None:
    """A bias row broadcast over rows (stride 0) and a column slice of a wider matrix
    (row stride > cols) are read in place."""
    rng = np.random.default_rng(6)
    x, row = rounded(rng, (64, 96), dtype), rounded(rng, (40,), dtype)
    xt = nb.from_numpy(x)
    part = Tensor(nb, xt.storage, (64, 40), (96, 1), 10, dtype)
    bias = nb.from_numpy(row)
    brow = Tensor(nb, bias.storage, (64, 40), (0, 1), 0, dtype)
    got = nb.to_numpy(nb.add(part, brow))
    want = (x[:, 10:50].astype(np.float32) + row.astype(np.float32)).astype(dtype)
    assert np.array_equal(bits(got), bits(want))
    scalar = Tensor(nb, bias.storage, (64, 40), (0, 0), 3, dtype)  # a broadcast scalar
    got = nb.to_numpy(nb.mul(part, scalar))
    want = (x[:, 10:50].astype(np.float32) * np.float32(row[3])).astype(dtype)
    assert np.array_equal(bits(got), bits(want))


@HALVES
def test_elementwise_overflow_and_nan(nb, dtype) -> None:
    big = 60000.0 if dtype == F16 else 3e38
    a = np.array([big, -big, np.inf, np.nan, 1.0, 0.0], dtype=dtype)
    b = np.array([big, -big, -np.inf, 1.0, 0.0, 0.0], dtype=dtype)
    s = nb.to_numpy(nb.add(nb.from_numpy(a), nb.from_numpy(b))).astype(np.float64)
    assert list(s[:2]) == [np.inf, -np.inf] and np.isnan(s[2:4]).all() and s[4] == 1.0
    q = nb.to_numpy(nb.div(nb.from_numpy(a), nb.from_numpy(b))).astype(np.float64)
    assert q[4] == np.inf and np.isnan(q[5])


@HALVES
@pytest.mark.parametrize("shape", [(5, 7), (33, 1000), (300, 300)])
def test_softmax_rounds_once_from_float32(nb, dtype, shape) -> None:
    rng = np.random.default_rng(7)
    x = rounded(rng, shape, dtype, 4)
    got = nb.to_numpy(nb.softmax(nb.from_numpy(x))).astype(np.float64)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    exact = e / e.sum(-1, keepdims=True)
    # one rounding to the dtype (u) plus float32's exp and sum (a few 2^-24 per column)
    tol = U[dtype] * exact + 8 * 2.0**-24 * (1 + np.log2(shape[-1])) * exact + TINY[dtype]
    assert np.all(np.abs(got - exact) <= tol)
    assert np.allclose(got.sum(-1), 1.0, atol=U[dtype] * 4)


@HALVES
@pytest.mark.parametrize("shape", [(4, 9), (130, 768)])
def test_layer_norm_rounds_once_and_keeps_float32_statistics(nb, dtype, shape) -> None:
    rng = np.random.default_rng(8)
    x = rounded(rng, shape, dtype, 3) + dtype.type(2)
    g = rounded(rng, shape[-1:], dtype)
    b = rounded(rng, shape[-1:], dtype)
    eps = 1e-5
    y, mean, rstd = nb.layer_norm(nb.from_numpy(x), nb.from_numpy(g), nb.from_numpy(b), eps)
    assert y.dtype == dtype and mean.dtype == np.float32 and rstd.dtype == np.float32
    x64 = x.astype(np.float64)
    mu = x64.mean(-1)
    rs = 1 / np.sqrt(((x64 - mu[:, None]) ** 2).mean(-1) + eps)
    exact = (x64 - mu[:, None]) * rs[:, None] * g.astype(np.float64) + b.astype(np.float64)
    assert np.allclose(nb.to_numpy(mean), mu, rtol=1e-6, atol=1e-6)
    assert np.allclose(nb.to_numpy(rstd), rs, rtol=1e-5)
    got = nb.to_numpy(y).astype(np.float64)
    scale = np.abs(x64 - mu[:, None]) * rs[:, None] * np.abs(g.astype(np.float64))
    tol = U[dtype] * np.abs(exact) + 1e-5 * (scale + np.abs(b.astype(np.float64))) + 1e-6
    assert np.all(np.abs(got - exact) <= tol), float(np.max(np.abs(got - exact) - tol))
