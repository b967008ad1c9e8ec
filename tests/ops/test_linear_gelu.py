"""``linear_gelu`` and its backward against float64 numpy and finite differences, their
error contract, and the promise that fusing changes no bits (the GPT MLP uses it).

The reference here is written from the formulas (``math.erf``, ``np.tanh``), not from any
backend. The OpenCL part runs the epilogue kernel when a device is there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import riftco
from helpers import cpu_native_opencl
from riftco import ops
from riftco.autograd import Variable, linear, linear_gelu
from riftco.errors import DeviceMismatchError, DTypeError, ShapeError

_K = math.sqrt(2.0 / math.pi)
_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _gelu(h: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * h * (1.0 + np.tanh(_K * (h + 0.044715 * h**3)))
    return 0.5 * h * (1.0 + _ERF(h / math.sqrt(2.0)))


def _gelu_grad(h: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        t = np.tanh(_K * (h + 0.044715 * h**3))
        return 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * _K * (1.0 + 3 * 0.044715 * h * h)
    return 0.5 * (1.0 + _ERF(h / math.sqrt(2.0))) + h * np.exp(-0.5 * h * h) / math.sqrt(
        2 * math.pi
    )


def _data(m: int, k: int, n: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((m, k)), rng.standard_normal((k, n)) / max(1, k) ** 0.5
    return x, w, rng.standard_normal(n), rng.standard_normal((m, n))


SHAPES = [(1, 1, 1), (33, 67, 5), (64, 32, 128), (130, 70, 129), (3, 0, 4), (0, 5, 4)]


@pytest.mark.parametrize("backend", cpu_native_opencl())
@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_forward_and_backward_match_float64_math(
    backend: str, approximate: str, m: int, k: int, n: int
) -> None:
    dtype, tol = (np.float64, 1e-10) if backend != "opencl" else (np.float32, 2e-5)
    x, w, b, dy = _data(m, k, n)
    up = lambda a: riftco.tensor(a.astype(dtype), device=backend)  # noqa: E731
    y, h = ops.linear_gelu(up(x), up(w), up(b), approximate)
    h_ref = x @ w + b
    np.testing.assert_allclose(h.numpy(), h_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(y.numpy(), _gelu(h_ref, approximate), rtol=tol, atol=tol)
    dx, dw, db = ops.linear_gelu_backward(up(dy), up(x), up(w), h, approximate)
    dh = dy * _gelu_grad(h_ref, approximate)
    scale = tol * max(1, m)
    np.testing.assert_allclose(dx.numpy(), dh @ w.T, rtol=tol, atol=tol * max(1, n))
    np.testing.assert_allclose(dw.numpy(), x.T @ dh, rtol=tol, atol=scale)
    np.testing.assert_allclose(db.numpy(), dh.sum(axis=0), rtol=tol, atol=scale)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gradients_match_finite_differences(approximate: str) -> None:
    """Central differences of ``sum(y * c)`` in float64 on the cpu backend's Variable graph."""
    x, w, b, c = _data(4, 3, 5, seed=1)

    def loss(xa: np.ndarray, wa: np.ndarray, ba: np.ndarray) -> float:
        return float(np.sum(_gelu(xa @ wa + ba, approximate) * c))

    vs = [Variable(riftco.tensor(a, device="cpu"), requires_grad=True) for a in (x, w, b)]
    y = linear_gelu(*vs, approximate=approximate)
    (y * Variable(riftco.tensor(c, device="cpu"))).sum().backward()
    eps = 1e-6
    for i, a in enumerate((x, w, b)):
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            args = [x, w, b]
            plus, minus = a.copy(), a.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args[i] = plus
            hi = loss(*args)
            args[i] = minus
            num[idx] = (hi - loss(*args)) / (2 * eps)
        grad = vs[i].grad
        assert grad is not None
        np.testing.assert_allclose(grad.numpy(), num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", cpu_native_opencl())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_bits_as_linear_then_gelu(backend: str, dtype: Any) -> None:
    """Fusing reorders nothing: y, h and every gradient are the unfused layer's bits, on a
    shape large enough for the native kernels' threads and the GPT fc shape."""
    for m, k, n in [(1024, 128, 512), (64, 32, 128), (257, 33, 70)]:
        x, w, b, dy = _data(m, k, n, seed=2)
        up = lambda a: riftco.tensor(a.astype(dtype), device=backend)  # noqa: E731
        xt, wt, bt, dyt = up(2 * x), up(w), up(b), up(dy)
        y, h = ops.linear_gelu(xt, wt, bt, "tanh")
        h0 = ops.linear(xt, wt, bt)
        np.testing.assert_array_equal(h.numpy(), h0.numpy())
        np.testing.assert_array_equal(y.numpy(), ops.gelu(h0, "tanh").numpy())
        got = ops.linear_gelu_backward(dyt, xt, wt, h, "tanh")
        want = ops.linear_backward(ops.gelu_backward(dyt, h0, "tanh"), xt, wt)
        for g, e in zip(got, want, strict=True):
            np.testing.assert_array_equal(g.numpy(), e.numpy())


@pytest.mark.parametrize("backend", ["cpu", "native"])
def test_mlp_gradients_equal_the_unfused_layer(backend: str) -> None:
    """The GPT MLP (fc + GELU fused) gives the unfused graph's output and gradients."""
    from riftco.nn.layers import MLP

    mlp = MLP(16, proj_std=0.02, rng=np.random.default_rng(0), device=backend)
    x = riftco.tensor(np.random.default_rng(1).standard_normal((37, 16)).astype(np.float32),
                      device=backend)  # fmt: skip
    out = mlp(Variable(x))
    out.sum().backward()
    fused = [p.grad.numpy() for p in (mlp.fc.weight, mlp.fc.bias)]  # type: ignore[union-attr]
    fc = linear(Variable(x), mlp.fc.weight, mlp.fc.bias).gelu(approximate="tanh")
    ref = mlp.proj(fc)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    ref.sum().backward()
    for g, p in zip(fused, (mlp.fc.weight, mlp.fc.bias), strict=True):
        np.testing.assert_array_equal(g, p.grad.numpy())  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("call", "err", "words"),
    [
        (lambda t: ops.linear_gelu(t(2, 3), t(4, 5), t(5)), ShapeError, ["(2, 3)", "(4, 5)"]),
        (lambda t: ops.linear_gelu(t(2, 3), t(3, 5), t(4)), ShapeError, ["bias", "(4,)"]),
        (lambda t: ops.linear_gelu(t(2, 2, 3), t(3, 5), t(5)), ShapeError, ["x"]),
        (lambda t: ops.linear_gelu(t(2, 3), t(3, 5), t(5), "exact"), ShapeError, ["'exact'"]),
        (lambda t: ops.linear_gelu_backward(t(2, 4), t(2, 3), t(3, 5), t(2, 5)), ShapeError,
         ["dy", "(2, 4)"]),
        (lambda t: ops.linear_gelu_backward(t(2, 5), t(2, 3), t(3, 5), t(5, 2)), ShapeError,
         ["h", "(5, 2)"]),
    ],
)  # fmt: skip
def test_bad_shapes_raise_naming_the_op_before_any_kernel(
    call: Any, err: type, words: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    be = riftco.device("native").backend
    t = lambda *s: riftco.tensor(np.zeros(s, np.float32), device="native")  # noqa: E731
    args = [t(2, 3), t(3, 5), t(5)]  # uploaded before the tripwires go in

    def tripwire(*a: Any, **k: Any) -> None:
        raise AssertionError("a backend method ran on a malformed call")

    for name in ("linear_gelu", "linear_gelu_backward", "matmul", "linear", "gelu", "allocate"):
        monkeypatch.setattr(be, name, tripwire)
    with pytest.raises(err) as info:
        call(lambda *s: args[[(2, 3), (3, 5), (5,)].index(s)] if s in [(2, 3), (3, 5), (5,)]
             else t(*s))  # fmt: skip
    msg = str(info.value)
    assert msg.startswith("[linear_gelu"), msg
    for w in words:
        assert w in msg, (w, msg)


def test_bad_dtypes_and_devices_raise() -> None:
    f32 = riftco.tensor(np.zeros((2, 3), np.float32), device="cpu")
    f64 = riftco.tensor(np.zeros((3, 5)), device="cpu")
    with pytest.raises(DTypeError, match=r"^\[linear_gelu\]"):
        ops.linear_gelu(f32, f64, riftco.tensor(np.zeros(5, np.float32), device="cpu"))
    ids = riftco.tensor(np.zeros((2, 3), np.int32), device="cpu")
    with pytest.raises(DTypeError, match=r"^\[linear_gelu\]"):
        ops.linear_gelu(ids, f64, f64[0])
    other = riftco.tensor(np.zeros((3, 5), np.float32), device="native")
    with pytest.raises(DeviceMismatchError, match=r"^\[linear_gelu\]"):
        ops.linear_gelu(f32, other, riftco.tensor(np.zeros(5, np.float32), device="cpu"))


@pytest.mark.parametrize("backend", cpu_native_opencl())
def test_large_preactivations_do_not_overflow(backend: str) -> None:
    """h up to 1e4 either side: gelu(h) is h or 0, gelu'(h) 1 or 0, nothing NaN."""
    up = lambda a: riftco.tensor(np.asarray(a, np.float32), device=backend)  # noqa: E731
    x, w, b = np.ones((2, 1)), np.array([[1e4, -1e4, 30.0, -30.0]]), np.zeros(4)
    y, h = ops.linear_gelu(up(x), up(w), up(b))
    np.testing.assert_allclose(y.numpy()[0], [1e4, 0.0, 30.0, 0.0], atol=1e-6)
    dx, dw, db = ops.linear_gelu_backward(up(np.ones((2, 4))), up(x), up(w), h)
    np.testing.assert_allclose(db.numpy(), [2.0, 0.0, 2.0, 0.0], atol=1e-6)
    assert np.isfinite(dx.numpy()).all() and np.isfinite(dw.numpy()).all()
