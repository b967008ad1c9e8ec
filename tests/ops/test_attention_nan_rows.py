"""Causal attention with a NaN row: the row's visible probabilities are NaN, its masked ones
exactly 0 (the contract: "masked probabilities are exactly 0"; by index, so fast math
cannot change it). Before: the cpu reference, the composite and the OpenCL/Metal kernels
wrote NaN into the masked entries; native wrote 0 (issue 31).
"""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import backend_device

BACKENDS = ["cpu", "native", "opencl", "metal"]


def _expected(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    """float64 causal softmax; masked entries 0 and NaN rows NaN where visible, by hand."""
    q64, k64 = q.astype(np.float64), k.astype(np.float64)
    s = scale * q64 @ np.swapaxes(k64, -1, -2)
    t = s.shape[-1]
    visible = ~np.triu(np.ones((t, t), bool), 1)
    p = np.zeros_like(s)
    for idx in np.ndindex(*s.shape[:-1]):
        row = s[idx][visible[idx[-1]]]
        if np.isnan(row).any():
            p[idx][visible[idx[-1]]] = np.nan
        else:
            e = np.exp(row - row.max())
            p[idx][visible[idx[-1]]] = e / e.sum()
    return p


def _inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 5, 3)).astype(np.float32) for _ in range(3))
    q[0, 0, 1, 0] = np.nan  # head 0: row 1 NaN
    k[0, 1, 3, 2] = np.nan  # head 1: key 3 NaN, so rows 3 and 4 are NaN
    return q, k, v


def _check(probs: np.ndarray, want: np.ndarray) -> None:
    masked = np.broadcast_to(np.triu(np.ones(want.shape[-2:], bool), 1), want.shape)
    assert np.array_equal(probs[masked], np.zeros(int(masked.sum()), probs.dtype))
    assert np.array_equal(np.isnan(probs), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_allclose(probs[finite], want[finite], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("composite", [False, True], ids=["native_op", "composite"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_masked_probs_of_a_nan_row_are_zero(backend, composite, registry, monkeypatch):
    dev = backend_device(backend, monkeypatch)
    q, k, v = _inputs()
    fn = riftco.ops.composite("attention") if composite else riftco.ops.attention
    t = [riftco.tensor(a, device=dev) for a in (q, k, v)]
    _, probs = fn(*t, 0.5, True)
    _check(probs.numpy(), _expected(q, k, 0.5))


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_qkv_masked_probs_of_a_nan_row_are_zero(backend, registry, monkeypatch):
    dev = backend_device(backend, monkeypatch)
    q, k, v = _inputs()
    b, h, t, d = q.shape
    qkv = np.concatenate([np.swapaxes(a, 1, 2).reshape(b, t, h * d) for a in (q, k, v)], -1)
    _, probs = riftco.ops.attention_qkv(riftco.tensor(qkv, device=dev), h, 0.5, True, False)
    _check(probs.numpy(), _expected(q, k, 0.5))
