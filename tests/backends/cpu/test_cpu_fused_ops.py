"""Every CPU fused op against independent math: Python ``math`` loops, finite differences
and hand-worked cases (GELU, softmax, LayerNorm, embedding, cross-entropy, attention and
flash attention, AdamW). The primitives are in ``test_cpu_ops.py``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import riftco
from helpers import assert_close
from op_math import FLOATS, TOL, elementwise, t
from riftco import ops


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
