"""Native matmul on strided views, the linear-layer entry points, C elementwise/layout
primitives and the result-buffer pool, against float64 numpy math.

Shapes cross the kernels' thresholds (the small-tensor numpy fallback, one thread, the
team) and their layouts: transposed views, column slices of a wider matrix, broadcast
rows, batch axes of any stride.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import riftco
from helpers import assert_close, native_backend_module
from riftco import ops

native_mod = native_backend_module()

NAT = riftco.device("native")
B = NAT.backend
TOL = {np.float64: (1e-12, 1e-12), np.float32: (2e-5, 2e-5)}


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


def _t(a: np.ndarray) -> riftco.Tensor:
    return riftco.tensor(np.ascontiguousarray(a), device=NAT)


def _close(got: riftco.Tensor, want: np.ndarray, dtype, what: str = "") -> None:
    rtol, atol = TOL[dtype]
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    assert got.dtype == dtype, what
    assert_close(got.numpy(), want, rtol=rtol, atol=atol * scale, msg=what)


@pytest.fixture
def no_copies(monkeypatch):
    """Fail the test if any kernel input is copied (copy_strided or numpy fallback)."""

    def refuse(*args, **kwargs):
        raise AssertionError("an operand was copied")

    monkeypatch.setattr(type(B), "copy_strided", refuse)


# -- matmul ---------------------------------------------------------------------------------
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 2), (64, 64, 64), (300, 70, 130)])
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_dense(rng, dtype, m, k, n, ta, tb):
    a = rng.normal(size=(k, m) if ta else (m, k)).astype(dtype)
    b = rng.normal(size=(n, k) if tb else (k, n)).astype(dtype)
    want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    _close(ops.matmul(_t(a), _t(b), ta, tb), want, dtype)


@pytest.mark.parametrize("ta", [False, True])
def test_matmul_on_transposed_views_without_copy(rng, dtype, ta, no_copies):
    a = rng.normal(size=(96, 200) if ta else (200, 96)).astype(dtype)
    b = rng.normal(size=(150, 200)).astype(dtype)
    av, bv = _t(a).transpose(), _t(b).transpose()  # column-major views
    assert not av.is_dense and not bv.is_dense
    op_a = a if ta else a.T  # op(av) = av^T = a when ta, else av = a^T
    want = op_a.astype(np.float64) @ b.T.astype(np.float64)
    _close(ops.matmul(av, bv, transpose_a=ta), want, dtype)


def test_matmul_on_column_slices_of_a_fused_projection(rng, dtype, no_copies):
    """The q, k, v thirds of a [M, 3C] projection are read in place (row stride 3C)."""
    qkv = rng.normal(size=(256, 3 * 64)).astype(dtype)
    w = rng.normal(size=(64, 48)).astype(dtype)
    t = _t(qkv)
    for i in range(3):
        part = t[:, i * 64 : (i + 1) * 64]
        want = qkv[:, i * 64 : (i + 1) * 64].astype(np.float64) @ w.astype(np.float64)
        _close(ops.matmul(part, _t(w)), want, dtype, f"third {i}")


def test_batched_matmul_on_permuted_heads(rng, dtype, no_copies):
    """[B, T, H, D] permuted to [B, H, T, D]: batch axes of any stride, rows of stride H*D."""
    x = rng.normal(size=(3, 40, 4, 16)).astype(dtype)
    y = rng.normal(size=(3, 40, 4, 16)).astype(dtype)
    xv, yv = _t(x).permute(0, 2, 1, 3), _t(y).permute(0, 2, 1, 3)
    want = np.einsum("bthd,bshd->bhts", x.astype(np.float64), y.astype(np.float64))
    _close(ops.matmul(xv, yv, transpose_b=True), want, dtype)


def test_matmul_copies_a_view_without_unit_stride(rng, dtype):
    a = rng.normal(size=(64, 80)).astype(dtype)
    w = rng.normal(size=(32, 40)).astype(dtype)
    every_other = _t(a)[::2, ::2]  # (32, 40), no unit stride in either axis
    want = a[::2, ::2].T.astype(np.float64) @ w.astype(np.float64)
    _close(ops.matmul(every_other, _t(w), transpose_a=True), want, dtype)


def test_matmul_empty_and_zero_inner(rng, dtype):
    a, b = np.zeros((0, 5), dtype), np.zeros((5, 7), dtype)
    assert ops.matmul(_t(a), _t(b)).shape == (0, 7)
    got = ops.matmul(_t(np.ones((300, 0), dtype)), _t(np.ones((0, 200), dtype)))
    assert got.shape == (300, 200) and not np.any(got.numpy())


# -- linear -----------------------------------------------------------------------------------
@pytest.mark.parametrize("m,k,n", [(7, 3, 5), (1024, 128, 384), (96, 512, 65)])
def test_linear_is_bit_identical_to_matmul_plus_bias(rng, dtype, m, k, n):
    x = _t(rng.normal(size=(m, k)).astype(dtype))
    w = _t(rng.normal(size=(k, n)).astype(dtype))
    b = _t(rng.normal(size=(n,)).astype(dtype))
    fused = B.linear(x, w, b).numpy()
    separate = ops.add(ops.matmul(x, w), B.broadcast_row(b, (m, n))).numpy()
    assert np.array_equal(fused, separate)
    want = x.numpy().astype(np.float64) @ w.numpy().astype(np.float64) + b.numpy()
    _close(B.linear(x, w, b), want, dtype)
    _close(B.linear(x, w, None), want - b.numpy(), dtype, "no bias")


@pytest.mark.parametrize("m,k,n", [(5, 3, 4), (1024, 128, 384), (2000, 64, 33)])
def test_linear_backward(rng, dtype, m, k, n):
    x = rng.normal(size=(m, k)).astype(dtype)
    w = rng.normal(size=(k, n)).astype(dtype)
    dy = (rng.normal(size=(m, n)) + 0.5).astype(dtype)
    dx, dw, db = B.linear_backward(_t(dy), _t(x), _t(w))
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    _close(dx, dy64 @ w64.T, dtype, "dx")
    _close(dw, x64.T @ dy64, dtype, "dw")
    _close(db, dy64.sum(0), dtype, "db")
    none_dx, only_dw, none_db = B.linear_grads(_t(dy), _t(x), _t(w), (False, True, False))
    assert none_dx is None and none_db is None
    assert np.array_equal(only_dw.numpy(), dw.numpy())


def test_linear_backward_reads_a_column_slice_in_place(rng, dtype, no_copies):
    dy_wide = rng.normal(size=(128, 96)).astype(dtype)
    x = rng.normal(size=(128, 16)).astype(dtype)
    w = rng.normal(size=(16, 32)).astype(dtype)
    dy = _t(dy_wide)[:, 32:64]
    dx, dw, db = B.linear_backward(dy, _t(x), _t(w))
    d64 = dy_wide[:, 32:64].astype(np.float64)
    _close(dx, d64 @ w.astype(np.float64).T, dtype, "dx")
    _close(dw, x.astype(np.float64).T @ d64, dtype, "dw")
    _close(db, d64.sum(0), dtype, "db")


# -- elementwise, sums, layout ---------------------------------------------------------------
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("shape", [(3, 4), (1024, 384), (16, 64, 130)])
def test_binary_dense_and_broadcast_row(rng, dtype, op, shape):
    a = rng.normal(size=shape).astype(dtype)
    b = (rng.normal(size=shape) + 3.0).astype(dtype)
    row = (rng.normal(size=shape[-1:]) + 3.0).astype(dtype)
    fn, ref = (
        getattr(ops, op),
        getattr(np, {"sub": "subtract", "mul": "multiply", "div": "divide"}.get(op, op)),
    )
    _close(fn(_t(a), _t(b)), ref(a.astype(np.float64), b), dtype, "dense")
    bias = B.broadcast_row(_t(row), shape)
    _close(fn(_t(a), bias), ref(a.astype(np.float64), row), dtype, "row on the right")
    _close(fn(bias, _t(a)), ref(row.astype(np.float64), a), dtype, "row on the left")


def test_binary_ieee_specials(dtype):
    a = np.zeros((512, 64), dtype)
    b = np.zeros((512, 64), dtype)
    a[0, :4] = [1.0, -1.0, 0.0, np.nan]
    got = ops.div(_t(a), _t(b)).numpy()
    assert got[0, 0] == np.inf and got[0, 1] == -np.inf and np.isnan(got[0, 2:4]).all()
    a[1, 0], b[1, 0] = np.inf, -np.inf
    assert np.isnan(ops.add(_t(a), _t(b)).numpy()[1, 0])


def test_binary_non_uniform_rows_fall_back_correctly(rng, dtype):
    x = rng.normal(size=(16, 64, 32)).astype(dtype)
    y = rng.normal(size=(64, 32)).astype(dtype)
    # broadcast over the first axis only: not one uniform row stride
    yv = riftco.Tensor(B, _t(y).storage, (16, 64, 32), (0, 32, 1), 0, np.dtype(dtype))
    _close(ops.add(_t(x), yv), x.astype(np.float64) + y, dtype)


@pytest.mark.parametrize(
    "shape,axes", [((1024, 384), (0,)), ((8, 128, 65), (0, 1)), ((50000, 3), (0,))]
)
def test_sum_over_leading_axes(rng, dtype, shape, axes):
    x = rng.normal(size=shape).astype(dtype)
    got = ops.sum(_t(x), axes, keepdims=True)
    want = x.astype(np.float64).sum(axis=axes, keepdims=True)
    assert got.shape == want.shape
    _close(got, want, dtype)


def test_sum_is_deterministic_across_thread_counts(rng):
    """Column ranges per thread: the same bits whatever OMP_NUM_THREADS is (checked by
    running the same sum twice; the kernel has no thread-dependent order to vary)."""
    x = _t((rng.normal(size=(4096, 1000)) + 1).astype(np.float32))
    first = ops.sum(x, 0).numpy()
    for _ in range(3):
        assert np.array_equal(ops.sum(x, 0).numpy(), first)


@pytest.mark.parametrize("perm", [(0, 2, 1, 3), (2, 0, 3, 1), (1, 0)])
def test_copy_strided_views(rng, dtype, perm):
    shape = (16, 64, 4, 32) if len(perm) == 4 else (700, 300)
    x = rng.normal(size=shape).astype(dtype)
    v = _t(x).permute(*perm)
    got = v.contiguous() if hasattr(v, "contiguous") else B.copy_strided(v)
    assert got.is_dense
    assert np.array_equal(got.numpy(), np.transpose(x, perm))


def test_concatenate_and_split_last_axis(rng, dtype):
    parts = [rng.normal(size=(512, w)).astype(dtype) for w in (128, 1, 255)]
    wide = rng.normal(size=(512, 600)).astype(dtype)
    pieces = [_t(p) for p in parts] + [_t(wide)[:, 100:228]]  # a column slice, in place
    got = ops.concatenate_last_axis(pieces)
    want = np.concatenate(parts + [wide[:, 100:228]], axis=-1)
    assert np.array_equal(got.numpy(), want)
    outs = ops.split_last_axis(got, [128, 1, 255, 128])
    for o, w in zip(outs, parts + [wide[:, 100:228]], strict=True):
        assert o.is_dense and np.array_equal(o.numpy(), w)


# -- the buffer pool ------------------------------------------------------------------------------
def test_pool_recycles_only_unreachable_buffers():
    n = 1 << 16
    t = _t(np.arange(n, dtype=np.float32))
    y = ops.add(t, t)  # a native result: its buffer comes from the pool
    keep = riftco.backends.cpu.backend.view(y)  # a numpy view that outlives the tensor
    buf_id = id(y.storage.buffer)
    del y
    gc.collect()
    z = ops.mul(t, t)
    assert id(z.storage.buffer) != buf_id, "a buffer with a live view was recycled"
    assert np.array_equal(keep, 2 * np.arange(n, dtype=np.float32))
    z_id = id(z.storage.buffer)
    del z
    gc.collect()
    w = ops.sub(t, t)
    assert id(w.storage.buffer) == z_id, "an unreachable buffer was not recycled"
    assert not np.any(w.numpy())
    stats = B.memory_stats()
    assert stats["pooled_bytes"] >= 0 and stats["allocated_bytes"] >= w.size * 4
    B.empty_cache()
    assert B.memory_stats()["pooled_bytes"] == 0


def test_linear_gelu_backward_returns_its_scratch_to_the_pool():
    """Its dH scratch ([m, n]) is pooled once the call returns: a cffi pointer still holding
    the buffer made the pool refuse it, and every step page-faulted it back in."""
    rng = np.random.default_rng(0)
    m, k, n = 64, 32, 512  # dH: 128 KiB, above the pool's floor
    x, w = (
        _t(rng.standard_normal((m, k), dtype=np.float32)),
        _t(rng.standard_normal((k, n), dtype=np.float32)),
    )
    b = _t(np.zeros(n, np.float32))
    y, h = B.linear_gelu(x, w, b, "tanh")
    B.empty_cache()
    grads = B.linear_gelu_backward(y, x, w, h, "tanh")
    assert B.memory_stats()["pooled_bytes"] == m * n * 4
    assert [g.shape for g in grads] == [(m, k), (k, n), (n,)]
