"""Native attention read straight from a fused q, k, v projection and written in the
layout the output projection reads (issue 13 part-2 entry points), against its composite
on the CPU reference: split q | k | v, heads [B, T, H, D] -> [B, H, T, D], attention,
heads merged back to [B, T, C]; the backward gives dq | dk | dv in one [B, T, 3C].
"""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import assert_close, native_backend_module
from riftco import ops as F

native_mod = native_backend_module()

NAT = riftco.device("native")
CPU = riftco.device("cpu")
TOL = {np.float64: (1e-11, 1e-11), np.float32: (2e-4, 2e-5)}


def _heads(x: np.ndarray, h: int) -> np.ndarray:
    b, t, c = x.shape
    return x.reshape(b, t, h, c // h).transpose(0, 2, 1, 3)


def _merge(x: np.ndarray) -> np.ndarray:
    b, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * d)


def _reference(qkv, dout, heads, scale, causal, flash):
    c = qkv.shape[-1] // 3
    q, k, v = (riftco.tensor(np.ascontiguousarray(_heads(qkv[..., i * c : (i + 1) * c], heads)),
                             device=CPU) for i in range(3))  # fmt: skip
    do = riftco.tensor(np.ascontiguousarray(_heads(dout, heads)), device=CPU)
    if flash:
        out, lse = F.flash_attention(q, k, v, scale, causal)
        grads = F.flash_attention_backward(do, q, k, v, out, lse, scale, causal)
    else:
        out, probs = F.attention(q, k, v, scale, causal)
        grads = F.attention_backward(do, q, k, v, probs, scale)
    dqkv = np.concatenate([_merge(g.numpy()) for g in grads], axis=-1)
    return _merge(out.numpy()), dqkv


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("b,t,heads,d", [(2, 5, 2, 3), (3, 70, 4, 16), (1, 130, 2, 32)])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("flash", [False, True], ids=["materialized", "flash"])
def test_attention_from_fused_projection(rng, dtype, b, t, heads, d, causal, flash):
    c = heads * d
    qkv = rng.normal(size=(b, t, 3 * c)).astype(dtype)
    dout = rng.normal(size=(b, t, c)).astype(dtype)
    scale = 1.0 / np.sqrt(d)
    be = NAT.backend
    tq = riftco.tensor(qkv, device=NAT)
    out, stat = be.attention_qkv(tq, heads, scale, causal, flash)
    assert out.shape == (b, t, c) and out.is_dense
    assert stat.shape == ((b, heads, t) if flash else (b, heads, t, t))
    dqkv = be.attention_qkv_backward(
        riftco.tensor(dout, device=NAT), tq, out, stat, heads, scale, causal, flash
    )
    assert dqkv.shape == (b, t, 3 * c) and dqkv.dtype == dtype
    want_out, want_dqkv = _reference(qkv, dout, heads, scale, causal, flash)
    rtol, atol = TOL[dtype]
    assert_close(out.numpy(), want_out, rtol=rtol, atol=atol, msg="out")
    assert_close(dqkv.numpy(), want_dqkv, rtol=rtol, atol=atol, msg="dqkv")


def test_reads_a_row_strided_projection_without_copies(rng, monkeypatch):
    """qkv as a column slice of a wider buffer (row stride > 3C): read in place."""
    b, t, heads, d = 2, 40, 2, 8
    c = heads * d
    wide = rng.normal(size=(b, t, 3 * c + 5)).astype(np.float32)
    view = riftco.tensor(wide, device=NAT)[:, :, : 3 * c]
    assert not view.is_dense
    be = NAT.backend
    monkeypatch.setattr(type(be), "copy_strided", lambda *a: pytest.fail("copied"))
    out, probs = be.attention_qkv(view, heads, 0.3, True, False)
    want_out, _ = _reference(wide[..., : 3 * c], np.zeros((b, t, c), np.float32), heads, 0.3,
                             True, False)  # fmt: skip
    assert_close(out.numpy(), want_out, rtol=2e-4, atol=2e-5, msg="out")
