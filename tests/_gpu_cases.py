"""Primitive cases shared by the OpenCL and Metal stand-in tests.

Each case runs raw ops on a backend and returns (got, want, tol) where ``want`` is
computed in float64 numpy, written independently of the kernels. Sizes are awkward on
purpose: primes, 1s, and lengths that are not multiples of any group or tile.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import riftco.ops as ops

Case = Callable[[object, np.random.Generator, np.dtype], tuple[np.ndarray, np.ndarray, float]]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


def assert_close(name: str, got: np.ndarray, want: np.ndarray, tol: float) -> None:
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    err = np.abs(g64 - w64) / (1.0 + np.abs(w64))
    if err.size and not np.all(err <= tol):
        where = np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))), err.shape)
        raise AssertionError(
            f"{name}: max rel error {np.nanmax(err):.3e} > {tol:.1e} at {where}: "
            f"got {got[where]!r}, want {want[where]!r}"
        )


def _eps(dtype: np.dtype) -> float:
    return 2e-6 if np.dtype(dtype) == np.float32 else 1e-13


def _x(backend, rng, dtype, shape, positive=False):
    a = rng.standard_normal(shape)
    if positive:
        a = np.abs(a) + 0.1
    a = a.astype(dtype)
    return backend.from_numpy(a), a.astype(np.float64)


@case
def unary(b, rng, dt):
    x, a = _x(b, rng, dt, (3, 7, 67))
    p, pa = _x(b, rng, dt, (3, 7, 67), positive=True)
    got = [ops.neg(x), ops.exp(x), ops.tanh(x), ops.abs(x), ops.log(p), ops.sqrt(p), ops.rsqrt(p)]
    want = [-a, np.exp(a), np.tanh(a), np.abs(a), np.log(pa), np.sqrt(pa), pa**-0.5]
    return np.stack([t.numpy() for t in got]), np.stack(want), 4 * _eps(dt)


@case
def tanh_saturates(b, rng, dt):
    a = np.array([-1e4, -30.0, -5.0, 0.0, 5.0, 30.0, 1e4], dtype=dt)
    return ops.tanh(b.from_numpy(a)).numpy(), np.tanh(a.astype(np.float64)), 4 * _eps(dt)


@case
def binary(b, rng, dt):
    x, a = _x(b, rng, dt, (257,))
    y, c = _x(b, rng, dt, (257,))
    fns = [ops.add, ops.sub, ops.mul, ops.div, ops.maximum, ops.minimum]
    want = [a + c, a - c, a * c, a / c, np.maximum(a, c), np.minimum(a, c)]
    return np.stack([f(x, y).numpy() for f in fns]), np.stack(want), 4 * _eps(dt)


@case
def scalar_and_pow(b, rng, dt):
    x, a = _x(b, rng, dt, (5, 31))
    p, pa = _x(b, rng, dt, (5, 31), positive=True)
    got = [ops.add_scalar(x, 2.5), ops.mul_scalar(x, -3.0), ops.pow_scalar(x, 3),
           ops.pow_scalar(x, 2), ops.pow_scalar(x, -1), ops.pow_scalar(p, 0.5),
           ops.pow_scalar(p, -1.5)]  # fmt: skip
    want = [a + 2.5, a * -3.0, a * a * a, a * a, 1 / a, np.sqrt(pa), 1 / (pa * np.sqrt(pa))]
    return np.stack([t.numpy() for t in got]), np.stack(want), 20 * _eps(dt)


@case
def compare_where(b, rng, dt):
    x, a = _x(b, rng, dt, (9, 13))
    y, c = _x(b, rng, dt, (9, 13))
    c[0] = a[0]  # some equal pairs
    y = b.from_numpy(c.astype(dt))
    got = [ops.compare(x, y, op).numpy() for op in ("lt", "le", "gt", "ge", "eq", "ne")]
    want = [a < c, a <= c, a > c, a >= c, a == c, a != c]
    sel = ops.where(ops.compare(x, y, "gt"), x, y).numpy()
    got.append(sel)
    want.append(np.where(a > c, a, c))
    return np.stack(got), np.stack(want).astype(np.float64), 0.0


@case
def cast(b, rng, dt):
    x, a = _x(b, rng, dt, (4, 33))
    a10 = (a * 10).astype(dt)
    as_int = ops.cast(ops.mul_scalar(x, 10.0), np.int32).numpy()
    back = ops.cast(b.from_numpy(np.arange(-5, 6, dtype=np.int32)), dt).numpy()
    want = np.trunc(a10.astype(np.float64)).astype(np.int64)
    got = np.concatenate([as_int.reshape(-1), back])
    return got, np.concatenate([want.reshape(-1), np.arange(-5, 6)]), 0.0


def _reduce_case(axes, shape, keepdims):
    def run(b, rng, dt):
        x, a = _x(b, rng, dt, shape)
        s = ops.sum(x, axes, keepdims).numpy()
        m = ops.max(x, axes, keepdims).numpy()
        n = int(np.prod([shape[i] for i in axes]))
        tol = 4 * _eps(dt) * max(1.0, np.sqrt(n))
        ws = np.add.reduce(a, axis=axes, keepdims=keepdims)
        wm = np.maximum.reduce(a, axis=axes, keepdims=keepdims)
        return np.concatenate([s.ravel(), m.ravel()]), np.concatenate([ws.ravel(), wm.ravel()]), tol

    return run


for _axes, _shape, _keep in [
    ((3,), (3, 5, 1, 129), False),  # long rows: threadgroup per row
    ((1,), (7, 3), True),  # short rows: thread per row
    ((0,), (1000, 7), False),  # column reduction, split and finished in two launches
    ((0, 2), (6, 5, 70), True),  # interleaved: permuting copy first
    ((0, 1, 2), (2, 3, 401), False),  # everything
    ((1,), (5, 1, 3), False),  # a size-1 axis: plain copy
]:
    CASES[f"reduce_{'_'.join(map(str, _axes))}_{'x'.join(map(str, _shape))}"] = _reduce_case(
        _axes, _shape, _keep
    )


@case
def argmax_ties(b, rng, dt):
    a = rng.integers(0, 5, size=(37, 301)).astype(dt)  # many ties: first index wins
    a[3] = -np.inf
    got = ops.argmax(b.from_numpy(a)).numpy()
    assert got.dtype == np.int32
    want = np.array(
        [next(j for j in range(a.shape[1]) if a[i, j] == a[i].max()) for i in range(37)]
    )
    return got, want, 0.0


def _matmul_case(m, k, n, batch, ta, tb):
    def run(b, rng, dt):
        lead = (batch,) if batch else ()
        a = rng.standard_normal(lead + ((k, m) if ta else (m, k)))
        c = rng.standard_normal(lead + ((n, k) if tb else (k, n)))
        got = ops.matmul(b.from_numpy(a.astype(dt)), b.from_numpy(c.astype(dt)), ta, tb).numpy()
        aa = np.swapaxes(a.astype(dt).astype(np.float64), -1, -2) if ta else a.astype(dt)
        cc = np.swapaxes(c.astype(dt).astype(np.float64), -1, -2) if tb else c.astype(dt)
        want = np.einsum("...ik,...kj->...ij", aa.astype(np.float64), cc.astype(np.float64))
        return got, want, 8 * _eps(dt) * np.sqrt(k)

    return run


for _m, _k, _n, _b, _ta, _tb in [
    (65, 33, 70, 2, False, False),
    (65, 33, 70, 0, True, False),
    (17, 129, 66, 3, False, True),
    (64, 16, 64, 0, True, True),
    (1, 37, 5, 2, False, True),  # thin: one thread per output
    (40, 50, 48, 2, True, True),  # CPU panels: whole 8x16 blocks only
    (97, 70, 130, 0, False, True),  # CPU panels: interior and ragged edges, packed B^T
]:
    CASES[f"matmul_{_m}x{_k}x{_n}_b{_b}_{'T' if _ta else 'N'}{'T' if _tb else 'N'}"] = _matmul_case(
        _m, _k, _n, _b, _ta, _tb
    )


@case
def views_copy(b, rng, dt):
    x, a = _x(b, rng, dt, (3, 5, 7, 11))
    got = [x.permute(3, 1, 0, 2).contiguous().numpy().ravel(), x[1:, ::2, 3].numpy().ravel(),
           x[:, 0:1].broadcast_to((3, 4, 7, 11)).contiguous().numpy().ravel(),
           x[2, 4].numpy().ravel()]  # fmt: skip
    want = [a.transpose(3, 1, 0, 2).ravel(), a[1:, ::2, 3].ravel(),
            np.broadcast_to(a[:, 0:1], (3, 4, 7, 11)).ravel(), a[2, 4].ravel()]  # fmt: skip
    return np.concatenate(got), np.concatenate(want), 0.0


@case
def views_copy_long_rows(b, rng, dt):
    """Rows longer than one CPU copy run (64), and a rank-5 view that does not collapse."""
    x, a = _x(b, rng, dt, (4, 6, 150))
    y, c = _x(b, rng, dt, (2, 3, 2, 3, 2))
    got = [x.permute(1, 0, 2).contiguous().numpy().ravel(),
           x.permute(2, 0, 1).contiguous().numpy().ravel(),
           y.permute(4, 3, 2, 1, 0).contiguous().numpy().ravel()]  # fmt: skip
    want = [a.transpose(1, 0, 2).ravel(), a.transpose(2, 0, 1).ravel(),
            c.transpose(4, 3, 2, 1, 0).ravel()]  # fmt: skip
    return np.concatenate(got), np.concatenate(want), 0.0


@case
def concat_split_fill(b, rng, dt):
    x, a = _x(b, rng, dt, (2, 3, 41))
    parts = ops.split_last_axis(x, [1, 33, 7])
    joined = ops.concatenate_last_axis([parts[2], parts[0], parts[1]]).numpy()
    want = np.concatenate([a[..., 34:], a[..., :1], a[..., 1:34]], -1)
    filled = b.allocate((5, 3), np.dtype(dt))
    ops.fill_(filled, -1.25)
    got = np.concatenate([parts[1].numpy().ravel(), joined.ravel(), filled.numpy().ravel()])
    return got, np.concatenate([a[..., 1:34].ravel(), want.ravel(), np.full(15, -1.25)]), 0.0


@case
def adamw(b, rng, dt):
    n = 301
    p, g, m = (rng.standard_normal(n) for _ in range(3))
    v = np.abs(rng.standard_normal(n))
    tensors = [b.from_numpy(t.astype(dt)) for t in (p, g, m, v)]
    lr, b1, b2, eps, wd, step = 1e-2, 0.9, 0.99, 1e-8, 0.1, 4
    ops.adam_update(*tensors, lr, b1, b2, eps, wd, step)
    p, g, m, v = (t.astype(dt).astype(np.float64) for t in (p, g, m, v))
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g**2
    p2 = p - lr * (m2 / (1 - b1**step) / (np.sqrt(v2 / (1 - b2**step)) + eps) + wd * p)
    got = np.concatenate([t.numpy() for t in (tensors[0], tensors[2], tensors[3])])
    return got, np.concatenate([p2, m2, v2]), 20 * _eps(dt)


#: Cases whose kernels depend on the group size (threadgroup loops, barriers, tiles).
GROUP_SENSITIVE = [n for n in CASES if n.startswith(("reduce_", "argmax", "matmul_", "views_"))]
