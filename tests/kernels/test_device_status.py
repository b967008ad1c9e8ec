"""Out-of-range ids on device backends: clamped in the kernel, reported at the next sync.

The embedding and cross-entropy kernels never address memory through a bad id (the
process used to segfault for 10**6 or 2**31 - 1, and id = V or -1 read a neighbouring
row). They write zeros for it, flag the device status buffer, and the host raises the
CPU backend's DomainError at the next sync point (``to_numpy``/``item``/``synchronize``),
saying it was detected late. Runs on OpenCL (IEEE and fast math) and the Metal stand-in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from riftco import ops as F
from riftco.errors import DomainError

rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL runtime import failed")
_devices, _why = rt.enumerate_devices()
pytestmark = pytest.mark.skipif(not _devices, reason=f"no usable OpenCL device: {_why}")

_MADE: dict[str, Any] = {}


@pytest.fixture(params=["opencl", "opencl-fast96", "metal"])
def be(request: pytest.FixtureRequest) -> Any:
    kind = request.param
    if kind not in _MADE:
        from riftco.backends.opencl.backend import OpenCLBackend

        if kind == "opencl":
            _MADE[kind] = OpenCLBackend(0)
        elif kind == "opencl-fast96":
            _MADE[kind] = OpenCLBackend(0, group_size=96, fast_math=True)
        else:
            from riftco.backends.metal import standin
            from riftco.backends.metal.backend import MetalBackend

            _MADE[kind] = MetalBackend(0, mc_module=standin)
    backend = _MADE[kind]
    backend.device_status.check()  # a test that failed half-way must not leak its flag
    return backend


def _table(be: Any, v: int = 7, c: int = 5) -> tuple[Any, np.ndarray]:
    t = np.arange(v * c, dtype=np.float32).reshape(v, c) + 1
    return be.from_numpy(t), t


@pytest.mark.parametrize("bad", [7, -1, -2, 10**6, 2**31 - 1, -(2**31)])
def test_embedding_bad_id_raises_at_the_next_sync(be: Any, bad: int) -> None:
    table, t = _table(be)
    ids = be.from_numpy(np.array([0, bad, 6, 3], np.int32))
    out = F.embedding(table, ids)  # queued: no error yet, and no crash
    with pytest.raises(DomainError, match=r"^\[embedding\] ids must lie in \[0, 7\); got") as e:
        out.numpy()
    assert f"[{bad}, {bad}]" in str(e.value) and "next sync" in str(e.value)
    # the flag was consumed: the same result now reads back, bad row as zeros
    got = out.numpy()
    np.testing.assert_array_equal(got[[0, 2, 3]], t[[0, 6, 3]])
    np.testing.assert_array_equal(got[1], np.zeros(5, np.float32))


def test_int64_ids_saturate_in_the_message(be: Any) -> None:
    if np.dtype(np.int64) not in be.dtypes:
        pytest.skip(f"{be.name} has no int64 ids")
    table, _ = _table(be)
    ids = be.from_numpy(np.array([2**40, -(2**40), 3], np.int64))
    out = F.embedding(table, ids)
    with pytest.raises(DomainError, match=r"\[-2147483648, 2147483647\] \(saturated to int32\)"):
        be.synchronize()
    assert (out.numpy()[:2] == 0).all()


@pytest.mark.parametrize("n, v", [(9, 7), (3000, 40)])  # direct kernel; radix-sort plan
def test_embedding_backward_bad_id_contributes_nothing(be: Any, n: int, v: int) -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, v, n).astype(np.int32)
    ids[[1, n - 1]] = [v, -5]
    dy = rng.normal(size=(n, 3)).astype(np.float32)
    dtable = F.embedding_backward(be.from_numpy(dy), be.from_numpy(ids), v)
    with pytest.raises(DomainError, match=rf"^\[embedding_backward\] ids must lie in \[0, {v}\)"):
        dtable.numpy()
    keep = (ids >= 0) & (ids < v)
    want = np.zeros((v, 3))
    np.add.at(want, ids[keep], dy[keep].astype(np.float64))
    np.testing.assert_allclose(dtable.numpy(), want, rtol=1e-5, atol=1e-5)


def test_cross_entropy_targets_only_minus_one_is_ignored(be: Any) -> None:
    logits = be.from_numpy(np.zeros((4, 5), np.float32))
    ok = be.from_numpy(np.array([0, -1, 4, 2], np.int32))
    loss, lse = F.cross_entropy(logits, ok)
    np.testing.assert_allclose(loss.numpy(), [np.log(5), 0, np.log(5), np.log(5)], rtol=1e-6)
    for bad in (-2, 5, 10**6):
        targets = be.from_numpy(np.array([0, bad, 1, 2], np.int32))
        loss, lse = F.cross_entropy(logits, targets)
        pattern = r"^\[cross_entropy\] targets \(-1 = ignored\) must lie in \[-1, 5\)"
        with pytest.raises(DomainError, match=pattern):
            loss.numpy()
        assert loss.numpy()[1] == 0  # counted as ignored, nothing read through it
        dl = F.cross_entropy_backward(be.from_numpy(np.ones(4, np.float32)), logits, targets, lse)
        with pytest.raises(DomainError, match=r"^\[cross_entropy_backward\]"):
            be.synchronize()
        assert (dl.numpy()[1] == 0).all()


def test_several_flagged_ops_are_named_in_one_error(be: Any) -> None:
    table, _ = _table(be)
    F.embedding(table, be.from_numpy(np.array([9], np.int32)))
    logits = be.from_numpy(np.zeros((1, 3), np.float32))
    F.cross_entropy(logits, be.from_numpy(np.array([3], np.int32)))
    with pytest.raises(DomainError) as e:
        be.synchronize()
    msg = str(e.value)
    assert msg.startswith("[embedding] ids must lie in [0, 7); got out-of-range values in [9, 9]")
    assert "also [cross_entropy] targets (-1 = ignored) must lie in [-1, 3)" in msg


def test_no_status_read_without_an_index_kernel(be: Any) -> None:
    import riftco.ops as ops

    reads = be.device_status.reads
    x = be.from_numpy(np.ones(10, np.float32))
    ops.add(x, x).numpy()
    be.synchronize()
    assert be.device_status.reads == reads
    table, _ = _table(be)
    F.embedding(table, be.from_numpy(np.array([1], np.int32))).numpy()
    F.embedding(table, be.from_numpy(np.array([2], np.int32))).numpy()
    assert be.device_status.reads == reads + 2  # one 4-byte word per sync that needed it


def test_gpt_forward_with_an_out_of_range_token_raises() -> None:
    """Through the model, as a user would hit it: the loss read raises, nothing crashes.
    (The registry's own opencl:0 instance; the stand-in is exercised op by op above.)"""
    import riftco
    from riftco.nn import GPT, GPTConfig

    dev = riftco.device("opencl:0")
    dev.backend.device_status.check()
    cfg = GPTConfig(vocab=11, context=4, layers=1, heads=1, width=8)
    model = GPT(cfg, device=dev, seed=0)
    ids = np.array([[1, 2, 3, 10**6]], np.int32)
    targets = np.array([[2, 3, 4, 5]], np.int32)
    loss = model.loss(riftco.tensor(ids, device=dev), riftco.tensor(targets, device=dev))
    with pytest.raises(DomainError, match=r"^\[embedding\] ids must lie in \[0, 11\); got"):
        loss.item()
    good = model.loss(riftco.tensor(ids % 11, device=dev), riftco.tensor(targets, device=dev))
    assert np.isfinite(good.item())  # the backend carries on after the error
