"""Every CPU op against independent math: Python ``math`` loops, finite differences and
hand-worked cases. Primitives first, then the fused ops (GELU, softmax, LayerNorm,
embedding, cross-entropy, attention and flash attention, AdamW). The composites are
compared with these natives in ``test_composites.py``.
"""

from __future__ import annotations

import gc
import itertools
import math
import operator

import numpy as np
import pytest
import riftco
from helpers import add_backend, assert_close
from riftco import ops
from riftco.backends.cpu.backend import CPUBackend

FLOATS = [np.float32, np.float64]
# float32 results of one rounded op compared with float64 math of the float32 inputs
TOL = {np.float32: dict(rtol=2e-6, atol=1e-7), np.float64: dict(rtol=1e-13, atol=1e-15)}


def t(a, dtype=None) -> riftco.Tensor:
    return riftco.tensor(np.asarray(a, dtype=dtype))


def elementwise(fn, *arrays: np.ndarray) -> np.ndarray:
    """Apply a Python scalar function element by element, in float64."""
    flat = [np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays]
    out = [fn(*(float(f[i]) for f in flat)) for i in range(flat[0].size)]
    return np.array(out, dtype=np.float64).reshape(np.shape(arrays[0]))


# -- elementwise ---------------------------------------------------------------------------
UNARY = {
    "neg": (lambda v: 0.0 - v, False),
    "exp": (math.exp, False),
    "log": (math.log, True),
    "sqrt": (math.sqrt, True),
    "rsqrt": (lambda v: 1.0 / math.sqrt(v), True),
    "tanh": (math.tanh, False),
    "abs": (lambda v: math.copysign(v, 1.0), False),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_against_math(name, dtype, rng):
    fn, positive = UNARY[name]
    x = rng.uniform(0.1, 3.0, (3, 4)) if positive else rng.normal(0, 2, (3, 4))
    x = x.astype(dtype)
    out = getattr(ops, name)(t(x))
    assert_close(out, elementwise(fn, x), **TOL[dtype], msg=name, check_dtype=dtype)
    # the same op on a transposed (strided) view sees the view's values
    view = getattr(ops, name)(t(x).T)
    assert_close(view, elementwise(fn, x.T), **TOL[dtype], msg=f"{name} on a view")


def test_unary_special_values():
    assert ops.log(t([0.0])).numpy()[0] == -math.inf
    assert math.isnan(ops.sqrt(t([-1.0])).numpy()[0])
    assert ops.rsqrt(t([4.0])).numpy()[0] == 0.5
    assert ops.abs(t([-0.0, -3.5])).tolist() == [0.0, 3.5]


BINARY = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "maximum": lambda a, b: a if a >= b else b,
    "minimum": lambda a, b: a if a <= b else b,
}


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_against_math(name, dtype, rng):
    a = rng.normal(0, 2, (2, 3, 4)).astype(dtype)
    b = (rng.uniform(0.5, 2.0, (2, 3, 4)) * rng.choice([-1, 1], (2, 3, 4))).astype(dtype)
    b[0, 0, 0] = a[0, 0, 0]  # a tie for maximum/minimum
    out = getattr(ops, name)(t(a), t(b))
    assert_close(out, elementwise(BINARY[name], a, b), **TOL[dtype], msg=name, check_dtype=dtype)


def test_operator_sugar_matches_math():
    a, b = np.array([1.5, -2.0, 4.0]), np.array([0.5, 4.0, -8.0])
    ta, tb = t(a), t(b)
    assert (ta + tb).tolist() == [2.0, 2.0, -4.0]
    assert (ta - tb).tolist() == [1.0, -6.0, 12.0]
    assert (ta * tb).tolist() == [0.75, -8.0, -32.0]
    assert (ta / tb).tolist() == [3.0, -0.5, -0.5]
    assert (ta + 1).tolist() == [2.5, -1.0, 5.0]
    assert (2 * ta).tolist() == [3.0, -4.0, 8.0]
    assert (ta - 1).tolist() == [0.5, -3.0, 3.0]
    assert (ta / 2).tolist() == [0.75, -1.0, 2.0]
    assert (-ta).tolist() == [-1.5, 2.0, -4.0]


@pytest.mark.parametrize(
    "name,value,fn",
    [
        ("add_scalar", -1.25, lambda v: v + -1.25),
        ("mul_scalar", 3.0, lambda v: v * 3.0),
        ("pow_scalar", 2.0, lambda v: v * v),
        ("pow_scalar", 3.0, lambda v: v * v * v),  # negative bases stay negative
        ("pow_scalar", -1.0, lambda v: 1.0 / v),
        ("pow_scalar", -2.0, lambda v: 1.0 / (v * v)),
        ("pow_scalar", 0.0, lambda v: 1.0),
    ],
)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_scalar_ops(name, value, fn, dtype):
    x = np.array([-2.0, -0.5, 0.25, 1.5, 3.0], dtype=dtype)
    out = getattr(ops, name)(t(x), value)
    assert_close(out, elementwise(fn, x), **TOL[dtype], msg=f"{name}({value})", check_dtype=dtype)


def test_pow_scalar_fractional_needs_nonnegative_base():
    out = ops.pow_scalar(t([4.0, 0.25, -1.0]), 0.5).numpy()
    assert out[:2].tolist() == [2.0, 0.5] and math.isnan(out[2])


def test_where_and_compare():
    a = np.array([[1.0, 2.0, 3.0], [4.0, -1.0, 0.0]])
    b = np.array([[1.0, 5.0, 2.0], [4.0, 0.0, -2.0]])
    expected = {
        "lt": [[0, 1, 0], [0, 1, 0]],
        "le": [[1, 1, 0], [1, 1, 0]],
        "gt": [[0, 0, 1], [0, 0, 1]],
        "ge": [[1, 0, 1], [1, 0, 1]],
        "eq": [[1, 0, 0], [1, 0, 0]],
        "ne": [[0, 1, 1], [0, 1, 1]],
    }
    for op, want in expected.items():
        mask = ops.compare(t(a), t(b), op)
        assert mask.dtype == np.float64, op  # masks have the operands' float dtype
        assert mask.tolist() == want, op
    cond = t([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    assert ops.where(cond, t(a), t(b)).tolist() == [[1.0, 5.0, 3.0], [4.0, 0.0, 0.0]]


def test_cast_truncates_toward_zero_and_keeps_values():
    x = t([-1.7, -0.2, 0.5, 2.9, 7.0], np.float32)
    assert ops.cast(x, "int32").tolist() == [-1, 0, 0, 2, 7]
    assert ops.cast(x, riftco.int64).dtype == np.int64
    ints = t([3, -4], np.int32)
    as_float = ops.cast(ints, np.float64)
    assert as_float.dtype == np.float64 and as_float.tolist() == [3.0, -4.0]
    assert ops.cast(x, np.float32) is x  # no copy when nothing changes


# -- reductions --------------------------------------------------------------------------
def loop_reduce(x: np.ndarray, axes, keepdims: bool, combine) -> np.ndarray:
    axes = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)
    keep = [d for d in range(x.ndim) if d not in axes]
    out_shape = tuple(x.shape[d] for d in keep)
    out = np.empty(out_shape)
    for oidx in itertools.product(*(range(x.shape[d]) for d in keep)):
        vals = []
        for ridx in itertools.product(*(range(x.shape[d]) for d in axes)):
            full = [0] * x.ndim
            for d, i in zip(keep, oidx, strict=True):
                full[d] = i
            for d, i in zip(axes, ridx, strict=True):
                full[d] = i
            vals.append(float(x[tuple(full)]))
        out[oidx] = combine(vals)
    if keepdims:
        out = out.reshape(tuple(1 if d in axes else x.shape[d] for d in range(x.ndim)))
    return out


@pytest.mark.parametrize("axes", [None, 0, 1, 2, -1, (0, 2), (1, 2), (2, 0)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_max_mean_against_loops(axes, keepdims, rng):
    x = rng.normal(0, 1, (2, 3, 4))
    ax = (axes,) if isinstance(axes, int) else axes
    want_sum = loop_reduce(x, ax, keepdims, math.fsum)
    assert_close(ops.sum(t(x), axes, keepdims), want_sum, rtol=1e-13, atol=1e-14)
    assert_close(ops.max(t(x), axes, keepdims), loop_reduce(x, ax, keepdims, max))
    count = x.size // want_sum.size
    assert_close(ops.mean(t(x), axes, keepdims), want_sum / count, rtol=1e-13, atol=1e-14)


def test_full_reduction_is_zero_dimensional():
    x = t([[1.0, 2.0], [3.0, 4.5]])
    s = ops.sum(x)
    assert s.shape == () and s.item() == 10.5
    assert ops.max(x).shape == () and ops.max(x).item() == 4.5
    assert ops.mean(x).item() == 2.625
    assert ops.sum(x, keepdims=True).shape == (1, 1)


def test_argmax_first_maximum_int32():
    x = t([[1.0, 3.0, 3.0, 0.0], [-5.0, -7.0, -5.0, -6.0], [0.0, 0.0, 0.0, 9.0]])
    out = ops.argmax(x)
    assert out.dtype == np.int32 and out.tolist() == [1, 0, 3]
    assert ops.argmax(t([[[2.0, 1.0]]])).shape == (1, 1)


def test_sum_to_shape_against_loops(rng):
    x = rng.normal(0, 1, (2, 3, 4))
    assert_close(ops.sum_to_shape(t(x), (3, 1)), loop_reduce(x, (0, 2), False, math.fsum)[:, None])
    assert_close(ops.sum_to_shape(t(x), (4,)), loop_reduce(x, (0, 1), False, math.fsum))
    assert_close(ops.sum_to_shape(t(x), (1, 3, 4)), x.sum(axis=0, keepdims=True))
    assert ops.sum_to_shape(t(x), (2, 3, 4)).tolist() == x.tolist()


# -- linear algebra and layout -------------------------------------------------------------
def loop_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    *batch, m, k = a.shape
    n = b.shape[-1]
    out = np.zeros((*batch, m, n))
    for bi in itertools.product(*(range(d) for d in batch)):
        for i in range(m):
            for j in range(n):
                out[bi + (i, j)] = math.fsum(
                    float(a[bi + (i, p)]) * float(b[bi + (p, j)]) for p in range(k)
                )
    return out


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_matmul_against_loops(ta, tb, dtype, rng):
    a = rng.normal(0, 1, (2, 3, 4)).astype(dtype)  # [B, M, K]
    b = rng.normal(0, 1, (2, 4, 5)).astype(dtype)  # [B, K, N]
    a_in = np.swapaxes(a, -1, -2).copy() if ta else a
    b_in = np.swapaxes(b, -1, -2).copy() if tb else b
    out = ops.matmul(t(a_in), t(b_in), transpose_a=ta, transpose_b=tb)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    assert_close(out, loop_matmul(a, b), **tol, check_dtype=dtype)
    assert_close(t(a) @ t(b), loop_matmul(a, b), **tol)


def test_matmul_of_views_uses_view_values(rng):
    a = rng.normal(0, 1, (4, 3))
    b = rng.normal(0, 1, (5, 4))
    assert_close(ops.matmul(t(a).T, t(b).T), loop_matmul(a.T.copy(), b.T.copy()), rtol=1e-13)


def test_concatenate_and_split_last_axis():
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(10.0, 14.0).reshape(2, 2)
    joined = ops.concatenate_last_axis([t(a), t(b)])
    assert joined.tolist() == [[0, 1, 2, 10, 11], [3, 4, 5, 12, 13]]
    parts = ops.split_last_axis(joined, [1, 3, 1])
    assert [p.shape for p in parts] == [(2, 1), (2, 3), (2, 1)]
    assert parts[0].tolist() == [[0], [3]]
    assert parts[1].tolist() == [[1, 2, 10], [4, 5, 12]]
    assert parts[2].tolist() == [[11], [13]]
    assert all(p.is_dense for p in parts)


# -- allocation, transfer, in-place ----------------------------------------------------------
def test_from_numpy_copies_and_to_numpy_respects_views():
    src = np.arange(12.0).reshape(3, 4)
    x = t(src)
    src[0, 0] = 99.0
    assert x.numpy()[0, 0] == 0.0  # upload copied
    host = x.numpy()
    host[1, 1] = -1.0
    assert x.numpy()[1, 1] == 5.0  # download copied
    view = x[1:, ::2].T
    assert view.numpy().tolist() == [[4.0, 8.0], [6.0, 10.0]]
    assert view.numpy().flags.c_contiguous


def test_copy_strided_materialises_broadcast_and_slices():
    row = t([1.0, 2.0, 3.0])
    b = row.broadcast_to(2, 3)
    dense = b.contiguous()
    assert dense.is_dense and dense.storage is not row.storage
    assert dense.tolist() == [[1, 2, 3], [1, 2, 3]]
    x = t(np.arange(10.0))
    assert x[3:9:2].contiguous().tolist() == [3.0, 5.0, 7.0]


def test_fill_bumps_version_and_allocate_zeros_are_filled():
    backend = riftco.device("cpu").backend
    x = backend.allocate((2, 3), np.dtype(np.float32))
    v0 = x.version
    ops.fill_(x, 2.5)
    assert x.version == v0 + 1 and x.tolist() == [[2.5] * 3] * 2
    assert riftco.zeros((2, 2)).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert riftco.full(3, -1.0, dtype="float64").tolist() == [-1.0, -1.0, -1.0]
    assert backend.synchronize() is None


def test_memory_stats_track_live_buffers():
    backend = riftco.device("cpu").backend
    before = backend.memory_stats()["allocated_bytes"]
    x = riftco.zeros((1000,), dtype="float64")
    assert backend.memory_stats()["allocated_bytes"] == before + 8000
    assert backend.memory_stats()["peak_bytes"] >= before + 8000
    view = x[10:20]
    del x
    assert backend.memory_stats()["allocated_bytes"] == before + 8000  # the view keeps it
    del view
    assert backend.memory_stats()["allocated_bytes"] == before


def test_assign_replaces_values_and_bumps_version():
    dst = t([[1.0, 2.0], [3.0, 4.0]])
    src = t([[5.0, 6.0], [7.0, 8.0]]).T
    v0 = dst.version
    assert ops.assign_(dst, src) is dst
    assert dst.tolist() == [[5.0, 7.0], [6.0, 8.0]] and dst.version == v0 + 1


# == fused ops ================================================================================
def gelu_exact(v: float) -> float:
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


def gelu_tanh(v: float) -> float:
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


GELU = {"none": gelu_exact, "tanh": gelu_tanh}


def test_gelu_known_values():
    # x * Phi(x) from tables of the standard normal CDF
    out = ops.gelu(t([0.0, 1.0, -1.0, 2.0]), "none").numpy()
    assert_close(out, [0.0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416])
    assert_close(ops.gelu(t([1.0]), "tanh"), [0.8411919906082768], rtol=1e-12)


@pytest.mark.parametrize("approx", ["none", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_gelu_and_backward_against_math(approx, dtype, rng):
    x = rng.normal(0, 2, (3, 5)).astype(dtype)
    dy = rng.normal(0, 1, (3, 5)).astype(dtype)
    f = GELU[approx]
    assert_close(ops.gelu(t(x), approx), elementwise(f, x), **TOL[dtype], check_dtype=dtype)
    h = 1e-5  # central differences of the Python-math definition
    slope = elementwise(lambda v: (f(v + h) - f(v - h)) / (2 * h), x)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-8, atol=1e-9)
    got = ops.gelu_backward(t(dy), t(x), approx)
    assert_close(got, dy.astype(np.float64) * slope, **tol, check_dtype=dtype)


def softmax_rows(x: np.ndarray) -> np.ndarray:
    """exp(x - logsumexp(x)) with math.fsum, row by row."""
    out = np.empty(x.shape)
    for idx in itertools.product(*(range(d) for d in x.shape[:-1])):
        row = [float(v) for v in x[idx]]
        m = max(row)
        lse = m + math.log(math.fsum(math.exp(v - m) for v in row))
        out[idx] = [math.exp(v - lse) for v in row]
    return out


def test_softmax_against_math_and_hand_cases(rng):
    x = rng.normal(0, 3, (2, 3, 6))
    assert_close(ops.softmax(t(x)), softmax_rows(x), rtol=1e-13, atol=1e-16)
    inf = math.inf
    hand = np.array(
        [
            [1000.0, 1000.0, -inf, -inf],  # huge equal values: no overflow
            [1e4, 0.0, -1e4, -inf],  # exp(-1e4) underflows to exactly 0
            [-inf, 0.0, -inf, -inf],  # one finite entry takes everything
            [0.0, -inf, math.log(3.0), -inf],  # 1 : 3
        ]
    )
    want = [[0.5, 0.5, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0.25, 0, 0.75, 0]]
    got = ops.softmax(t(hand)).numpy()
    assert_close(got, want, rtol=1e-15, atol=0)
    assert (got[hand == -inf] == 0).all()  # -inf entries give exactly 0
    big32 = ops.softmax(t([[3e38, 3e38, -3e38]], np.float32)).numpy()
    assert big32.tolist() == [[0.5, 0.5, 0.0]]


def test_softmax_of_all_minus_inf_row_is_nan():
    out = ops.softmax(t([[-math.inf, -math.inf], [0.0, 0.0]])).numpy()
    assert np.isnan(out[0]).all() and out[1].tolist() == [0.5, 0.5]


def test_softmax_backward_against_finite_differences(rng):
    x = rng.normal(0, 1, (2, 5))
    dy = rng.normal(0, 1, (2, 5))
    y = softmax_rows(x)
    h = 1e-6
    want = np.zeros_like(x)
    for i, j in itertools.product(range(2), range(5)):
        xp, xm = x.copy(), x.copy()
        xp[i, j] += h
        xm[i, j] -= h
        want[i, j] = np.sum(dy * (softmax_rows(xp) - softmax_rows(xm))) / (2 * h)
    assert_close(ops.softmax_backward(t(dy), t(y)), want, rtol=1e-7, atol=1e-9)


def layer_norm_loops(x, gamma, beta, eps):
    c = x.shape[-1]
    y, means, rstds = np.empty(x.shape), np.empty(x.shape[:-1]), np.empty(x.shape[:-1])
    for idx in itertools.product(*(range(d) for d in x.shape[:-1])):
        row = [float(v) for v in x[idx]]
        mean = math.fsum(row) / c
        var = math.fsum((v - mean) ** 2 for v in row) / c
        r = 1.0 / math.sqrt(var + eps)
        means[idx], rstds[idx] = mean, r
        y[idx] = [
            (v - mean) * r * float(g) + float(b) for v, g, b in zip(row, gamma, beta, strict=True)
        ]
    return y, means, rstds


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_layer_norm_against_loops(dtype, rng):
    x = rng.normal(1, 2, (2, 3, 5)).astype(dtype)
    gamma = rng.normal(1, 0.5, 5).astype(dtype)
    beta = rng.normal(0, 0.5, 5).astype(dtype)
    y, mean, rstd = ops.layer_norm(t(x), t(gamma), t(beta), 1e-5)
    wy, wm, wr = layer_norm_loops(x, gamma, beta, 1e-5)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for got, want, what in ((y, wy, "y"), (mean, wm, "mean"), (rstd, wr, "rstd")):
        assert_close(got, want, **tol, msg=what, check_dtype=dtype)


def test_layer_norm_of_constant_row_is_beta():
    gamma, beta = t([2.0, -1.0, 0.5, 3.0]), t([0.25, 0.5, -0.75, 1.0])
    y, mean, rstd = ops.layer_norm(t([[3.0, 3.0, 3.0, 3.0]]), gamma, beta, 1e-4)
    assert y.tolist() == [[0.25, 0.5, -0.75, 1.0]]
    assert mean.tolist() == [3.0]
    assert_close(rstd, [100.0], rtol=1e-15)  # 1 / sqrt(0 + 1e-4)


def test_layer_norm_backward_against_finite_differences(rng):
    x = rng.normal(0, 1, (2, 2, 4))
    gamma, beta = rng.normal(1, 0.3, 4), rng.normal(0, 0.3, 4)
    dy = rng.normal(0, 1, (2, 2, 4))
    eps = 1e-5

    def loss(xx, gg, bb):
        return float(np.sum(dy * layer_norm_loops(xx, gg, bb, eps)[0]))

    def fd(arr, f):
        g, h = np.zeros_like(arr), 1e-6
        for idx in np.ndindex(arr.shape):
            p, m = arr.copy(), arr.copy()
            p[idx] += h
            m[idx] -= h
            g[idx] = (f(p) - f(m)) / (2 * h)
        return g

    _, mean, rstd = ops.layer_norm(t(x), t(gamma), t(beta), eps)
    dx, dgamma, dbeta = ops.layer_norm_backward(t(dy), t(x), t(gamma), mean, rstd)
    tol = dict(rtol=1e-6, atol=1e-8)
    assert_close(dx, fd(x, lambda v: loss(v, gamma, beta)), **tol, msg="dx")
    assert_close(dgamma, fd(gamma, lambda v: loss(x, v, beta)), **tol, msg="dgamma")
    assert_close(dbeta, fd(beta, lambda v: loss(x, gamma, v)), **tol, msg="dbeta")


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_embedding_gathers_rows_with_repeats(id_dtype):
    table = np.arange(15.0).reshape(5, 3)
    ids = np.array([[1, 1, 4], [0, 1, 2]], dtype=id_dtype)
    out = ops.embedding(t(table), t(ids))
    want = [[[float(table[i, c]) for c in range(3)] for i in row] for row in ids.tolist()]
    assert out.shape == (2, 3, 3) and out.tolist() == want


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_embedding_backward_accumulates_repeated_ids(id_dtype):
    ids = np.array([2, 0, 2, 2], dtype=id_dtype)
    dy = np.array([[1.0, 2.0], [10.0, 20.0], [0.5, 0.25], [4.0, -8.0]])
    out = ops.embedding_backward(t(dy), t(ids), 4)
    want = [[10.0, 20.0], [0.0, 0.0], [1.0 + 0.5 + 4.0, 2.0 + 0.25 - 8.0], [0.0, 0.0]]
    assert out.shape == (4, 2) and out.tolist() == want


def test_embedding_backward_is_deterministic(rng):
    ids = rng.integers(0, 7, (4, 33)).astype(np.int32)
    dy = rng.normal(0, 1, (4, 33, 8)).astype(np.float32)
    first = ops.embedding_backward(t(dy), t(ids), 7).numpy()
    for _ in range(3):
        assert ops.embedding_backward(t(dy), t(ids), 7).numpy().tobytes() == first.tobytes()
    want = np.zeros((7, 8))
    for (i, j), k in np.ndenumerate(ids):
        want[k] += dy[i, j]
    assert_close(first, want, rtol=1e-5, atol=1e-5)


def test_cross_entropy_against_math_with_ignored_targets():
    logits = np.array([[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 0.0, 0.0], [1000.0, 0.0, -5.0, 2.0]])
    targets = np.array([2, -1, 0], dtype=np.int32)
    loss, lse = ops.cross_entropy(t(logits), t(targets))
    want_lse = [math.log(math.fsum(math.exp(v) for v in logits[0])), math.log(4.0), 1000.0]
    assert_close(lse, want_lse, rtol=1e-15)  # computed for ignored rows too
    assert_close(loss, [want_lse[0] - 0.5, 0.0, 0.0], rtol=1e-14, atol=1e-300)
    assert loss.numpy()[1] == 0.0  # ignored: exactly zero


def test_cross_entropy_backward_is_softmax_minus_onehot(rng):
    logits = rng.normal(0, 2, (4, 5))
    targets = np.array([3, -1, 0, 4], dtype=np.int64)
    dloss = np.array([1.0, 5.0, -0.5, 2.0])
    _, lse = ops.cross_entropy(t(logits), t(targets))
    got = ops.cross_entropy_backward(t(dloss), t(logits), t(targets), lse).numpy()
    p = softmax_rows(logits)
    want = np.zeros((4, 5))
    for i, target in enumerate(targets):
        if target >= 0:
            want[i] = dloss[i] * (p[i] - np.eye(5)[target])
    assert_close(got, want, rtol=1e-12, atol=1e-15)
    assert (got[1] == 0).all()


# -- attention ---------------------------------------------------------------------------------
def attention_loops(q, k, v, scale, causal):
    """out and probs from per-row Python math (natural log-sum-exp of masked scores too)."""
    b, h, n, d = q.shape
    out, probs, lse = np.zeros(q.shape), np.zeros((b, h, n, n)), np.zeros((b, h, n))
    for bi, hi, i in itertools.product(range(b), range(h), range(n)):
        keys = range(i + 1) if causal else range(n)
        s = {
            j: scale * math.fsum(float(q[bi, hi, i, c]) * float(k[bi, hi, j, c]) for c in range(d))
            for j in keys
        }  # noqa: E501
        m = max(s.values())
        total = math.fsum(math.exp(sj - m) for sj in s.values())
        lse[bi, hi, i] = m + math.log(total)
        for j, sj in s.items():
            probs[bi, hi, i, j] = math.exp(sj - lse[bi, hi, i])
        out[bi, hi, i] = probs[bi, hi, i] @ v[bi, hi]
    return out, probs, lse


def qkv(rng, shape, dtype=np.float64):
    return tuple(rng.normal(0, 1, shape).astype(dtype) for _ in range(3))


@pytest.mark.parametrize("causal", [True, False])
def test_attention_against_loops(causal, rng):
    q, k, v = qkv(rng, (2, 2, 5, 3))
    out, probs = ops.attention(t(q), t(k), t(v), 0.5, causal)
    want_out, want_p, _ = attention_loops(q, k, v, 0.5, causal)
    assert_close(out, want_out, rtol=1e-12, atol=1e-13, msg="out")
    assert_close(probs, want_p, rtol=1e-12, atol=1e-14, msg="probs")


def test_causal_attention_masked_rows_by_hand(rng):
    q, k, v = qkv(rng, (1, 1, 3, 2))
    out, probs = ops.attention(t(q), t(k), t(v), 1.0, True)
    p = probs.numpy()[0, 0]
    assert p[0].tolist() == [1.0, 0.0, 0.0]  # the first query sees only itself
    assert p[np.triu_indices(3, 1)].tolist() == [0.0, 0.0, 0.0]  # masked: exactly 0
    assert_close(out.numpy()[0, 0, 0], v[0, 0, 0], rtol=1e-15)
    e = math.exp(float(q[0, 0, 1] @ k[0, 0, 0]) - float(q[0, 0, 1] @ k[0, 0, 1]))
    assert_close(p[1], [e / (1 + e), 1 / (1 + e), 0.0], rtol=1e-14)


def finite_diff_attention(q, k, v, dout, scale, causal):
    h = 1e-6
    grads = []
    for which in range(3):
        arrs = [q, k, v]
        g = np.zeros_like(arrs[which])
        for idx in np.ndindex(g.shape):
            plus = [a.copy() for a in arrs]
            minus = [a.copy() for a in arrs]
            plus[which][idx] += h
            minus[which][idx] -= h
            fp = np.sum(dout * attention_loops(*plus, scale, causal)[0])
            fm = np.sum(dout * attention_loops(*minus, scale, causal)[0])
            g[idx] = (fp - fm) / (2 * h)
        grads.append(g)
    return grads


@pytest.mark.parametrize("causal", [True, False])
def test_attention_backward_against_finite_differences(causal, rng):
    q, k, v = qkv(rng, (1, 2, 3, 2))
    dout = rng.normal(0, 1, q.shape)
    _, probs = ops.attention(t(q), t(k), t(v), 0.7, causal)
    got = ops.attention_backward(t(dout), t(q), t(k), t(v), probs, 0.7)
    want = finite_diff_attention(q, k, v, dout, 0.7, causal)
    for g, w, name in zip(got, want, "qkv", strict=True):
        assert_close(g, w, rtol=1e-6, atol=1e-8, msg=f"d{name}")


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("n", [1, 5, 64, 65, 130])  # around and across the 64-key block
def test_flash_matches_materialised_and_lse(n, causal, rng):
    q, k, v = qkv(rng, (1, 2, n, 4))
    scale = 1.0 / math.sqrt(4)
    out, lse = ops.flash_attention(t(q), t(k), t(v), scale, causal)
    ref_out, probs = ops.attention(t(q), t(k), t(v), scale, causal)
    assert_close(out, ref_out, rtol=1e-12, atol=1e-13, msg="flash out vs materialised")
    # lse = log(sum(exp(scaled masked scores))), written directly (scores are small here)
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if causal:
        s = np.where(np.triu(np.ones((n, n), dtype=bool), 1), -np.inf, s)
    assert_close(lse, np.log(np.sum(np.exp(s), axis=-1)), rtol=1e-13, atol=1e-13, msg="lse")
    dout = rng.normal(0, 1, q.shape)
    flash_grads = ops.flash_attention_backward(t(dout), t(q), t(k), t(v), out, lse, scale, causal)
    ref_grads = ops.attention_backward(t(dout), t(q), t(k), t(v), probs, scale)
    for g, w, name in zip(flash_grads, ref_grads, "qkv", strict=True):
        assert_close(g, w, rtol=1e-10, atol=1e-12, msg=f"flash d{name}")


def test_flash_small_case_against_loops_float32(rng):
    q, k, v = qkv(rng, (2, 1, 70, 3), np.float32)
    out, lse = ops.flash_attention(t(q), t(k), t(v), 0.3, True)
    want_out, _, want_lse = attention_loops(q, k, v, 0.3, True)
    assert out.dtype == np.float32 and lse.dtype == np.float32
    assert_close(out, want_out, rtol=1e-4, atol=1e-5)
    assert_close(lse, want_lse, rtol=1e-5, atol=1e-5)


# -- AdamW ------------------------------------------------------------------------------------
def test_adam_update_against_scalar_loop(rng):
    p0 = rng.normal(0, 1, 6)
    grads = [rng.normal(0, 1, 6) for _ in range(3)]
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.99, 1e-8, 0.1
    param, m, v = t(p0), riftco.zeros(6, dtype="float64"), riftco.zeros(6, dtype="float64")
    versions = param.version
    want_p, want_m, want_v = [float(a) for a in p0], [0.0] * 6, [0.0] * 6
    for step, g in enumerate(grads, start=1):
        ops.adam_update(param, t(g), m, v, lr, b1, b2, eps, wd, step)
        for i, gi in enumerate(g):
            want_m[i] = b1 * want_m[i] + (1 - b1) * gi
            want_v[i] = b2 * want_v[i] + (1 - b2) * gi * gi
            mhat, vhat = want_m[i] / (1 - b1**step), want_v[i] / (1 - b2**step)
            want_p[i] -= lr * (mhat / (math.sqrt(vhat) + eps) + wd * want_p[i])
    assert_close(param, want_p, rtol=1e-13, atol=1e-15, msg="param")
    assert_close(m, want_m, rtol=1e-13, atol=1e-15, msg="m")
    assert_close(v, want_v, rtol=1e-13, atol=1e-15, msg="v")
    assert param.version == versions + 3


class ReleaseRecorder(CPUBackend):
    """Records every buffer handed back: a buffer pool would reuse exactly these."""

    name = "recorder"
    released: list[int] = []

    def _release(self, buffer: np.ndarray) -> None:
        ReleaseRecorder.released.append(id(buffer))
        super()._release(buffer)


def test_assign_never_releases_the_live_buffer(registry):
    add_backend(registry, ReleaseRecorder)
    ReleaseRecorder.released.clear()
    dst = riftco.tensor(np.zeros(4), device="recorder")
    old = id(dst.buffer)
    ops.assign_(dst, riftco.tensor(np.arange(4.0), device="recorder"))
    gc.collect()
    assert id(dst.buffer) not in ReleaseRecorder.released  # still in use by dst
    assert old in ReleaseRecorder.released  # the replaced buffer went back
    assert dst.tolist() == [0.0, 1.0, 2.0, 3.0]
