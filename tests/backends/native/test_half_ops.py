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


def product_tolerance(dtype, a64, b64, exact) -> np.ndarray:
    """One rounding of the result (u) plus float32 accumulation over K (K 2^-24 |A||B|)."""
    k = a64.shape[-1]
    return U[dtype] * np.abs(exact) + k * 2.0**-23 * (np.abs(a64) @ np.abs(b64)) + TINY[dtype]


@HALVES
@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_float32_tiles_in_every_layout(nb, dtype, ta, tb) -> None:
    """m = 300 spans several 128-row tiles; transposed operands are read as stored."""
    rng = np.random.default_rng(9)
    m, k, n = 300, 70, 90
    a = rounded(rng, (k, m) if ta else (m, k), dtype)
    b = rounded(rng, (n, k) if tb else (k, n), dtype)
    got = nb.to_numpy(nb.matmul(nb.from_numpy(a), nb.from_numpy(b), ta, tb))
    assert got.dtype == dtype and got.shape == (m, n)
    a64 = (a.T if ta else a).astype(np.float64)
    b64 = (b.T if tb else b).astype(np.float64)
    exact = a64 @ b64
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= product_tolerance(dtype, a64, b64, exact))


@HALVES
def test_linear_adds_the_bias_before_the_one_rounding(nb, dtype) -> None:
    rng = np.random.default_rng(10)
    x, w = rounded(rng, (260, 64), dtype), rounded(rng, (64, 200), dtype)
    bias = rounded(rng, (200,), dtype, 100)  # large: a bias rounded on its own would show
    got = nb.to_numpy(nb.linear(nb.from_numpy(x), nb.from_numpy(w), nb.from_numpy(bias)))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    exact = x64 @ w64 + bias.astype(np.float64)
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= product_tolerance(dtype, x64, w64, exact))
    # one rounding of the float32 sum lands on the float64 result's rounding nearly always
    # (float32's own error moves a few values across a rounding boundary); the product
    # rounded first and the bias added after misses 8% of them on this sample
    once = bits(exact.astype(dtype))
    assert np.mean(bits(got) == once) > 0.999
    prod = nb.to_numpy(nb.matmul(nb.from_numpy(x), nb.from_numpy(w), False, False))
    twice = (prod.astype(np.float32) + bias.astype(np.float32)).astype(dtype)
    assert np.mean(bits(twice) == once) < 0.99, "the sample cannot tell one rounding"


@HALVES
def test_matmul_batched_and_strided_run_widened_on_the_backend(nb, dtype) -> None:
    rng = np.random.default_rng(11)
    a, b = rounded(rng, (3, 40, 50), dtype), rounded(rng, (3, 50, 60), dtype)
    got = nb.to_numpy(nb.matmul(nb.from_numpy(a), nb.from_numpy(b), False, False))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    assert got.dtype == dtype and got.shape == (3, 40, 60)
    assert np.all(
        np.abs(got.astype(np.float64) - exact) <= product_tolerance(dtype, a64, b64, exact)
    )


def gelu64(x: np.ndarray, approximate: str) -> tuple[np.ndarray, np.ndarray]:
    """GELU and its derivative in float64 (erf form, or the tanh form)."""
    from math import erf, pi, sqrt

    if approximate == "tanh":
        c = sqrt(2 / pi)
        t = np.tanh(c * (x + 0.044715 * x**3))
        dt = (1 - t**2) * c * (1 + 3 * 0.044715 * x**2)
        return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * dt
    cdf = 0.5 * (1 + np.vectorize(erf)(x / sqrt(2)))
    return x * cdf, cdf + x * np.exp(-0.5 * x * x) / sqrt(2 * pi)


@HALVES
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_its_backward_round_once(nb, dtype, approximate) -> None:
    rng = np.random.default_rng(12)
    x = rounded(rng, (70, 300), dtype, 3)  # 21,000 elements: several chunks and threads
    dy = rounded(rng, (70, 300), dtype)
    xt = nb.from_numpy(x)
    y = nb.to_numpy(nb.gelu(xt, approximate)).astype(np.float64)
    dx = nb.to_numpy(nb.gelu_backward(nb.from_numpy(dy), xt, approximate)).astype(np.float64)
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    f, df = gelu64(x64, approximate)
    # one rounding (u) plus float32's erf/exp (a few 2^-24, relative to |x|)
    assert np.all(np.abs(y - f) <= U[dtype] * np.abs(f) + 2.0**-20 * np.abs(x64) + TINY[dtype])
    want = dy64 * df
    tol = U[dtype] * np.abs(want) + 2.0**-20 * np.abs(dy64) * (1 + np.abs(x64)) + TINY[dtype]
    assert np.all(np.abs(dx - want) <= tol)


@HALVES
def test_softmax_backward_rounds_once(nb, dtype) -> None:
    rng = np.random.default_rng(13)
    x64 = rng.standard_normal((300, 200)) * 3
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    y = (e / e.sum(-1, keepdims=True)).astype(dtype)
    dy = rounded(rng, (300, 200), dtype)
    got = nb.to_numpy(nb.softmax_backward(nb.from_numpy(dy), nb.from_numpy(y)))
    assert got.dtype == dtype
    y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
    s = (dy64 * y64).sum(-1, keepdims=True)
    want = y64 * (dy64 - s)
    scale = y64 * (np.abs(dy64) + (np.abs(dy64) * y64).sum(-1, keepdims=True))
    tol = U[dtype] * np.abs(want) + 200 * 2.0**-23 * scale + TINY[dtype]
    assert np.all(np.abs(got.astype(np.float64) - want) <= tol)


@HALVES
def test_add_layer_norm_normalises_the_float32_sum(nb, dtype) -> None:
    rng = np.random.default_rng(14)
    x, r = rounded(rng, (130, 200), dtype, 3), rounded(rng, (130, 200), dtype, 3)
    g, b = rounded(rng, (200,), dtype), rounded(rng, (200,), dtype)
    s, y, mean, rstd = nb.add_layer_norm(*(nb.from_numpy(a) for a in (x, r, g, b)), 1e-5)
    assert (s.dtype, y.dtype, mean.dtype, rstd.dtype) == (dtype, dtype, np.float32, np.float32)
    s64 = x.astype(np.float64) + r.astype(np.float64)  # exact: two 2-byte values
    assert np.array_equal(bits(nb.to_numpy(s)), bits(s64.astype(dtype)))
    mu = s64.mean(-1)
    rs = 1 / np.sqrt(((s64 - mu[:, None]) ** 2).mean(-1) + 1e-5)
    assert np.allclose(nb.to_numpy(mean), mu, rtol=1e-6, atol=1e-6)
    assert np.allclose(nb.to_numpy(rstd), rs, rtol=1e-5)
    exact = (s64 - mu[:, None]) * rs[:, None] * g.astype(np.float64) + b.astype(np.float64)
    scale = np.abs(s64 - mu[:, None]) * rs[:, None] * np.abs(g.astype(np.float64))
    tol = U[dtype] * np.abs(exact) + 1e-5 * (scale + np.abs(b.astype(np.float64))) + 1e-6
    assert np.all(np.abs(nb.to_numpy(y).astype(np.float64) - exact) <= tol)


@HALVES
def test_embedding_gathers_rows_bit_for_bit(nb, dtype) -> None:
    pats = np.arange(0, 1 << 16, 64, dtype=np.uint32).astype(np.uint16)  # NaNs and all
    table = pats.reshape(64, 16).view(dtype)
    ids = np.array([[3, 0, 63], [3, 5, 62]], dtype=np.int64)
    got = nb.to_numpy(nb.embedding(nb.from_numpy(table), nb.from_numpy(ids)))
    assert got.dtype == dtype and got.shape == (2, 3, 16)
    assert np.array_equal(bits(got), pats.reshape(64, 16)[ids])


@HALVES
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_linear_gelu_applies_gelu_to_the_float32_sum(nb, dtype, approximate) -> None:
    rng = np.random.default_rng(15)
    x, w, bias = (
        rounded(rng, (260, 64), dtype),
        rounded(rng, (64, 96), dtype),
        rounded(rng, (96,), dtype),
    )
    y, h = nb.linear_gelu(*(nb.from_numpy(a) for a in (x, w, bias)), approximate)
    assert y.dtype == dtype and h.dtype == dtype and y.shape == h.shape == (260, 96)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    exact_h = x64 @ w64 + bias.astype(np.float64)
    tol_h = product_tolerance(dtype, x64, w64, exact_h)
    assert np.all(np.abs(nb.to_numpy(h).astype(np.float64) - exact_h) <= tol_h)
    f, df = gelu64(exact_h, approximate)
    tol_y = (
        U[dtype] * np.abs(f)
        + np.abs(df) * (tol_h - U[dtype] * np.abs(exact_h))
        + 2.0**-20 * np.abs(exact_h)
    )
    assert np.all(np.abs(nb.to_numpy(y).astype(np.float64) - f) <= tol_y + TINY[dtype])


@HALVES
@pytest.mark.parametrize("fused", [False, True], ids=["layer_norm", "add_layer_norm"])
def test_layer_norm_backward_rounds_once(nb, dtype, fused) -> None:
    """150 rows: three blocks of the per-block partial sums (64 rows each), the last short."""
    rng = np.random.default_rng(16)
    rows, cols = 150, 96
    x, dy, ds = (rounded(rng, (rows, cols), dtype, s) for s in (3, 1, 1))
    g = rounded(rng, (cols,), dtype)
    x64, dy64, g64 = (a.astype(np.float64) for a in (x, dy, g))
    mu = x64.mean(-1)
    rs = 1 / np.sqrt(x64.var(-1) + 1e-5)
    mean, rstd = nb.from_numpy(mu.astype(np.float32)), nb.from_numpy(rs.astype(np.float32))
    xt, dyt, gt = nb.from_numpy(x), nb.from_numpy(dy), nb.from_numpy(g)
    if fused:
        dx, dg, db = nb.add_layer_norm_backward(dyt, nb.from_numpy(ds), xt, gt, mean, rstd)
    else:
        dx, dg, db = nb.layer_norm_backward(dyt, xt, gt, mean, rstd)
    assert (dx.dtype, dg.dtype, db.dtype) == (dtype, dtype, dtype)
    # float64 math on the float32 statistics the kernel was given
    m32, r32 = mu.astype(np.float32).astype(np.float64), rs.astype(np.float32).astype(np.float64)
    xh = (x64 - m32[:, None]) * r32[:, None]
    gdy = dy64 * g64
    want_dx = r32[:, None] * (
        gdy - gdy.mean(-1, keepdims=True) - xh * (gdy * xh).mean(-1, keepdims=True)
    )
    if fused:
        want_dx = want_dx + ds.astype(np.float64)
    want_dg, want_db = (dy64 * xh).sum(0), dy64.sum(0)
    scale = r32[:, None] * (np.abs(gdy) + np.abs(gdy).mean(-1, keepdims=True) * (1 + np.abs(xh)))
    tol = U[dtype] * np.abs(want_dx) + 64 * 2.0**-24 * (scale + np.abs(want_dx)) + TINY[dtype]
    assert np.all(np.abs(nb.to_numpy(dx).astype(np.float64) - want_dx) <= tol)
    for got, want, terms in ((dg, want_dg, np.abs(dy64 * xh)), (db, want_db, np.abs(dy64))):
        t = U[dtype] * np.abs(want) + rows * 2.0**-23 * terms.sum(0) + TINY[dtype]
        assert np.all(np.abs(nb.to_numpy(got).astype(np.float64) - want) <= t)


@HALVES
@pytest.mark.parametrize("op", ["add_scalar", "mul_scalar"])
def test_scalar_ops_use_the_float32_value_and_round_once(nb, dtype, op) -> None:
    """1/3 and 0.1 are not 2-byte values: rounded to float32 first (as the widened path
    does), the products and sums differ from those with the value rounded to the dtype."""
    rng = np.random.default_rng(17)
    x = rounded(rng, (100, 333), dtype, 10)
    value = 1 / 3 if op == "mul_scalar" else 0.1
    got = nb.to_numpy(getattr(nb, op)(nb.from_numpy(x), value))
    v32 = np.float32(value)
    wide = x.astype(np.float32) * v32 if op == "mul_scalar" else x.astype(np.float32) + v32
    assert np.array_equal(bits(got), bits(wide.astype(dtype)))  # the widened definition
    v16 = np.float32(dtype.type(value))
    other = x.astype(np.float32) * v16 if op == "mul_scalar" else x.astype(np.float32) + v16
    assert not np.array_equal(bits(got), bits(other.astype(dtype)))


@HALVES
def test_cross_entropy_keeps_float32_rows_and_rounds_the_gradient_once(nb, dtype) -> None:
    rng = np.random.default_rng(18)
    n, v = 70, 500
    logits = rounded(rng, (n, v), dtype, 4)
    t = rng.integers(0, v, n)
    t[::9] = -1  # ignored rows
    lt, tt = nb.from_numpy(logits), nb.from_numpy(t.astype(np.int64))
    loss, lse = nb.cross_entropy(lt, tt)
    assert loss.dtype == np.float32 and lse.dtype == np.float32
    x64 = logits.astype(np.float64)
    m = x64.max(-1)
    want_lse = m + np.log(np.exp(x64 - m[:, None]).sum(-1))
    picked = x64[np.arange(n), np.maximum(t, 0)]
    want_loss = np.where(t < 0, 0.0, want_lse - picked)
    assert np.allclose(nb.to_numpy(lse), want_lse, rtol=2e-6, atol=2e-6)
    assert np.allclose(nb.to_numpy(loss), want_loss, rtol=1e-5, atol=1e-5)
    dloss = rng.standard_normal(n).astype(np.float32)
    g = nb.cross_entropy_backward(nb.from_numpy(dloss), lt, tt, lse)
    assert g.dtype == dtype
    p = np.exp(x64 - want_lse[:, None])
    onehot = np.zeros((n, v))
    onehot[np.arange(n), np.maximum(t, 0)] = 1
    want = np.where(t[:, None] < 0, 0.0, dloss[:, None].astype(np.float64) * (p - onehot))
    tol = U[dtype] * np.abs(want) + 1e-5 * np.abs(dloss[:, None]) * (p + onehot) + TINY[dtype]
    got = nb.to_numpy(g).astype(np.float64)
    assert np.all(np.abs(got - want) <= tol)
    assert np.all(got[t < 0] == 0) and not np.signbit(got[t < 0]).any()


@HALVES
@pytest.mark.parametrize("gelu", ["", "tanh"])
def test_linear_backward_rounds_each_gradient_once(nb, dtype, gelu) -> None:
    rng = np.random.default_rng(19)
    m, k, n = 200, 48, 72
    x, w, dy = rounded(rng, (m, k), dtype), rounded(rng, (k, n), dtype), rounded(rng, (m, n), dtype)
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    g64 = dy64
    if gelu:
        h = rounded(rng, (m, n), dtype, 2)
        h64 = h.astype(np.float64)
        dx_, dw_, db_ = nb.linear_gelu_backward(*(nb.from_numpy(a) for a in (dy, x, w, h)), gelu)
        g64 = dy64 * gelu64(h64, gelu)[1]
    else:
        dx_, dw_, db_ = nb.linear_backward(*(nb.from_numpy(a) for a in (dy, x, w)))
    assert (dx_.dtype, dw_.dtype, db_.dtype) == (dtype, dtype, dtype)
    # dH rounds in float32 first when fused (2^-24 relative): inside the product tolerance
    for got, a64, b64 in ((dx_, g64, w64.T), (dw_, x64.T, g64)):
        exact = a64 @ b64
        err = np.abs(nb.to_numpy(got).astype(np.float64) - exact)
        assert np.all(err <= product_tolerance(dtype, a64, b64, exact)), got.shape
    exact_db = g64.sum(0)
    tol = U[dtype] * np.abs(exact_db) + m * 2.0**-23 * np.abs(g64).sum(0) + TINY[dtype]
    assert np.all(np.abs(nb.to_numpy(db_).astype(np.float64) - exact_db) <= tol)
