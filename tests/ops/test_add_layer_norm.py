"""``add_layer_norm`` (residual add + LayerNorm, forward and backward) against float64
numpy written from the definition, finite differences, the unfused ops bit for bit (cpu,
native), its error contract, and its use by the GPT model.

The reference is the textbook LayerNorm of ``s = x + r`` and, backward,
``ds + rstd * (g - mean(g) - xhat * mean(g * xhat))`` with ``g = dy * gamma``; it shares
no code with any backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import riftco
from helpers import cpu_native_opencl
from riftco import ops
from riftco.autograd import Variable, add_layer_norm, exp, gradcheck, layer_norm
from riftco.errors import DeviceMismatchError, DTypeError, ShapeError
from riftco.nn import GPT, GPTConfig
from riftco.ops.fused import add_layer_norm as unit_module

EPS = 1e-5


def _reference(x: np.ndarray, r: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> Any:
    s = x + r
    mean = s.mean(axis=-1)
    rstd = 1.0 / np.sqrt(((s - mean[..., None]) ** 2).mean(axis=-1) + EPS)
    y = (s - mean[..., None]) * rstd[..., None] * gamma + beta
    return s, y, mean, rstd


def _reference_backward(dy: Any, ds: Any, s: Any, gamma: Any, mean: Any, rstd: Any) -> Any:
    xhat = (s - mean[..., None]) * rstd[..., None]
    g = dy * gamma
    dx = rstd[..., None] * (
        g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True)
    )
    lead = tuple(range(s.ndim - 1))
    return ds + dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)


def _data(shape: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    c = shape[-1]
    x, r, dy, ds = (rng.standard_normal(shape) for _ in range(4))
    return [x + 3.0, r, 1 + 0.1 * rng.standard_normal(c), 0.1 * rng.standard_normal(c), dy, ds]


@pytest.mark.parametrize("backend", cpu_native_opencl())
@pytest.mark.parametrize("shape", [(64, 128), (3, 5, 67), (2, 1), (1, 4097), (0, 8)])
def test_forward_and_backward_match_float64_math(backend: str, shape: tuple[int, ...]) -> None:
    dtype = np.float32 if backend == "opencl" else np.float64
    dev = riftco.device(backend)
    x, r, gamma, beta, dy, ds = _data(shape)
    up = lambda a: riftco.tensor(np.asarray(a, dtype=dtype), device=dev)  # noqa: E731
    got = ops.add_layer_norm(up(x), up(r), up(gamma), up(beta), EPS)
    want = _reference(x, r, gamma, beta)
    rtol, atol = (1e-11, 1e-11) if dtype == np.float64 else (2e-4, 2e-5)
    for t, w in zip(got, want, strict=True):
        np.testing.assert_allclose(t.numpy(), w, rtol=rtol, atol=atol)
    s, _, mean, rstd = got
    back = ops.add_layer_norm_backward(up(dy), up(ds), s, up(gamma), mean, rstd)
    want_back = _reference_backward(dy, ds, *want[:1], gamma, *want[2:])
    for t, w in zip(back, want_back, strict=True):
        np.testing.assert_allclose(t.numpy(), w, rtol=rtol, atol=atol * max(1, shape[0]))


@pytest.mark.parametrize("backend", ["cpu", "native"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_is_bitwise_the_unfused_pair(backend: str, dtype: Any) -> None:
    """What keeps training bitwise equal: s is add's sum, y/mean/rstd layer_norm's of it,
    and the backward is add(ds, layer_norm_backward's dx)."""
    dev = riftco.device(backend)
    x, r, gamma, beta, dy, ds = (riftco.tensor(a.astype(dtype), device=dev)
                                 for a in _data((96, 128), seed=3))  # fmt: skip
    fused = ops.add_layer_norm(x, r, gamma, beta, EPS)
    s = ops.add(x, r)
    unfused = (s, *ops.layer_norm(s, gamma, beta, EPS))
    for a, b in zip(fused, unfused, strict=True):
        assert np.array_equal(a.numpy(), b.numpy())
    back = ops.add_layer_norm_backward(dy, ds, s, gamma, fused[2], fused[3])
    dx, dgamma, dbeta = ops.layer_norm_backward(dy, s, gamma, fused[2], fused[3])
    for a, b in zip(back, (ops.add(ds, dx), dgamma, dbeta), strict=True):
        assert np.array_equal(a.numpy(), b.numpy())


def _sum_times_norm(x: Variable, r: Variable, gamma: Variable, beta: Variable) -> Variable:
    s, y = add_layer_norm(x, r, gamma, beta)
    return s * y + y  # s's other reader runs before y's rule: the folded backward


def _norm_then_exp(x: Variable, r: Variable, gamma: Variable, beta: Variable) -> Variable:
    s, y = add_layer_norm(x, r, gamma, beta)
    return exp(s * 0.1) + y  # exp's node runs after y's rule: plain backward, then an add


def _norm_only(x: Variable, r: Variable, gamma: Variable, beta: Variable) -> Variable:
    return add_layer_norm(x, r, gamma, beta)[1]


@pytest.mark.parametrize("fn", [_sum_times_norm, _norm_then_exp, _norm_only])
def test_gradients_match_finite_differences(fn: Any) -> None:
    x, r, gamma, beta, _, _ = _data((3, 7), seed=5)
    gradcheck(fn, [x, r, gamma, beta], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("backend", ["cpu", "native"])
def test_variable_gradients_equal_the_unfused_graph_bitwise(backend: str) -> None:
    dev = riftco.device(backend)
    arrays = [a.astype(np.float32) for a in _data((32, 64), seed=7)]
    grads = []
    for fused in (True, False):
        x, r, gamma, beta = (Variable(riftco.tensor(a, device=dev), requires_grad=True)
                             for a in arrays[:4])  # fmt: skip
        if fused:
            s, y = add_layer_norm(x, r, gamma, beta)
        else:
            s = x + r
            y = layer_norm(s, gamma, beta)
        loss = (s * Variable(riftco.tensor(arrays[5], device=dev)) + y * y).sum()
        loss.backward()
        grads.append([v.grad.numpy() for v in (x, r, gamma, beta)])  # type: ignore[union-attr]
    for a, b in zip(*grads, strict=True):
        assert np.array_equal(a, b)


class _Refuse:
    """Stands in for dispatch: a bad call must raise before reaching it."""

    def __call__(self, *args: Any) -> Any:
        raise AssertionError("dispatch reached: the check ran too late")


def _bad_calls(t: Any, i: Any, other: Any) -> list[tuple[type[Exception], Any]]:
    f = unit_module.add_layer_norm
    b = unit_module.add_layer_norm_backward
    return [
        (ShapeError, lambda: f(t(2, 4), t(2, 5), t(4), t(4))),  # r's shape
        (ShapeError, lambda: f(t(2, 4), t(2, 4), t(3), t(4))),  # gamma
        (ShapeError, lambda: f(t(2, 4), t(2, 4), t(4), t(5))),  # beta
        (ShapeError, lambda: f(t(2, 0), t(2, 0), t(0), t(0))),  # C = 0
        (ShapeError, lambda: f(t(2, 4), t(2, 4), t(4), t(4), 0.0)),  # eps
        (DTypeError, lambda: f(t(2, 4), i(2, 4), t(4), t(4))),  # integer r
        (DTypeError, lambda: f(t(2, 4), other(2, 4), t(4), t(4))),  # mixed float dtypes
        (ShapeError, lambda: b(t(2, 4), t(4, 2), t(2, 4), t(4), t(2), t(2))),  # ds
        (ShapeError, lambda: b(t(2, 4), t(2, 4), t(2, 4), t(4), t(3), t(2))),  # mean
        (DTypeError, lambda: b(t(2, 4), other(2, 4), t(2, 4), t(4), t(2), t(2))),  # ds dtype
    ]


def test_bad_calls_raise_naming_the_op_before_any_kernel(monkeypatch: Any) -> None:
    dev = riftco.device("native")
    t = lambda *s: riftco.tensor(np.zeros(s, np.float32), device=dev)  # noqa: E731
    i = lambda *s: riftco.tensor(np.zeros(s, np.int32), device=dev)  # noqa: E731
    other = lambda *s: riftco.tensor(np.zeros(s, np.float64), device=dev)  # noqa: E731
    monkeypatch.setattr(unit_module, "dispatch", _Refuse())
    for n, (kind, call) in enumerate(_bad_calls(t, i, other)):
        with pytest.raises(kind) as err:
            call()
        assert str(err.value).startswith(("[add_layer_norm]", "[add_layer_norm_backward]")), n


def test_mixed_devices_are_refused() -> None:
    cpu, native = riftco.device("cpu"), riftco.device("native")
    x = riftco.tensor(np.zeros((2, 4), np.float32), device=cpu)
    r = riftco.tensor(np.zeros((2, 4), np.float32), device=native)
    c = riftco.tensor(np.ones(4, np.float32), device=cpu)
    with pytest.raises(DeviceMismatchError, match=r"^\[add_layer_norm\]"):
        ops.add_layer_norm(x, r, c, c)


class _Counting:
    def __init__(self, backend: Any, monkeypatch: Any) -> None:
        self.calls: dict[str, int] = {}
        for name in ("layer_norm", "layer_norm_backward", "add_layer_norm",
                     "add_layer_norm_backward", "add"):  # fmt: skip
            method = getattr(backend, name)

            def counted(*a: Any, _m: Any = method, _n: str = name) -> Any:
                self.calls[_n] = self.calls.get(_n, 0) + 1
                return _m(*a)

            monkeypatch.setattr(backend, name, counted)


@pytest.mark.parametrize("recompute", ["none", "block"])
def test_gpt_step_uses_the_fused_op(monkeypatch: Any, recompute: str) -> None:
    """Every residual add meets its LayerNorm in one call; backward folds all but the final
    LayerNorm's input (nothing else reads the last stream). In recompute mode the blocks
    meet at a plain stream, so only the add before ln2 is fused."""
    dev = riftco.device("native")
    layers = 3
    cfg = GPTConfig(vocab=11, context=8, layers=layers, heads=2, width=16, recompute=recompute)
    model = GPT(cfg, device=dev)
    ids = riftco.tensor(np.arange(16, dtype=np.int32).reshape(2, 8) % 11, device=dev)
    counter = _Counting(dev.backend, monkeypatch)
    model.loss(ids, ids).backward()
    calls = counter.calls
    if recompute == "none":
        assert calls["add_layer_norm"] == 2 * layers
        assert calls["add_layer_norm_backward"] == 2 * layers - 1
        assert calls["layer_norm"] == 1 and calls["layer_norm_backward"] == 2
    else:  # each block's forward runs twice (recorded, then recomputed in backward)
        assert calls["add_layer_norm"] == 2 * layers
        assert calls["add_layer_norm_backward"] == layers
