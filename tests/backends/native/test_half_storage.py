"""The native backend's methods on float16/bfloat16 storage (the ones a half-declaring
backend runs itself: docs/DECISIONS.md, "Half precision"): cast from and to strided
views, fill rounding the value once from its double, allocation from the buffer pool;
against numpy / exact values.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import native_backend_module
from riftco.tensor import Tensor

native_mod = native_backend_module()
ml_dtypes = pytest.importorskip("ml_dtypes")

F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
HALVES = pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])


@pytest.fixture(scope="module")
def nb():
    return native_mod.NativeBackend()


def transposed(t: Tensor) -> Tensor:
    """The [n, m] transpose of a dense [m, n] tensor, as a strided view (no copy)."""
    m, n = t.shape
    return Tensor(t.backend, t.storage, (n, m), (1, n), 0, t.dtype)


@HALVES
@pytest.mark.parametrize("wide", [np.float32, np.float64])
def test_cast_strided_views_both_ways(nb, dtype, wide) -> None:
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((33, 70)) * 100).astype(wide)
    x = transposed(nb.from_numpy(a))
    with np.errstate(over="ignore"):
        want = a.T.astype(dtype)  # numpy / ml_dtypes: one rounding from `wide`
    h = nb.cast(x, dtype)
    assert h.dtype == dtype and h.shape == (70, 33) and h.is_dense
    got = nb.to_numpy(h)
    assert got.dtype == dtype and np.array_equal(got.view(np.uint16), want.view(np.uint16))
    back = nb.cast(transposed(h), np.dtype(wide))
    assert back.dtype == wide
    assert np.array_equal(nb.to_numpy(back), want.T.astype(wide))  # widening is exact


@HALVES
def test_cast_between_half_dtypes_and_to_itself(nb, dtype) -> None:
    other = BF16 if dtype == F16 else F16
    a = np.array([1.0, -2.5, 1 + 2**-9, 3e-5, 60000.0], dtype=np.float64)
    h = nb.from_numpy(a.astype(dtype))
    same = nb.cast(h, dtype)
    assert same.storage is not h.storage
    assert np.array_equal(nb.to_numpy(same).view(np.uint16), a.astype(dtype).view(np.uint16))
    o = nb.to_numpy(nb.cast(h, other))
    want = a.astype(dtype).astype(np.float32).astype(other)  # exact widening, one rounding
    assert np.array_equal(o.view(np.uint16), want.view(np.uint16))


def test_fill_rounds_the_double_once(nb) -> None:
    """1 + 2^-8 + 2^-30 rounds to 1 + 2^-7 in bfloat16; through float32 (1 + 2^-8, a tie)
    it would round to 1.0. 65519.99 is 65504 in float16; through float32 (65520.0) inf."""
    for dtype, value, want in ((BF16, 1 + 2**-8 + 2**-30, 1 + 2**-7), (F16, 65519.99, 65504.0)):
        x = nb.allocate((3, 5), dtype)
        nb.fill(x, value)
        got = nb.to_numpy(x).astype(np.float64)
        assert np.all(got == want), (dtype, got)


@HALVES
def test_fill_writes_only_the_view(nb, dtype) -> None:
    base = nb.from_numpy(np.zeros(10, dtype=dtype))
    part = Tensor(nb, base.storage, (4,), (1,), 3, dtype)
    nb.fill(part, -0.0)
    nb.fill(Tensor(nb, base.storage, (2,), (1,), 7, dtype), float("inf"))
    got = nb.to_numpy(base).astype(np.float64)
    assert list(got) == [0, 0, 0, 0, 0, 0, 0, np.inf, np.inf, 0]
    assert list(np.signbit(got)) == [False] * 3 + [True] * 4 + [False] * 3


@HALVES
def test_allocate_is_two_bytes_per_element(nb, dtype) -> None:
    x = nb.allocate((256, 300), dtype)
    assert x.dtype == dtype and x.storage.buffer.nbytes == 256 * 300 * 2


@HALVES
def test_cast_of_a_dense_prefix_of_a_longer_buffer_writes_only_its_result(nb, dtype) -> None:
    """Offset 0 and contiguous (``is_dense``) but the storage holds more elements: the
    conversion covers x.size elements, not the buffer (it wrote past the result before)."""
    a = np.arange(40, dtype=np.float32)
    base = nb.from_numpy(a)
    head = Tensor(nb, base.storage, (2, 5), (5, 1), 0, np.dtype(np.float32))
    assert head.is_dense
    h = nb.cast(head, dtype)
    assert h.storage.buffer.size == 10
    assert np.array_equal(nb.to_numpy(h).astype(np.float32), a[:10].reshape(2, 5))
    back = nb.cast(Tensor(nb, h.storage, (3,), (1,), 0, dtype), np.dtype(np.float64))
    assert list(nb.to_numpy(back)) == [0.0, 1.0, 2.0]
