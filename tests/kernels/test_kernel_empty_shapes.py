"""Zero-size shapes through the fused kernels: empty results of the documented shapes.

SEMANTICS.md: B, H or T = 0 in attention, N = 0 in cross-entropy, zero rows in LayerNorm,
an empty softmax axis, no ids or C = 0 in embedding give empty results (core rejects
C = 0 in LayerNorm, D = 0 in attention and V = 0 in cross-entropy before dispatch; called
on the backend directly, those give defined values, checked at the end). Nothing may be
read or written out of bounds, and no launch may run over zero threads.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from riftco import ops as F

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")


@pytest.fixture(scope="module", params=["opencl", "metal"])
def be(request: pytest.FixtureRequest) -> Any:
    if request.param == "opencl":
        from riftco.backends.opencl.backend import OpenCLBackend

        return OpenCLBackend(0, group_size=96, fast_math=True)
    from riftco.backends.metal import standin
    from riftco.backends.metal.backend import MetalBackend

    return MetalBackend(0, mc_module=standin)


def _z(be: Any, shape: tuple[int, ...], dtype: Any = np.float32) -> Any:
    return be.from_numpy(np.zeros(shape, dtype))


@pytest.mark.parametrize("shape", [(0, 4, 8, 16), (2, 0, 8, 16), (2, 4, 0, 16)])
def test_attention_with_an_empty_axis(be: Any, shape: tuple[int, ...]) -> None:
    b, h, t, d = shape
    q = _z(be, shape)
    out, probs = F.attention(q, q, q, 0.25, True)
    assert out.numpy().shape == shape and probs.numpy().shape == (b, h, t, t)
    grads = F.attention_backward(q, q, q, q, probs, 0.25)
    assert [g.numpy().shape for g in grads] == [shape] * 3
    fout, lse = F.flash_attention(q, q, q, 0.25, False)
    assert fout.numpy().shape == shape and lse.numpy().shape == (b, h, t)
    fgrads = F.flash_attention_backward(q, q, q, q, fout, lse, 0.25, False)
    assert [g.numpy().shape for g in fgrads] == [shape] * 3


def test_rows_and_vocabulary_edge_cases(be: Any) -> None:
    y = F.softmax(_z(be, (3, 0)))
    assert y.numpy().shape == (3, 0)
    assert F.softmax_backward(y, y).numpy().shape == (3, 0)
    x = _z(be, (0, 8))
    g = be.from_numpy(np.ones(8, np.float32))
    y, mean, rstd = F.layer_norm(x, g, g)
    assert (y.numpy().shape, mean.numpy().shape) == ((0, 8), (0,))
    dx, dg, db = F.layer_norm_backward(x, x, g, mean, rstd)
    assert dx.numpy().shape == (0, 8) and (dg.numpy() == 0).all() and (db.numpy() == 0).all()
    logits, targets = _z(be, (0, 5)), _z(be, (0,), np.int32)
    loss, lse = F.cross_entropy(logits, targets)
    assert loss.numpy().shape == (0,) and lse.numpy().shape == (0,)
    dl = F.cross_entropy_backward(_z(be, (0,)), logits, targets, lse)
    assert dl.numpy().shape == (0, 5)


def test_embedding_with_no_ids_or_no_columns(be: Any) -> None:
    table = be.from_numpy(np.ones((7, 3), np.float32))
    none = _z(be, (0,), np.int32)
    assert F.embedding(table, none).numpy().shape == (0, 3)
    dtable = F.embedding_backward(_z(be, (0, 3)), none, 7).numpy()
    assert dtable.shape == (7, 3) and (dtable == 0).all()
    ids = be.from_numpy(np.array([1, 2], np.int32))
    assert F.embedding(_z(be, (7, 0)), ids).numpy().shape == (2, 0)
    assert be.embedding_backward(_z(be, (2, 0)), ids, 7).numpy().shape == (7, 0)


def test_backend_level_degenerate_widths_are_defined(be: Any) -> None:
    """Below core's checks: LayerNorm with C = 0 gives NaN statistics (not uninitialised
    memory); attention with D = 0 has all scores 0, so uniform probabilities over the
    visible keys and lse = log(number visible)."""
    g = _z(be, (0,))
    _, mean, rstd = be.layer_norm(_z(be, (3, 0)), g, g, 1e-5)
    assert np.isnan(mean.numpy()).all() and np.isnan(rstd.numpy()).all()
    t = 5
    q = _z(be, (1, 2, t, 0))
    _, probs = be.attention(q, q, q, 1.0, True)
    want = np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None]
    np.testing.assert_allclose(probs.numpy()[0, 1], want, rtol=1e-6)
    _, lse = be.flash_attention(q, q, q, 1.0, True)
    np.testing.assert_allclose(lse.numpy()[0, 0], [math.log(i + 1) for i in range(t)], rtol=1e-6)
