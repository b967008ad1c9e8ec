"""The native C backend against the numpy CPU backend (float64 and float32), op by op.

The CPU backend is written as plain numpy math and shares no code with the C kernels, so
it serves as the independent reference. Sizes are chosen to hit the kernels' edges: one
element, widths just past a SIMD width or a register tile (33, 4097), sequence lengths
across the flash block (65, 130), rows of -inf, logits of +-80, repeated ids, ignored
targets, causal and not, and the permuted (strided) q, k, v views the model passes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import riftco
from helpers import assert_close, native_backend_module
from riftco import ops as F

native_mod = native_backend_module()

NAT = riftco.device("native")
CPU = riftco.device("cpu")
TOL = {np.float64: (1e-11, 1e-11), np.float32: (2e-4, 2e-5)}  # (rtol, atol)


def _on(dev, *arrays):
    return [riftco.tensor(a, device=dev) if isinstance(a, np.ndarray) else a for a in arrays]


def _compare(op, *arrays, dtype=np.float64, tol=None, **kw):
    """Run ``op`` on both backends with the same inputs; compare every output."""
    got = op(*_on(NAT, *arrays), **kw)
    want = op(*_on(CPU, *arrays), **kw)
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    rtol, atol = tol or TOL[dtype]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.backend.name == "native"
        assert g.dtype == w.dtype
        assert_close(g.numpy(), w.numpy(), rtol=rtol, atol=atol, msg=f"{op.__name__}[{i}]")
    return got


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


@pytest.mark.parametrize("n", [1, 33, 4097])
@pytest.mark.parametrize("form", ["tanh", "none"])
def test_gelu(rng, dtype, n, form):
    x = (rng.normal(size=(3, n)) * 4).astype(dtype)
    x[0, 0] = -80.0  # far tail: exp overflows inside, the result must stay -0
    dy = rng.normal(size=x.shape).astype(dtype)
    (y,) = _compare(F.gelu, x, form, dtype=dtype)
    assert y.numpy()[0, 0] == 0.0
    _compare(F.gelu_backward, dy, x, form, dtype=dtype)


@pytest.mark.parametrize("shape", [(1, 1), (65, 33), (3, 4097)])
def test_softmax(rng, dtype, shape):
    x = (rng.normal(size=shape) * 10).astype(dtype)
    x[0, 0] = 80.0
    if shape[1] > 1:
        x[-1, 1:] = -np.inf  # masked entries give exact zeros
    _compare(F.softmax, x, dtype=dtype)
    y = F.softmax(riftco.tensor(x, device=CPU)).numpy()
    dy = rng.normal(size=shape).astype(dtype)
    _compare(F.softmax_backward, dy, y, dtype=dtype)


def test_softmax_all_masked_row_is_nan():
    x = np.full((2, 5), -np.inf)
    x[1] = [0, 1, 2, 3, 4]
    y = F.softmax(riftco.tensor(x, device=NAT)).numpy()
    assert np.isnan(y[0]).all()
    assert_close(y[1], np.exp(x[1] - 4) / np.exp(x[1] - 4).sum(), 1e-14, 1e-15)


@pytest.mark.parametrize("rows,cols", [(1, 1), (130, 33), (5, 4097)])
def test_layer_norm(rng, dtype, rows, cols):
    x = (rng.normal(size=(rows, cols)) * 3 + 1).astype(dtype)
    g, b = rng.normal(size=cols).astype(dtype), rng.normal(size=cols).astype(dtype)
    y, mean, rstd = _compare(F.layer_norm, x, g, b, 1e-5, dtype=dtype)
    dy = rng.normal(size=x.shape).astype(dtype)
    m, r = mean.numpy(), rstd.numpy()
    tol = (1e-10, 1e-11) if dtype == np.float64 else (1e-3, 1e-4)
    _compare(F.layer_norm_backward, dy, x, g, m, r, dtype=dtype, tol=tol)


def test_layer_norm_backward_is_deterministic(rng):
    """dgamma/dbeta sum 600 rows in fixed blocks: the same bits on every call."""
    x, dy = rng.normal(size=(600, 257)), rng.normal(size=(600, 257))
    g = rng.normal(size=257)
    _, mean, rstd = F.layer_norm(*_on(NAT, x, g, g), 1e-5)
    args = _on(NAT, dy, x, g)
    first = [t.numpy() for t in F.layer_norm_backward(*args[:3], mean, rstd)]
    for _ in range(3):
        again = [t.numpy() for t in F.layer_norm_backward(*args[:3], mean, rstd)]
        for a, b in zip(first, again):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("ids_dtype", [np.int32, np.int64])
def test_embedding_repeated_ids(rng, dtype, ids_dtype):
    table = rng.normal(size=(7, 33)).astype(dtype)
    ids = np.array([[0, 3, 3, 6], [3, 3, 0, 1]], dtype=ids_dtype)  # repeats accumulate
    _compare(F.embedding, table, ids, dtype=dtype)
    dy = rng.normal(size=(2, 4, 33)).astype(dtype)
    (dt,) = _compare(F.embedding_backward, dy, ids, 7, dtype=dtype)
    assert_close(dt.numpy()[3], dy[0, 1] + dy[0, 2] + dy[1, 0] + dy[1, 1], 1e-5, 1e-6)
    assert not dt.numpy()[2].any()  # unused row stays zero


def test_embedding_backward_wide_is_deterministic(rng):
    dy, ids = rng.normal(size=(300, 4097)), rng.integers(0, 5, 300)
    a = F.embedding_backward(*_on(NAT, dy, ids), 5).numpy()
    b = F.embedding_backward(*_on(NAT, dy, ids), 5).numpy()
    assert np.array_equal(a, b)
    _compare(F.embedding_backward, dy, ids, 5)


@pytest.mark.parametrize("n,v", [(1, 1), (65, 33), (4, 4097)])
def test_cross_entropy(rng, dtype, n, v):
    logits = (rng.normal(size=(n, v)) * 20).astype(dtype)
    logits[0, 0] = 80.0
    logits[-1, -1] = -80.0
    if v > 2:
        logits[-1, 1] = -np.inf
    targets = rng.integers(0, v, n)
    targets[n // 2] = -1  # ignored
    loss, lse = _compare(F.cross_entropy, logits, targets, dtype=dtype)
    assert loss.numpy()[n // 2] == 0
    dloss = rng.normal(size=n).astype(dtype)
    _compare(F.cross_entropy_backward, dloss, logits, targets, lse.numpy(), dtype=dtype)
    # the autograd path passes a broadcast (stride-0) upstream gradient
    scalar = riftco.tensor(np.array([0.5], dtype=dtype), device=NAT).broadcast_to((n,))
    got = F.cross_entropy_backward(scalar, *_on(NAT, logits, targets), lse).numpy()
    want = F.cross_entropy_backward(
        *_on(CPU, np.full(n, 0.5, dtype), logits, targets, lse.numpy())
    ).numpy()
    assert_close(got, want, *TOL[dtype])


def _qkv(rng, b, h, t, d, dtype):
    """q, k, v as the model makes them: one (B, T, 3, H, D) block, permuted views."""
    x = rng.normal(size=(b, t, 3, h, d)).astype(dtype)
    return [x[:, :, i].transpose(0, 2, 1, 3) for i in range(3)]


def _views(dev, arrays):
    """Upload (B, T, 3, H, D) once and return the permuted riftco views of q, k, v."""
    full = np.stack([a.transpose(0, 2, 1, 3) for a in arrays], axis=2)
    t = riftco.tensor(full, device=dev)
    return [t[:, :, i].permute(0, 2, 1, 3) for i in range(3)]


@pytest.mark.parametrize("t", [1, 17, 65, 130])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_materialised(rng, dtype, t, causal):
    q, k, v = _qkv(rng, 2, 3, t, 33, dtype)
    scale = 1 / math.sqrt(33)
    out, probs = _compare(F.attention, q, k, v, scale, causal, dtype=dtype)
    if causal:
        assert not np.triu(probs.numpy()[0, 0], 1).any()  # masked probabilities exactly 0
    dout = rng.normal(size=q.shape).astype(dtype)
    _compare(F.attention_backward, dout, q, k, v, probs.numpy(), scale, dtype=dtype)
    # strided (permuted) views give the same bits as dense copies
    qs, ks, vs = _views(NAT, [q, k, v])
    strided = F.attention(qs, ks, vs, scale, causal)[0].numpy()
    assert np.array_equal(strided, out.numpy())


@pytest.mark.parametrize("t", [1, 17, 65, 130])
@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention(rng, dtype, t, causal):
    q, k, v = _qkv(rng, 2, 2, t, 33, dtype)
    scale = 0.2
    out, lse = _compare(F.flash_attention, q, k, v, scale, causal, dtype=dtype)
    dout = rng.normal(size=q.shape).astype(dtype)
    saved = (out.numpy(), lse.numpy(), scale, causal)
    _compare(F.flash_attention_backward, dout, q, k, v, *saved, dtype=dtype)
    ref_out, _ = F.attention(*_on(CPU, q, k, v), scale, causal)
    assert_close(out.numpy(), ref_out.numpy(), *TOL[dtype])
    qs, ks, vs = _views(NAT, [q, k, v])
    assert np.array_equal(F.flash_attention(qs, ks, vs, scale, causal)[0].numpy(), out.numpy())


@pytest.mark.parametrize("d", [1, 8, 64])
def test_attention_head_widths(rng, d):
    q, k, v = _qkv(rng, 1, 2, 20, d, np.float64)
    dout = rng.normal(size=q.shape)
    out, probs = _compare(F.attention, q, k, v, 0.3, True)
    _compare(F.attention_backward, dout, q, k, v, probs.numpy(), 0.3)
    out, lse = _compare(F.flash_attention, q, k, v, 0.3, True)
    _compare(F.flash_attention_backward, dout, q, k, v, out.numpy(), lse.numpy(), 0.3, True)


@pytest.mark.parametrize("n", [1, 33, 600000])
def test_adam_update(rng, dtype, n):
    p0, g = rng.normal(size=n).astype(dtype), rng.normal(size=n).astype(dtype)
    m0, v0 = rng.normal(size=n).astype(dtype), rng.random(n).astype(dtype)
    results = []
    for dev in (NAT, CPU):
        p, m, v = _on(dev, p0, m0, v0)
        (gt,) = _on(dev, g)
        F.adam_update(p, gt, m, v, 1e-2, 0.9, 0.99, 1e-8, 0.1, 3)
        results.append([t.numpy() for t in (p, m, v)])
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    for got, want in zip(*results):
        assert_close(got, want, rtol, 1e-7 if dtype == np.float32 else 1e-14)


def test_multithreaded_paths(rng):
    """Above ~5e5 elements the row kernels split over threads; same answers as numpy."""
    x = rng.normal(size=(600, 1025))  # 615k elements: past every threading threshold
    g, dy = rng.normal(size=1025), rng.normal(size=x.shape)
    _compare(F.gelu, x, "tanh")
    _compare(F.gelu_backward, dy, x, "tanh")
    y = _compare(F.softmax, x)[0].numpy()
    _compare(F.softmax_backward, dy, y)
    _, mean, rstd = _compare(F.layer_norm, x, g, g, 1e-5)
    _compare(F.layer_norm_backward, dy, x, g, mean.numpy(), rstd.numpy())
    t = rng.integers(-1, 1025, 600)
    _, lse = _compare(F.cross_entropy, x, t)
    _compare(F.cross_entropy_backward, rng.normal(size=600), x, t, lse.numpy())
    _compare(F.embedding_backward, dy, rng.integers(0, 9, 600), 9)
    _compare(F.embedding, x, rng.integers(0, 600, (700,)))


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (33, 5, 65), (257, 129, 31)])
def test_matmul_banded_blas(rng, dtype, ta, tb, m, k, n):
    """2-D products run in row bands (one BLAS call per thread) once they are big enough."""
    a = rng.normal(size=(k, m) if ta else (m, k)).astype(dtype)
    b = rng.normal(size=(n, k) if tb else (k, n)).astype(dtype)
    want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    got = riftco.ops.matmul(*_on(NAT, a, b), transpose_a=ta, transpose_b=tb).numpy()
    assert got.dtype == dtype
    assert_close(got, want, *((1e-12, 1e-12) if dtype == np.float64 else (1e-4, 1e-4)))
    # a strided (transposed view) operand is made dense first and gives the same result
    at = riftco.tensor(np.ascontiguousarray(a.T), device=NAT).transpose(0, 1)
    (bt,) = _on(NAT, b)
    assert np.array_equal(riftco.ops.matmul(at, bt, transpose_a=ta, transpose_b=tb).numpy(), got)


@pytest.mark.parametrize("mode", ["materialized", "flash"])
def test_gpt_training_step_matches_cpu(mode):
    """Two AdamW steps of a tiny GPT in float64: same losses and parameters as numpy."""
    from riftco.nn.gpt import GPT, GPTConfig
    from riftco.optim import AdamW

    cfg = GPTConfig(vocab=11, context=9, layers=2, heads=2, width=8, attention=mode)
    data = np.random.default_rng(3).integers(0, 11, (3, 10)).astype(np.int32)
    finals = {}
    for dev in ("native", "cpu"):
        model = GPT(cfg, device=dev, dtype=np.float64, seed=1)
        opt = AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        idx = riftco.tensor(data[:, :-1], device=dev)
        tgt = riftco.tensor(data[:, 1:], device=dev)
        losses = []
        for _ in range(2):
            loss = model.loss(idx, tgt)
            loss.backward()
            opt.step()
            losses.append(loss.value.item())
        finals[dev] = (losses, [p.value.numpy() for p in model.parameters()])
    assert_close(finals["native"][0], finals["cpu"][0], 1e-12, 1e-12)
    for a, b in zip(finals["native"][1], finals["cpu"][1]):
        assert_close(a, b, 1e-10, 1e-12)


def test_capabilities_and_priority():
    caps = native_mod.NativeBackend.capabilities().as_dict()
    assert all(v == "native" for v in caps["fused"].values())
    assert native_mod.NativeBackend.priority > riftco.device("cpu").backend.priority


def test_build_failure_is_reported_not_raised(tmp_path, monkeypatch):
    """A source the compiler rejects yields (False, reason with the compiler's words)."""
    from riftco.backends.native import build

    monkeypatch.setenv("RIFTCO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_sources", lambda: {"kernels.c": "int broken( {\n"})
    monkeypatch.setattr(build, "_state", {})
    monkeypatch.setattr(build, "BASE_FLAGS", ["-O0"])
    monkeypatch.setattr(build, "OPENMP_FLAGS", [])
    ok, reason = native_mod.NativeBackend.is_available()
    assert not ok
    assert "kernels.c" in reason and "error" in reason.lower()
    assert not list((tmp_path / "native").glob("*/*.so"))  # nothing half-built was kept
