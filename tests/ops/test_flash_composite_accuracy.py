"""The composite flash backward at large scores, against float64 truth (issue 31).

``P = exp(s - lse)`` with a float32 ``lse`` of magnitude 1e3 carries the same relative error
(ulps of ``lse``) in every ``P`` of a row; ``dP - rowsum(P dP)`` cancels it into dq. The
composite renormalises ``P`` by its row sums, as the kernels' forward normalises. Measured on
this test's inputs (scores up to ~1e3): relative dq error 0.198 before on every backend,
1.95e-5 after.
"""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import backend_device

BACKENDS = ["cpu", "native", "opencl", "metal"]


def _truth(q, k, v, dout, scale):  # float64, causal
    s = scale * q @ np.swapaxes(k, -1, -2)
    t = s.shape[-1]
    s = np.where(np.triu(np.ones((t, t), bool), 1), -np.inf, s)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    p = e / e.sum(-1, keepdims=True)
    lse = np.log(e.sum(-1)) + m[..., 0]
    dp = dout @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return (
        p @ v,
        lse,
        scale * ds @ k,
        scale * np.swapaxes(ds, -1, -2) @ q,
        np.swapaxes(p, -1, -2) @ dout,
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_composite_flash_backward_at_large_scores(backend, registry, monkeypatch):
    dev = backend_device(backend, monkeypatch)
    rng = np.random.default_rng(0)
    shape = (1, 2, 16, 8)
    q, k = (15 * rng.standard_normal(shape) for _ in range(2))  # scores up to ~1e3
    v, dout = (rng.standard_normal(shape) for _ in range(2))
    q, k, v, dout = (a.astype(np.float32).astype(np.float64) for a in (q, k, v, dout))
    scale = 1 / np.sqrt(shape[-1])
    out, lse, *want = _truth(q, k, v, dout, scale)
    assert np.abs(lse).max() > 900

    def t(a: np.ndarray) -> riftco.Tensor:
        return riftco.tensor(a.astype(np.float32), device=dev)

    backward = riftco.ops.composite("flash_attention_backward")
    got = backward(t(dout), t(q), t(k), t(v), t(out), t(lse), scale, True)
    for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
        err = np.abs(g.numpy() - w).max() / np.abs(w).max()
        assert err < 2e-4, f"{name}: relative error {err:.3g} against float64"
