"""attention_qkv's two modes are one op with a flag, on purpose (docs/DECISIONS.md): these
tests pin the contract of each mode so the flag cannot blur it.

``flash=False`` returns ``(out[B, T, C], probs[B, H, T, T])``, exactly what ``attention``
returns for the head views; ``flash=True`` returns ``(out, lse[B, H, T])``, exactly what
``flash_attention`` returns. The backward takes the statistic of the mode it is told and
refuses the other one before any backend runs. Checked on the CPU backends that load here
(cpu, native when built) and on core's composite.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import riftco
from helpers import assert_close
from riftco import ops
from riftco.errors import ShapeError
from riftco.ops.fused import attention_qkv as unit_module
from riftco.ops.fused.attention_qkv import ATTENTION_QKV, ATTENTION_QKV_BACKWARD, heads_view

B, T, HEADS, D = 2, 9, 3, 4
SCALE = 0.4
MODES = [(False, "probs", (B, HEADS, T, T)), (True, "lse", (B, HEADS, T))]


def _devices() -> list[str]:
    names = ["cpu"]
    try:
        riftco.device("native")
        names.append("native")
    except riftco.errors.RiftcoError:
        pass
    return names


@pytest.fixture(params=_devices())
def device(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _qkv(device: str, dtype: type = np.float64) -> riftco.Tensor:
    x = np.random.default_rng(7).normal(size=(B, T, 3 * HEADS * D)).astype(dtype)
    return riftco.tensor(x, device=device)


@pytest.mark.parametrize("flash,stat_name,stat_shape", MODES, ids=["materialized", "flash"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_each_mode_returns_its_per_head_ops_statistic(device, flash, stat_name, stat_shape, causal):
    x = _qkv(device)
    per_head = ops.flash_attention if flash else ops.attention
    q, k, v = (heads_view(x, HEADS, i, 3) for i in range(3))
    want_out, want_stat = per_head(q, k, v, SCALE, causal)
    for fn in (ops.attention_qkv, ops.composite("attention_qkv")):
        out, stat = fn(x, HEADS, SCALE, causal, flash)
        assert out.shape == (B, T, HEADS * D) and out.dtype == x.dtype
        assert stat.shape == stat_shape and stat.dtype == x.dtype, stat_name
        merged = want_out.numpy().transpose(0, 2, 1, 3).reshape(B, T, HEADS * D)
        assert_close(out.numpy(), merged, rtol=1e-12, atol=1e-12, msg="out")
        assert_close(stat.numpy(), want_stat.numpy(), rtol=1e-12, atol=1e-12, msg=stat_name)
        if not flash:  # probabilities: rows sum to 1, masked entries exactly 0
            p = stat.numpy()
            assert_close(p.sum(-1), np.ones(stat_shape[:-1]), rtol=1e-12, atol=1e-12)
            if causal:
                assert not p[..., np.triu(np.ones((T, T), dtype=bool), 1)].any()


@pytest.mark.parametrize("flash,stat_name,stat_shape", MODES, ids=["materialized", "flash"])
def test_backward_takes_its_modes_statistic_and_refuses_the_other(
    device, flash, stat_name, stat_shape
):
    x = _qkv(device)
    out, stat = ops.attention_qkv(x, HEADS, SCALE, True, flash)
    dout = riftco.tensor(np.ones((B, T, HEADS * D)), device=device)
    dqkv = ops.attention_qkv_backward(dout, x, out, stat, HEADS, SCALE, True, flash)
    assert dqkv.shape == x.shape and dqkv.dtype == x.dtype
    _, other = ops.attention_qkv(x, HEADS, SCALE, True, not flash)
    with pytest.raises(ShapeError, match=rf"^\[attention_qkv_backward\] {stat_name}"):
        ops.attention_qkv_backward(dout, x, out, other, HEADS, SCALE, True, flash)


def test_the_flag_is_the_only_mode_selector_and_both_modes_are_documented() -> None:
    """One protocol method per direction, each with a ``flash`` flag, whose docstring (the
    specification backends implement) names both statistics."""
    for unit in (ATTENTION_QKV, ATTENTION_QKV_BACKWARD):
        assert "flash" in inspect.signature(unit.method).parameters
    assert ATTENTION_QKV.outputs == ("out", "stat")
    spec = inspect.getdoc(ATTENTION_QKV.method) or ""
    assert "probs[B, H, T, T]" in spec and "lse[B, H, T]" in spec
    assert "flash" in (unit_module.__doc__ or "")
