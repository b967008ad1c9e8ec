"""float16 and bfloat16 in core: casts that round once, ops that compute in float32.

The expected roundings come from enumerating every 16-bit pattern (decoded by bit
arithmetic, not by numpy's or ml_dtypes' converters) and picking the nearest value, ties to
the even pattern: an independent statement of round-to-nearest-even.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import riftco
from helpers import plugin_for
from riftco import dtypes, ops
from riftco.backends.cpu.backend import CPUBackend, view
from riftco.errors import DTypeError
from riftco.ops.opunit import F32, low_precision

pytestmark = pytest.mark.skipif(dtypes.bfloat16 is None, reason="ml_dtypes is not installed")

BF16 = dtypes.bfloat16


def _decode(kind: str) -> np.ndarray:
    """Every finite value of the 16-bit format, as float64, indexed by bit pattern."""
    bits = np.arange(1 << 16, dtype=np.uint32)
    if kind == "bfloat16":
        with np.errstate(invalid="ignore"):  # signalling NaN patterns turn quiet
            return (bits << 16).view(np.float32).astype(np.float64)
    sign = np.where(bits >> 15, -1.0, 1.0)
    exp = (bits >> 10) & 0x1F
    man = (bits & 0x3FF).astype(np.float64)
    normal = sign * (1 + man / 1024) * 2.0 ** (exp.astype(np.float64) - 15)
    sub = sign * man / 1024 * 2.0**-14
    return np.where(exp == 0, sub, np.where(exp == 31, np.nan, normal))


def _round(values: np.ndarray, kind: str) -> np.ndarray:
    """Round-to-nearest-even by search over every finite value of the format."""
    table = _decode(kind)
    finite = np.isfinite(table)
    patterns = np.flatnonzero(finite)
    order = np.argsort(table[finite], kind="stable")
    vals, pats = table[finite][order], patterns[order]
    out = np.empty_like(values)
    top = vals[-1]
    half_ulp = (vals[-1] - vals[-2]) / 2  # beyond top + half an ulp: infinity
    for i, v in enumerate(values):
        if np.isnan(v) or abs(v) >= top + half_ulp:
            out[i] = v if np.isnan(v) else np.copysign(np.inf, v)
            continue
        j = int(np.searchsorted(vals, v))
        cands = [k for k in (j - 1, j) if 0 <= k < len(vals)]
        best = min(abs(vals[k] - v) for k in cands)
        near = [k for k in cands if abs(vals[k] - v) == best]
        even = [k for k in near if pats[k] % 2 == 0]
        out[i] = vals[(even or near)[0]]
    return out


TRAPS = np.array(
    [1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, -(1 + 3 * 2**-8), 65519.0, 65520.0, -65520.0,
     2**-25, 3 * 2**-26, 2**-24, 2**-20, 1 + 2**-8 + 2**-30, 1 + 2**-11 + 2**-40, 0.1, -7.3e-6,
     3.3895313892515355e38, 3.3961775292304e38, 2**-130, 2**-134, 1e-45, np.inf, -0.0]
)  # fmt: skip


@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
@pytest.mark.parametrize("source", ["float32", "float64"])
def test_cast_rounds_once_to_nearest_even(kind: str, source: str) -> None:
    """float64 -> half rounds from the float64 value (1 + 2^-8 + 2^-30 goes up in
    bfloat16; through float32 it would be a tie and go down)."""
    x = TRAPS.astype(source)
    got = ops.cast(riftco.tensor(x), kind).numpy().astype(np.float64)
    want = _round(x.astype(np.float64), kind)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[-1])  # -0.0 stays negative zero


@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
def test_cast_back_is_exact_and_nan_stays_nan(kind: str) -> None:
    table = _decode(kind)
    finite = table[np.isfinite(table)]
    half = ops.cast(riftco.tensor(finite), kind)
    for wide in ("float32", "float64"):
        np.testing.assert_array_equal(ops.cast(half, wide).numpy().astype(np.float64), finite)
    nan = ops.cast(riftco.tensor(np.array([np.nan, -np.nan], np.float32)), kind)
    assert np.isnan(nan.numpy().astype(np.float32)).all()


def test_sum_accumulates_in_float32() -> None:
    """2048 + 1 is 2048 in float16 (spacing 2): a half accumulator loses all hundred ones."""
    x = np.array([2048.0] + [1.0] * 100, np.float16)
    got = ops.sum(riftco.tensor(x), (0,), False)
    assert got.dtype == np.float16 and float(got.numpy()) == 2148.0


def test_ops_round_once_from_float32() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 33)).astype(BF16)
    got = ops.softmax(riftco.tensor(x)).numpy()
    f = x.astype(np.float64)
    want = np.exp(f - f.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    assert got.dtype == BF16
    err = np.abs(got.astype(np.float64) - want) / want
    assert err.max() <= 2.0**-8 + 1e-6  # one rounding: unit roundoff, plus float32's


def test_statistics_stay_float32_and_backward_checks_them() -> None:
    x = riftco.tensor(np.ones((3, 4), np.float16))
    g, b = riftco.tensor(np.ones(4, np.float16)), riftco.tensor(np.zeros(4, np.float16))
    y, mean, rstd = ops.layer_norm(x, g, b)
    assert (y.dtype, mean.dtype, rstd.dtype) == (np.float16, np.float32, np.float32)
    loss, lse = ops.cross_entropy(x, riftco.tensor(np.zeros(3, np.int32)))
    assert loss.dtype == lse.dtype == np.float32
    with pytest.raises(DTypeError, match=r"^\[layer_norm_backward\] mean must be float32"):
        ops.layer_norm_backward(x, x, g, ops.cast(mean, "float16"), rstd)


def test_optimizer_refuses_half_weights() -> None:
    p = riftco.tensor(np.ones(3, np.float16))
    with pytest.raises(DTypeError, match=r"^\[adam_update\] param is float16 \(3,\)"):
        ops.adam_update(p, p, p, p, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1)


def test_cast_gradient_comes_back_in_the_source_dtype() -> None:
    w = riftco.Variable(riftco.tensor(np.array([1.0, 3.0], np.float32)), requires_grad=True)
    loss = (w.astype("bfloat16") * w.astype("bfloat16")).sum().astype("float32")
    loss.backward()
    assert w.grad is not None and w.grad.dtype == np.float32
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 6.0])


class Spy(CPUBackend):
    """Runs ``softmax`` in half itself; records the dtypes each method receives."""

    name = "halfspy"
    low_precision_ops = frozenset({"softmax"})
    seen: list[tuple[str, str]] = []

    def softmax(self, x: Any) -> Any:
        Spy.seen.append(("softmax", x.dtype.name))
        v = view(x).astype(np.float32)
        e = np.exp(v - v.max(-1, keepdims=True))
        return self.result((e / e.sum(-1, keepdims=True)).astype(x.dtype))

    def exp(self, x: Any) -> Any:
        Spy.seen.append(("exp", x.dtype.name))
        return super().exp(x)


def test_low_precision_ops_run_natively_and_the_rest_widened(registry: Any) -> None:
    registry.register(plugin_for(Spy), name=Spy.name)
    dev = riftco.device(Spy.name)
    x = riftco.tensor(np.ones((2, 3), np.float16), device=dev)
    Spy.seen.clear()
    assert ops.softmax(x).dtype == np.float16 and ops.exp(x).dtype == np.float16
    assert Spy.seen == [("softmax", "float16"), ("exp", "float32")]
    assert not riftco.ops.widen.needed(ops.unit("softmax"), dev.backend, (x,), Spy.softmax)
    assert riftco.ops.widen.needed(ops.unit("softmax"), dev.backend, (x,), None)  # composite


def test_tolerance_is_one_rounding_beyond_float32() -> None:
    tol = low_precision(F32, dtypes.float16)
    assert tol.rtol == F32.rtol + 2.0**-11 and tol.atol == F32.atol and tol.floor == 2.0**-25
    assert low_precision(F32, BF16).rtol == F32.rtol + 2.0**-8


def test_bfloat16_without_ml_dtypes_says_what_to_install(monkeypatch: Any) -> None:
    monkeypatch.setattr(dtypes, "bfloat16", None)
    with pytest.raises(DTypeError, match=r"ml_dtypes.*riftco\[bfloat16\]"):
        dtypes.as_dtype("bfloat16", "cast")
