"""Embedding backward as a stable radix sort plus ordered segment sums (issue 15).

The old kernel walked every id for every output element (O(V * C * n)); the plan in
core/kernels/fused.py sorts (id, position) pairs with integer counting and sums each
vocabulary row's segment in position order. So every output element is summed in the
order of a sequential scatter-add: bitwise equal to ``np.add.at`` in IEEE arithmetic,
and the same bits on every run and at every group size, with no float atomics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from riftco import fused_ops as F
from riftco.kernels import fused

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

_SORT_KERNELS = {"embedding_sort_init", "radix_count", "radix_scan", "radix_scatter",
                 "embedding_segments", "embedding_backward_rows"}  # fmt: skip


def _opencl(group: int | None = None, fast: bool = False) -> Any:
    from riftco.backends.opencl.backend import OpenCLBackend

    return OpenCLBackend(0, group_size=group, fast_math=fast)


def _case(v: int, n: int, c: int, seed: int, index: Any = np.int32) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, v, n).astype(index)
    ids[: n // 3] = v - 1  # one long segment (a padding token), at the top of the key range
    ids[n // 3 : n // 3 + 7] = 0
    rng.shuffle(ids)
    dy = rng.normal(size=(n, c)).astype(np.float32)
    want = np.zeros((v, c), np.float32)
    np.add.at(want, ids, dy)  # sequential, in position order, in float32
    return ids, dy, want


def _run(be: Any, ids: np.ndarray, dy: np.ndarray, v: int) -> np.ndarray:
    return F.embedding_backward(be.from_numpy(dy), be.from_numpy(ids), v).numpy()


@pytest.mark.parametrize(
    "v, n, c, passes",
    [(65, 1000, 16, 1), (300, 700, 3, 2), (50_000, 3000, 4, 2), (70_000, 2000, 3, 3)],
)
def test_matches_sequential_scatter_add_bitwise(v: int, n: int, c: int, passes: int) -> None:
    be = _opencl()
    ids, dy, want = _case(v, n, c, seed=v)
    got = _run(be, ids, dy, v)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
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
    monkeypatch.setattr(fused, "_EMBEDDING_DIRECT_MAX", 1 << 30)
    direct = _run(be, ids, dy, v)
    monkeypatch.setattr(fused, "_EMBEDDING_DIRECT_MAX", 0)
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
