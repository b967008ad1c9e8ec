"""layer_norm.cl in half storage: rows loaded to float32, mean and rstd kept float32, each
output rounded once.

Bit for bit what core's widened path gives on the same backend (cast to float32, the
float32 kernels, cast back), for LayerNorm and add_layer_norm, forward and backward, with
the statistics in float32 (the op units'); and add_layer_norm normalises the float32 sum
x + res, not the s it stores rounded (which the widened path never sees). The half kernel
adds x + res again in each pass where the float32 one reads its stored s back, which fast
math may contract with what follows (x + (res - mu)): there its y and statistics are held
to one half ulp and float32 rounding instead of the same bits. Run as IEEE C,
with fast math at group size 96 and on the Metal stand-in; rows of 5 (one thread each)
and 700 (a team per row on GPU-shaped runs), 130 rows (three chunks of the dgamma/dbeta
partial sums).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from half_helpers import half_backend
from half_helpers import half_ulps as ulps
from riftco.dtypes import LOW_PRECISION

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

F32 = np.dtype(np.float32)
HALVES = sorted(LOW_PRECISION, key=str)
OPS = ("layer_norm", "layer_norm_backward", "add_layer_norm", "add_layer_norm_backward")


@pytest.mark.parametrize("cols", [5, 700])
@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", ["ieee", "fast96", "metal"])
def test_layer_norm_family_rounds_once(kind: str, dtype: np.dtype, cols: int) -> None:
    be = half_backend(kind)
    assert set(OPS) <= be.low_precision_ops
    rng = np.random.default_rng(cols)
    rows = 130

    def t(*shape: int, scale: float = 1.0, offset: float = 0.0) -> Any:
        return be.from_numpy((rng.standard_normal(shape) * scale + offset).astype(dtype))

    x, res, dy, ds = t(rows, cols, scale=3, offset=2), t(rows, cols), t(rows, cols), t(rows, cols)
    gamma, beta = t(cols, scale=0.5, offset=1), t(cols, scale=0.1)
    eps = 1e-5

    def wide(v: Any) -> Any:
        return be.cast(v, F32)

    def narrow(v: Any) -> np.ndarray:
        return be.to_numpy(be.cast(v, dtype))

    # forward: y rounded once, mean and rstd float32
    y, mean, rstd = be.layer_norm(x, gamma, beta, eps)
    wy, wmean, wrstd = be.layer_norm(wide(x), wide(gamma), wide(beta), eps)
    assert y.dtype == dtype and mean.dtype == F32 and rstd.dtype == F32
    _same(be.to_numpy(y), narrow(wy), "layer_norm y")
    _same(be.to_numpy(mean), be.to_numpy(wmean), "layer_norm mean")
    _same(be.to_numpy(rstd), be.to_numpy(wrstd), "layer_norm rstd")
    # backward, from the saved float32 statistics
    got = be.layer_norm_backward(dy, x, gamma, mean, rstd)
    want = be.layer_norm_backward(wide(dy), wide(x), wide(gamma), mean, rstd)
    for label, g, w in zip(("dx", "dgamma", "dbeta"), got, want, strict=True):
        assert g.dtype == dtype, label
        _same(be.to_numpy(g), narrow(w), f"layer_norm_backward {label}")

    # add_layer_norm: s rounded once, y and the statistics from the float32 sum
    s, y, mean, rstd = be.add_layer_norm(x, res, gamma, beta, eps)
    ws, wy, wmean, wrstd = be.add_layer_norm(wide(x), wide(res), wide(gamma), wide(beta), eps)
    assert s.dtype == dtype and y.dtype == dtype and mean.dtype == F32
    _same(be.to_numpy(s), narrow(ws), "add_layer_norm s")
    fast = kind != "ieee"  # fast math: the recomputed sum may be contracted (see above)
    _same(be.to_numpy(y), narrow(wy), "add_layer_norm y", half_ulps=int(fast))
    _same(be.to_numpy(mean), be.to_numpy(wmean), "add_layer_norm mean", rel=2.0**-20 * fast)
    _same(be.to_numpy(rstd), be.to_numpy(wrstd), "add_layer_norm rstd", rel=2.0**-20 * fast)
    got = be.add_layer_norm_backward(dy, ds, s, gamma, mean, rstd)
    want = be.add_layer_norm_backward(wide(dy), wide(ds), wide(s), wide(gamma), mean, rstd)
    for label, g, w in zip(("dsum", "dgamma", "dbeta"), got, want, strict=True):
        assert g.dtype == dtype, label
        _same(be.to_numpy(g), narrow(w), f"add_layer_norm_backward {label}")


def _same(
    got: np.ndarray, want: np.ndarray, what: str, half_ulps: int = 0, rel: float = 0.0
) -> None:
    """The same bits, or (``half_ulps``, half outputs) that many units of the last place
    apart, or (``rel``, float32 outputs) that close relatively."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.itemsize == 2:
        apart = np.max(ulps(got, want)) if got.size else 0
        assert apart <= half_ulps, f"{what}: {apart} half ulps apart (allowed {half_ulps})"
        return
    if rel:
        np.testing.assert_allclose(got, want, rtol=rel, atol=0, err_msg=what)
        return
    differ = got.view(np.uint32) != want.view(np.uint32)
    assert not differ.any(), f"{what}: {int(differ.sum())} of {got.size} entries differ"
