"""rms_norm against math written here: the forward's closed form in float64, the VJP
against centred finite differences (gradcheck), and nn.RMSNorm on every in-tree backend
that is available, all independent of the cpu reference conformance compares with."""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import cpu_native_opencl
from riftco import autograd as ag
from riftco import nn, ops
from riftco.autograd import Variable, gradcheck
from riftco.errors import ShapeError


def _closed_form(x: np.ndarray, g: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    rstd = 1.0 / np.sqrt((x**2).sum(axis=-1) / x.shape[-1] + eps)
    return x * rstd[..., None] * g, rstd


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (65, 9), (2, 3, 1025)])
@pytest.mark.parametrize("eps", [1e-6, 0.3])
def test_forward_is_the_closed_form(shape: tuple[int, ...], eps: float) -> None:
    rng = np.random.default_rng(len(shape) * 7 + shape[-1])
    x, g = rng.standard_normal(shape), 1 + 0.5 * rng.standard_normal(shape[-1:])
    y, rstd = ops.rms_norm(riftco.tensor(x), riftco.tensor(g), eps)
    want_y, want_r = _closed_form(x, g, eps)
    np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rstd.numpy(), want_r, rtol=1e-12)


def test_composite_matches_the_closed_form_in_both_directions() -> None:
    rng = np.random.default_rng(3)
    x, g, dy = rng.standard_normal((70, 13)), rng.standard_normal(13), rng.standard_normal((70, 13))
    comp = ops.composite("rms_norm")
    y, r = comp(riftco.tensor(x), riftco.tensor(g), 1e-5)
    np.testing.assert_allclose(y.numpy(), _closed_form(x, g, 1e-5)[0], rtol=1e-12, atol=1e-14)
    dx, dg = ops.composite("rms_norm_backward")(*map(riftco.tensor, (dy, x, g)), r)
    # by hand: d/dx of sum(dy * x * g / rms(x)), row by row
    rr = r.numpy()[:, None]
    want_dg = (dy * x * rr).sum(axis=0)
    want_dx = rr * dy * g - x * rr**3 * (dy * g * x).sum(axis=-1, keepdims=True) / 13
    np.testing.assert_allclose(dg.numpy(), want_dg, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(dx.numpy(), want_dx, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("eps", [1e-6, 0.5])
def test_vjp_against_finite_differences(eps: float) -> None:
    x = riftco.randn((3, 4, 6), seed=1, dtype="float64")
    g = riftco.randn((6,), seed=2, dtype="float64")
    report = gradcheck(lambda a, b: ag.rms_norm(a, b, eps), [x, g])
    assert report["checked"] > 0 and report["max_abs_error"] < 1e-6


def test_errors_name_the_op_before_any_kernel() -> None:
    x = riftco.zeros((2, 4))
    with pytest.raises(ShapeError, match=r"^\[rms_norm\] gamma must have shape \(4,\)"):
        ops.rms_norm(x, riftco.zeros((3,)))
    with pytest.raises(ShapeError, match=r"^\[rms_norm\] eps must be positive"):
        ops.rms_norm(x, riftco.zeros((4,)), 0.0)
    with pytest.raises(ShapeError, match=r"^\[rms_norm_backward\] rstd must have shape \(2,\)"):
        ops.rms_norm_backward(x, x, riftco.zeros((4,)), riftco.zeros((4,)))


@pytest.mark.parametrize("backend", cpu_native_opencl())
def test_nn_rmsnorm_trains_its_weight_on_each_backend(backend: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((130, 24)).astype(np.float32)
    layer = nn.RMSNorm(24, eps=1e-5, device=backend)
    y = layer(Variable(riftco.tensor(x, device=backend)))
    loss = (y * y).sum()
    loss.backward()
    xhat = x.astype(np.float64) / np.sqrt(
        (x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5
    )
    # loss = sum(xhat^2 w^2): d/dw = 2 w sum_rows(xhat^2) with w = 1
    np.testing.assert_allclose(layer.weight.grad.numpy(), 2 * (xhat**2).sum(0), rtol=2e-4)
    np.testing.assert_allclose(y.value.numpy(), xhat, rtol=1e-4, atol=1e-5)
