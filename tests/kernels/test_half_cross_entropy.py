"""cross_entropy.cl in half storage: logits loaded to float32, the loss rows, lse and dloss
float32, each dlogit rounded once.

Bit for bit what core's widened path gives on the same backend (logits cast to float32,
the float32 kernels, dlogits cast back), with an ignored row (-1), a -inf logit and a NaN
row; and the loss and lse float32, as the op unit keeps them. Run as IEEE C, with fast
math at group size 96 and on the Metal stand-in; vocabularies of 5 (one thread a row) and
700 (a team per row on GPU-shaped runs).
"""

from __future__ import annotations

import numpy as np
import pytest
from half_helpers import half_backend
from riftco.dtypes import LOW_PRECISION

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

F32 = np.dtype(np.float32)
HALVES = sorted(LOW_PRECISION, key=str)


@pytest.mark.parametrize("vocab", [5, 700])
@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", ["ieee", "fast96", "metal"])
def test_cross_entropy_rounds_once(kind: str, dtype: np.dtype, vocab: int) -> None:
    be = half_backend(kind)
    assert {"cross_entropy", "cross_entropy_backward"} <= be.low_precision_ops
    rng = np.random.default_rng(vocab)
    n = 40
    logits = rng.standard_normal((n, vocab)) * 3
    logits[3, 1] = -np.inf  # adds nothing
    logits[5, 0] = np.nan  # a NaN row
    targets = rng.integers(0, vocab, n)
    targets[7] = -1  # ignored
    tl = be.from_numpy(logits.astype(dtype))
    tt = be.from_numpy(targets.astype(np.int32))
    loss, lse = be.cross_entropy(tl, tt)
    wide = be.cast(tl, F32)
    wloss, wlse = be.cross_entropy(wide, tt)
    assert loss.dtype == F32 and lse.dtype == F32
    for label, got, want in (("loss", loss, wloss), ("lse", lse, wlse)):
        g, w = be.to_numpy(got), be.to_numpy(want)
        assert np.array_equal(g.view(np.uint32), w.view(np.uint32)), label
    dloss = be.from_numpy(rng.standard_normal(n).astype(F32))
    d = be.cross_entropy_backward(dloss, tl, tt, lse)
    wd = be.cast(be.cross_entropy_backward(dloss, wide, tt, wlse), dtype)
    assert d.dtype == dtype
    g, w = be.to_numpy(d), be.to_numpy(wd)
    differ = g.view(np.uint16) != w.view(np.uint16)
    assert not differ.any(), f"dlogits: {int(differ.sum())} of {g.size} differ"
