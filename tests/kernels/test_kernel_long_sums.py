"""Long sums on the kernel backends err like log n, not n (SEMANTICS.md, issue 12).

Every sequential run inside a reduction kernel (a work-item's share of a long row, a
column chunk, LayerNorm's chunk partials) is summed in blocks of 32 (BlockSum in
shaders/specials.h). Values 1 + small noise make a plain float32 running sum drift: each
add rounds at the size of the total, always the same way. The checks compare with float64
and show that a plain float32 running sum of the same values would fail them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import riftco.ops as ops
from riftco import ops as F

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

RTOL = 2e-6


@pytest.fixture(scope="module", params=[False, True], ids=["ieee", "fast96"])
def be(request: pytest.FixtureRequest) -> Any:
    from riftco.backends.opencl.backend import OpenCLBackend

    return OpenCLBackend(0, group_size=96 if request.param else None, fast_math=request.param)


def _drifting(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return (1.0 + np.random.default_rng(seed).random(shape) * 1e-3).astype(np.float32)


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - want) / np.abs(want)))


def test_plain_running_sum_would_fail() -> None:
    x = _drifting((100_000,), 0)
    assert _rel(np.cumsum(x, dtype=np.float32)[-1:], x.astype(np.float64).sum(keepdims=True)) > RTOL


@pytest.mark.parametrize(
    "shape, axes",
    [
        ((64, 100_000), (1,)),  # one work-item per row on CPU devices (a long serial run)
        ((2, 1_000_000), (1,)),  # a threadgroup per row: ~10,000 values per work-item
        ((40_000, 256), (0,)),  # column chunks of a few hundred rows, then their partials
    ],
)
def test_sum_over_a_long_axis(be: Any, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    x = _drifting(shape, 1)
    got = ops.sum(be.from_numpy(x), axes).numpy()
    want = x.astype(np.float64).sum(axis=axes)
    assert _rel(got, want) < RTOL, f"{shape} over {axes}: {_rel(got, want):.2e}"


def test_layer_norm_parameter_gradients_over_many_rows(be: Any) -> None:
    rows, c = 300_000, 4  # 4,688 chunk partials summed per column
    x = np.random.default_rng(2).normal(size=(rows, c)).astype(np.float32)
    dy = _drifting((rows, c), 3)
    g = np.ones(c, np.float32)
    tx, tg = be.from_numpy(x), be.from_numpy(g)
    _, mean, rstd = F.layer_norm(tx, tg, be.from_numpy(np.zeros(c, np.float32)))
    _, _, dbeta = F.layer_norm_backward(be.from_numpy(dy), tx, tg, mean, rstd)
    want = dy.astype(np.float64).sum(0)
    assert _rel(dbeta.numpy(), want) < RTOL
