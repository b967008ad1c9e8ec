"""Every CPU primitive against independent math: Python ``math`` loops and hand-worked
cases. The fused ops are in ``test_cpu_fused_ops.py``; the composites are compared with
these natives in ``test_composites.py``.
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
from op_math import FLOATS, TOL, elementwise, t
from riftco import ops
from riftco.backends.cpu.backend import CPUBackend

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
