"""attention_qkv: attention read from a fused [B, T, 3C] projection, written as [B, T, C].

Checked against a per-head loop written from the definition (not the backend's code),
against finite differences through autograd, on a backend that has only primitives and
takes dense operands only (the composite must densify its head views itself), and in the
model: on a backend that reads views in place no head split, merge or concatenate runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import riftco
from helpers import add_backend, assert_close, primitives_only_backend
from riftco import ops
from riftco.autograd import Variable, attention_qkv, gradcheck
from riftco.backends.cpu.backend import CPUBackend
from riftco.errors import DTypeError, RiftcoError, ShapeError


def per_head_loop(qkv: np.ndarray, heads: int, scale: float, causal: bool):
    """out[B, T, C], probs[B, H, T, T], lse[B, H, T] one (batch, head) at a time."""
    b, t, width = qkv.shape
    c = width // 3
    d = c // heads
    out = np.zeros((b, t, c))
    probs = np.zeros((b, heads, t, t))
    lse = np.zeros((b, heads, t))
    for i in range(b):
        for h in range(heads):
            cols = slice(h * d, (h + 1) * d)
            q = qkv[i, :, cols]
            k = qkv[i, :, c : 2 * c][:, cols]
            v = qkv[i, :, 2 * c :][:, cols]
            for row in range(t):
                keys = row + 1 if causal else t
                s = scale * np.array([q[row] @ k[j] for j in range(keys)])
                m = s.max()
                e = np.exp(s - m)
                probs[i, h, row, :keys] = e / e.sum()
                lse[i, h, row] = m + math.log(e.sum())
                out[i, row, cols] = probs[i, h, row, :keys] @ v[:keys]
    return out, probs, lse


@pytest.mark.parametrize("flash", [False, True], ids=["materialized", "flash"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("b,t,heads,d", [(1, 1, 1, 3), (2, 7, 3, 2), (1, 70, 2, 5)])
def test_forward_matches_a_per_head_loop(rng, b, t, heads, d, causal, flash):
    """T = 70 spans two of the cpu reference's 64-key flash blocks."""
    qkv = rng.normal(size=(b, t, 3 * heads * d)) * 2.0
    scale = 1.0 / math.sqrt(d)
    out, probs, lse = per_head_loop(qkv, heads, scale, causal)
    x = riftco.tensor(qkv)
    for fn in (ops.attention_qkv, ops.composite("attention_qkv")):
        got, stat = fn(x, heads, scale, causal, flash)
        assert got.shape == (b, t, heads * d)
        assert_close(got.numpy(), out, rtol=1e-12, atol=1e-12, msg="out")
        assert_close(stat.numpy(), lse if flash else probs, rtol=1e-12, atol=1e-12, msg="stat")


@pytest.mark.parametrize("mode", ["materialized", "flash"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_gradient_matches_finite_differences(rng, mode, causal):
    qkv = rng.normal(size=(2, 5, 12))  # 2 heads of D = 2

    def f(x: Variable) -> Variable:
        return attention_qkv(x, 2, causal=causal, mode=mode)

    report = gradcheck(f, [qkv], atol=1e-7, rtol=1e-6)
    assert report["checked"] == qkv.size


@pytest.mark.parametrize("flash", [False, True], ids=["materialized", "flash"])
def test_composite_backward_matches_the_reference(rng, flash):
    qkv = riftco.tensor(rng.normal(size=(2, 9, 18)))  # 3 heads of D = 2
    dout = riftco.tensor(rng.normal(size=(2, 9, 6)))
    out, stat = ops.attention_qkv(qkv, 3, 0.7, True, flash)
    want = ops.attention_qkv_backward(dout, qkv, out, stat, 3, 0.7, True, flash)
    got = ops.composite("attention_qkv_backward")(dout, qkv, out, stat, 3, 0.7, True, flash)
    assert_close(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


# -- a backend with primitives only, which accepts only dense operands ----------------------
DenseOnly = primitives_only_backend("qkv-dense-only")


@pytest.mark.parametrize("flash", [False, True], ids=["materialized", "flash"])
def test_composite_on_a_dense_only_backend_reads_a_strided_projection(registry, rng, flash):
    add_backend(registry, DenseOnly)
    wide = rng.normal(size=(2, 6, 3 * 4 + 5))  # qkv is the first 12 columns: rows padded
    dout = rng.normal(size=(2, 6, 4))
    qkv = riftco.tensor(wide, device="qkv-dense-only")[:, :, :12]
    assert not qkv.is_dense
    out, stat = ops.attention_qkv(qkv, 2, 0.5, True, flash)
    dqkv = ops.attention_qkv_backward(
        riftco.tensor(dout, device="qkv-dense-only"), qkv, out, stat, 2, 0.5, True, flash
    )
    ref = riftco.tensor(np.ascontiguousarray(wide[:, :, :12]))
    want_out, want_stat = ops.attention_qkv(ref, 2, 0.5, True, flash)
    want = ops.attention_qkv_backward(riftco.tensor(dout), ref, want_out, want_stat, 2, 0.5,
                                      True, flash)  # fmt: skip
    assert_close(out.numpy(), want_out.numpy(), rtol=1e-12, atol=1e-12, msg="out")
    assert_close(stat.numpy(), want_stat.numpy(), rtol=1e-12, atol=1e-12, msg="stat")
    assert_close(dqkv.numpy(), want.numpy(), rtol=1e-12, atol=1e-12, msg="dqkv")


# -- checks before dispatch -------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape,heads,error",
    [((2, 3, 4, 6), 1, ShapeError), ((1, 4, 10), 2, ShapeError), ((1, 4, 0), 1, ShapeError),
     ((1, 4, 6), 0, ShapeError), ((1, 4, 6), 2.0, DTypeError), ((1, 4, 6), True, DTypeError)],
)  # fmt: skip
def test_bad_calls_raise_before_the_backend(monkeypatch, shape, heads, error):
    monkeypatch.setattr(CPUBackend, "attention_qkv", lambda *a: pytest.fail("dispatched"))
    with pytest.raises(error, match=r"^\[attention_qkv\]"):
        ops.attention_qkv(riftco.tensor(np.zeros(shape)), heads, 1.0)


def test_variable_level_mode_and_default_scale(rng):
    qkv = rng.normal(size=(1, 4, 3 * 2 * 8))
    got = attention_qkv(Variable(riftco.tensor(qkv)), 2).value.numpy()  # scale 1/sqrt(8)
    assert_close(got, per_head_loop(qkv, 2, 1 / math.sqrt(8), True)[0], rtol=1e-12, atol=1e-12)
    with pytest.raises(RiftcoError, match=r"^\[attention_qkv\] mode"):
        attention_qkv(Variable(riftco.tensor(qkv)), 2, mode="sparse")


# -- in the model: no head copies where the backend reads views ------------------------------
@pytest.mark.parametrize("mode", ["materialized", "flash"])
def test_model_step_makes_no_head_split_or_merge_on_native(monkeypatch, mode):
    native = pytest.importorskip("riftco.backends.native.backend")
    ok, why = native.NativeBackend.is_available()
    if not ok:
        pytest.skip(f"native backend unavailable: {why}")
    from riftco.nn import GPT, GPTConfig

    calls: dict[str, int] = {}
    for name in ("split_last_axis", "concatenate_last_axis", "copy_strided"):
        base = getattr(native.NativeBackend, name)

        def spy(self, *a, _name=name, _base=base):
            calls[_name] = calls.get(_name, 0) + 1
            return _base(self, *a)

        monkeypatch.setattr(native.NativeBackend, name, spy)
    cfg = GPTConfig(vocab=11, context=8, layers=2, heads=2, width=16, attention=mode)
    model = GPT(cfg, device="native", seed=0)
    ids = np.random.default_rng(0).integers(0, 11, size=(2, 9)).astype(np.int32)
    x, y = (riftco.tensor(a, device="native") for a in (ids[:, :-1], ids[:, 1:]))
    model.loss(x, y).backward()
    assert calls == {}, calls
