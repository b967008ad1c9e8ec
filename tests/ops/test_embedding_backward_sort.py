"""Embedding backward as a stable radix sort plus ordered segment sums (issue 15).

The old kernel walked every id for every output element (O(V * C * n)); the plan in
core/kernel_host/fused_embedding.py sorts (id, position) pairs with integer counting and sums each
vocabulary row's segment in position order, in blocks of 32 (BlockSum in
shaders/specials.h). So every output element is summed in one documented order: bitwise
equal to ``blocked_scatter_add`` below (numpy, written from that description) in IEEE
arithmetic, and the same bits on every run and at every group size, with no float atomics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from riftco import ops as F
from riftco.kernel_host import fused_embedding

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

_SORT_KERNELS = {"embedding_sort_init", "radix_count", "radix_scan", "radix_scatter",
                 "embedding_segments", "embedding_backward_rows"}  # fmt: skip


def _opencl(group: int | None = None, fast: bool = False) -> Any:
    from riftco.backends.opencl.backend import OpenCLBackend

    return OpenCLBackend(0, group_size=group, fast_math=fast)


def blocked_sum(values: np.ndarray) -> np.ndarray:
    """Rows of ``values`` (float32) summed in order, in levels of 32: b0 takes each value;
    every 32 values b0 moves into b1, every 1024 b1 into b2, every 32768 b2 into b3; the
    total is b3 + (b2 + (b1 + b0))."""
    b = [np.zeros(values.shape[1:], values.dtype) for _ in range(4)]
    for n, v in enumerate(values, start=1):
        b[0] = b[0] + v
        for level, period in enumerate((32, 1024, 32768)):
            if n % period:
                break
            b[level + 1] = b[level + 1] + b[level]
            b[level] = np.zeros_like(b[level])
    return b[3] + (b[2] + (b[1] + b[0]))


def blocked_scatter_add(ids: np.ndarray, dy: np.ndarray, v: int) -> np.ndarray:
    out = np.zeros((v, dy.shape[1]), dy.dtype)
    for i in np.unique(ids):
        out[i] = blocked_sum(dy[ids == i])  # boolean indexing keeps position order
    return out


def _case(v: int, n: int, c: int, seed: int, index: Any = np.int32) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, v, n).astype(index)
    ids[: n // 3] = v - 1  # one long segment (a padding token), at the top of the key range
    ids[n // 3 : n // 3 + 7] = 0
    rng.shuffle(ids)
    dy = rng.normal(size=(n, c)).astype(np.float32)
    return ids, dy, blocked_scatter_add(ids, dy, v)


def _run(be: Any, ids: np.ndarray, dy: np.ndarray, v: int) -> np.ndarray:
    return F.embedding_backward(be.from_numpy(dy), be.from_numpy(ids), v).numpy()


@pytest.mark.parametrize(
    "v, n, c, passes",
    [(65, 1000, 16, 1), (300, 700, 3, 2), (50_000, 3000, 4, 2), (70_000, 2000, 3, 3)],
)
def test_matches_the_documented_order_bitwise(v: int, n: int, c: int, passes: int) -> None:
    be = _opencl()
    ids, dy, want = _case(v, n, c, seed=v)
    got = _run(be, ids, dy, v)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    ref64 = np.zeros((v, c))
    np.add.at(ref64, ids, dy.astype(np.float64))
    np.testing.assert_allclose(got, ref64, rtol=1e-5, atol=1e-4)
    used = {key[-1] for key in be._kernels}
    assert _SORT_KERNELS <= used and "embedding_backward" not in used, used
    assert len(range(0, v.bit_length(), 8)) == passes  # the case exercises that many passes


def test_same_bits_every_run_group_size_and_runtime() -> None:
    from riftco.backends.metal import standin
    from riftco.backends.metal.backend import MetalBackend

    v, n, c = 5000, 4000, 8
    ids, dy, want = _case(v, n, c, seed=1)
    runs = [_run(_opencl(g), ids, dy, v) for g in (96, 352, 256)]
    runs.append(_run(_opencl(256), ids, dy, v))
    for r in runs:
        np.testing.assert_array_equal(r.view(np.uint32), want.view(np.uint32))
    # fast math (the stand-in; OpenCL at 96): deterministic, and the same sums to rounding
    fast = [_run(MetalBackend(0, mc_module=standin), ids, dy, v) for _ in range(2)]
    fast.append(_run(_opencl(96, fast=True), ids, dy, v))
    np.testing.assert_array_equal(fast[0].view(np.uint32), fast[1].view(np.uint32))
    for r in fast:
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-4)


def test_direct_and_sorted_plans_give_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny-problem kernel and the sort plan sum in the same order."""
    v, n, c = 40, 300, 5
    ids, dy, want = _case(v, n, c, seed=2, index=np.int64)
    be = _opencl()
    monkeypatch.setattr(fused_embedding, "_EMBEDDING_DIRECT_MAX", 1 << 30)
    direct = _run(be, ids, dy, v)
    monkeypatch.setattr(fused_embedding, "_EMBEDDING_DIRECT_MAX", 0)
    sorted_ = _run(be, ids, dy, v)
    np.testing.assert_array_equal(direct.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(sorted_.view(np.uint32), want.view(np.uint32))


def test_unused_rows_are_zero_and_one_id_works() -> None:
    be = _opencl(96)
    v = 20_000
    ids = np.full(5000, 12_345, np.int32)
    dy = np.ones((5000, 2), np.float32)
    got = _run(be, ids, dy, v)
    assert got[12_345].tolist() == [5000.0, 5000.0]
    assert np.count_nonzero(got) == 2


def test_a_long_segment_stays_accurate() -> None:
    """200,000 repeats of one id (a padding token): sequential float32 would drift by
    ~1e-4 relative here; the blocked sum stays within a few ulp of float64."""
    be = _opencl()
    n, v = 200_000, 300
    ids = np.zeros(n, np.int32)
    ids[::1000] = 7
    dy = (1.0 + np.random.default_rng(3).random((n, 1)) * 1e-3).astype(np.float32)
    got = _run(be, ids, dy, v)
    want = np.zeros((v, 1))
    np.add.at(want, ids, dy.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-6)
    sequential = np.cumsum(dy[ids == 0, 0], dtype=np.float32)[-1]
    assert abs(sequential - want[0, 0]) / want[0, 0] > 2e-6  # the test can tell
