"""The kernel host's linear backwards on float16/bfloat16 operands (core/kernel_host/
half_linear.py): the widened path's launches in another order, so the widened path's bits,
with fewer float32 matrices alive at once. Run on OpenCL (IEEE) and the Metal stand-in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from half_helpers import half_backend, widened
from riftco.dtypes import bfloat16 as BFLOAT16

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
HALVES = [F16] + ([BFLOAT16] if BFLOAT16 is not None else [])


@pytest.mark.parametrize("kind", ["ieee", "metal"])
@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
@pytest.mark.parametrize("gelu", ["", "tanh", "none"])
def test_half_linear_backward_gives_the_widened_paths_bits_in_less_memory(
    kind: str, dtype: np.dtype, gelu: str
) -> None:
    be = half_backend(kind)
    rng = np.random.default_rng(4)
    m, k, n = 96, 40, 72

    def t(*shape: int) -> Any:
        return be.from_numpy((rng.standard_normal(shape) * 2).astype(dtype))

    dy, x, w, h = t(m, n), t(m, k), t(k, n), t(m, n)
    name, args, extra = (
        ("linear_gelu_backward", [dy, x, w, h], (gelu,)) if gelu
        else ("linear_backward", [dy, x, w], ())
    )  # fmt: skip
    assert name in be.low_precision_ops
    be.synchronize()
    before = be.memory_stats()["allocated_bytes"]
    be.reset_peak()
    outs = getattr(be, name)(*args, *extra)
    be.synchronize()
    ours = be.memory_stats()["peak_bytes"] - before
    got = [be.to_numpy(o) for o in outs]
    del outs
    be.synchronize()
    before = be.memory_stats()["allocated_bytes"]
    be.reset_peak()
    want = widened(be, name, *args, *extra)
    theirs = be.memory_stats()["peak_bytes"] - before
    for label, g, wv in zip(("dx", "dw", "db"), got, want, strict=True):
        assert g.dtype == dtype and g.shape == wv.shape, label
        assert np.array_equal(g.view(np.uint16), wv.view(np.uint16)), f"{name} {label}"
    # widened: all float32 operands at once (plus dH with GELU); here at most dY's and
    # H's float32 copies, or dY's and one product's operand and result
    assert ours < theirs, (ours, theirs)
