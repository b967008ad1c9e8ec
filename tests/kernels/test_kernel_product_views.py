"""The kernel host layer's ``product`` on strided views: every matmul kernel reads head
blocks of a fused q | k | v buffer and writes into head blocks of another, in place.

This is what ``attention_qkv`` on OpenCL, Metal and CUDA stands on, so each of the four
kernels (small, panel, tiled, wide) is forced in turn, at group sizes 256 and 96, against
float64 numpy; the columns of the output buffer outside the written block must keep their
sentinel value (a kernel that ignores the output strides writes over its neighbours).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from riftco.ops.fused.attention_qkv import heads_view

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

SENTINEL = -7.25


def _backend(kind: str, group: int):
    from riftco.backends.opencl.backend import OpenCLBackend

    b = OpenCLBackend(0, group_size=group)
    caps = b.runtime.capabilities.shaped_for(cpu=kind == "panel")
    if kind == "wide":
        caps = dataclasses.replace(caps, matmul_wide_min_tiles=1)
    b.runtime.capabilities = caps
    return b


def _np_heads(x: np.ndarray, heads: int, block: int, blocks: int) -> np.ndarray:
    b, t, width = x.shape
    c = width // blocks
    return x[..., block * c : (block + 1) * c].reshape(b, t, heads, c // heads).swapaxes(1, 2)


@pytest.mark.parametrize("group", [256, 96])
@pytest.mark.parametrize("kind", ["small", "panel", "tiled", "wide"])
def test_product_reads_and_writes_head_blocks(kind, group):
    backend = _backend(kind, group)
    rng = np.random.default_rng(5)
    # D < 8 makes every product thin (matmul_small); D >= 8 takes the tiled kernels
    b, h, t, d = (2, 3, 37, 5) if kind == "small" else (2, 3, 70, 20)
    qkv = rng.standard_normal((b, t, 3 * h * d))
    x = backend.from_numpy(qkv.astype(np.float32))
    q, k, v = (heads_view(x, h, i, 3) for i in range(3))
    nq, nk, nv = (_np_heads(qkv, h, i, 3) for i in range(3))

    scores = backend.empty((b, h, t, t), np.dtype(np.float32))
    backend.product(scores, q, k, False, True)  # strided inputs, dense output
    np.testing.assert_allclose(scores.numpy(), nq @ nk.swapaxes(-1, -2), rtol=1e-5, atol=1e-4)

    p = rng.standard_normal((b, h, t, t))
    probs = backend.from_numpy(p.astype(np.float32))
    out = backend.from_numpy(np.full((b, t, 3 * h * d), SENTINEL, np.float32))
    backend.product(heads_view(out, h, 1, 3), probs, v, False, False)  # into the middle block
    got = out.numpy()
    np.testing.assert_allclose(_np_heads(got, h, 1, 3), p @ nv, rtol=1e-5, atol=1e-3)
    untouched = np.concatenate([got[..., : h * d], got[..., 2 * h * d :]], axis=-1)
    assert (untouched == SENTINEL).all(), "the product wrote outside its output block"

    backend.product(heads_view(out, h, 2, 3), probs, q, True, False)  # transposed strided read
    np.testing.assert_allclose(
        _np_heads(out.numpy(), h, 2, 3), p.swapaxes(-1, -2) @ nq, rtol=1e-5, atol=1e-3
    )
    assert (out.numpy()[..., : h * d] == SENTINEL).all()
    wanted = {"small": "matmul_small", "panel": "matmul_panel", "tiled": "matmul_tiled",
              "wide": "matmul_wide"}[kind]  # fmt: skip
    assert wanted in {key[-1] for key in backend._kernels}, backend._kernels.keys()


def _np_attention(q, k, v, scale, causal):
    s = scale * q @ k.swapaxes(-1, -2)
    if causal:
        t = s.shape[-1]
        s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v, p


@pytest.mark.parametrize("shape", ["rows", "tiles"])
@pytest.mark.parametrize("causal", [True, False])
def test_flash_kernels_read_and_write_head_blocks(shape, causal):
    """Flash attention_qkv on both kernel shapes (PoCL's row kernels, the GPUs' tiles) at
    group size 96, float64, against numpy: forward output in the [B, T, C] layout and the
    backward's dq | dk | dv blocks (finite differences of the numpy forward would be the
    same check, slower; the closed-form softmax VJP is used instead)."""
    backend = _backend("panel" if shape == "rows" else "tiled", 96)
    if np.dtype(np.float64) not in backend.dtypes:
        pytest.skip("device has no float64")
    rng = np.random.default_rng(11)
    b, h, t, d = 2, 3, 29, 7
    c = h * d
    qkv = rng.standard_normal((b, t, 3 * c))
    dout = rng.standard_normal((b, t, c))
    scale = 0.4
    nq, nk, nv = (_np_heads(qkv, h, i, 3) for i in range(3))
    want, p = _np_attention(nq, nk, nv, scale, causal)
    x = backend.from_numpy(qkv)
    out, lse = backend.attention_qkv(x, h, scale, causal, True)
    merge = lambda a: a.swapaxes(1, 2).reshape(b, t, c)  # noqa: E731
    np.testing.assert_allclose(out.numpy(), merge(want), rtol=1e-11, atol=1e-12)
    do = _np_heads(dout, h, 0, 1)
    dv = p.swapaxes(-1, -2) @ do
    dp = do @ nv.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    dq, dk = scale * ds @ nk, scale * ds.swapaxes(-1, -2) @ nq
    got = backend.attention_qkv_backward(
        backend.from_numpy(dout), x, out, lse, h, scale, causal, True
    )
    np.testing.assert_allclose(got.numpy(), np.concatenate([merge(g) for g in (dq, dk, dv)], -1),
                               rtol=1e-10, atol=1e-11)  # fmt: skip
    family = "flash_attention_cpu" if shape == "rows" else "flash_attention"
    assert family in {key[0] for key in backend._kernels}, backend._kernels.keys()
