"""SGD, AdamW and clip_grad_norm against hand-written float64 numpy."""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import cpu_native_opencl
from riftco.autograd import Variable
from riftco.errors import DTypeError, StaleGraphError
from riftco.optim import SGD, AdamW, clip_grad_norm


def param(shape, seed, name=None):
    return Variable(riftco.randn(shape, seed=seed, dtype="float64"), requires_grad=True, name=name)


def numpy_adamw(p, grads, lr, b1, b2, eps, wd):
    """AdamW from the paper's update rule, one gradient per step."""
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        step = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        p = p - lr * step - lr * wd * p
    return p


def quadratic_grads(w, target):
    """loss = sum((w - target)^2): backward fills w.grad; returns the numpy gradient too."""
    diff = w - Variable(riftco.tensor(target, dtype="float64"))
    (diff * diff).sum().backward()
    return w.grad.numpy()


def test_adamw_matches_numpy_over_steps():
    w = param((3, 4), 0)
    start = w.value.numpy()
    target = np.linspace(-1, 1, 12).reshape(3, 4)
    opt = AdamW([w], lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
    grads = []
    for _ in range(3):
        grads.append(quadratic_grads(w, target))
        opt.step()
    expected = numpy_adamw(start, grads, 0.05, 0.8, 0.95, 1e-6, 0.1)
    np.testing.assert_allclose(w.value.numpy(), expected, rtol=1e-12, atol=1e-14)


def test_adamw_one_step_closed_form():
    # first step with bias correction: update = g / (|g| + eps) -> lr * sign(g)
    w = Variable(riftco.tensor([1.0, -2.0], dtype="float64"), requires_grad=True)
    w.grad = riftco.tensor([0.5, -3.0], dtype="float64")
    AdamW([w], lr=0.1, eps=0.0).step()
    np.testing.assert_allclose(w.value.numpy(), [0.9, -1.9], rtol=1e-12)


def test_sgd_with_weight_decay():
    w = param((2, 3), 1)
    before = w.value.numpy()
    g = quadratic_grads(w, np.zeros((2, 3)))
    SGD([w], lr=0.1, weight_decay=0.01).step()
    np.testing.assert_allclose(w.value.numpy(), before - 0.1 * (g + 0.01 * before), rtol=1e-12)


def test_steps_bump_versions_and_skip_params_without_grad():
    a, b = param((2,), 2, name="a"), param((2,), 3, name="b")
    loss = (a * a).sum()
    loss.backward()
    b_before = b.value.numpy()
    opt = AdamW([a, b], lr=0.01)
    opt.step()
    np.testing.assert_array_equal(b.value.numpy(), b_before)
    with pytest.raises(StaleGraphError, match="'a'"):
        loss.backward()


def test_lr_is_settable():
    w = Variable(riftco.tensor([1.0], dtype="float64"), requires_grad=True)
    w.grad = riftco.tensor([1.0], dtype="float64")
    opt = SGD([w], lr=0.5)
    opt.lr = 0.25
    opt.step()
    assert w.value.item() == 0.75


def test_adamw_state_dict_round_trip_resumes_exactly():
    target = np.ones((2, 2))
    w1 = param((2, 2), 4)
    w2 = Variable(riftco.tensor(w1.value.numpy(), dtype="float64"), requires_grad=True)
    opt1 = AdamW([w1], lr=0.1, weight_decay=0.01)
    for _ in range(2):
        quadratic_grads(w1, target)
        opt1.step()
    state = opt1.state_dict()
    assert state["state"][0]["step"] == 2 and isinstance(state["state"][0]["m"], np.ndarray)
    w2.assign(riftco.tensor(w1.value.numpy(), dtype="float64"))
    opt2 = AdamW([w2], lr=0.5)
    opt2.load_state_dict(state)
    assert opt2.lr == 0.1
    for w, opt in ((w1, opt1), (w2, opt2)):
        quadratic_grads(w, target)
        opt.step()
    np.testing.assert_array_equal(w1.value.numpy(), w2.value.numpy())


def test_clip_grad_norm_matches_numpy():
    a, b = param((3, 2), 5), param((4,), 6)
    a.grad = riftco.randn((3, 2), seed=7, dtype="float64")
    b.grad = riftco.randn((4,), seed=8, dtype="float64")
    ga, gb = a.grad.numpy(), b.grad.numpy()
    norm = np.sqrt((ga**2).sum() + (gb**2).sum())
    got = clip_grad_norm([a, b], 0.5)
    assert got.shape == () and got.device == a.grad.device  # stays on the device
    assert abs(got.item() - norm) < 1e-12
    scale = 0.5 / (norm + 1e-6)
    np.testing.assert_allclose(a.grad.numpy(), ga * scale, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), gb * scale, rtol=1e-12)
    clipped = np.sqrt((a.grad.numpy() ** 2).sum() + (b.grad.numpy() ** 2).sum())
    assert clipped <= 0.5
    before_a, before_b = a.grad.numpy(), b.grad.numpy()
    assert abs(clip_grad_norm([a, b], 10.0).item() - clipped) < 1e-12
    # below the limit the scale is exactly 1: the values are untouched, bit for bit
    np.testing.assert_array_equal(a.grad.numpy(), before_a)
    np.testing.assert_array_equal(b.grad.numpy(), before_b)


def test_params_must_require_grad():
    with pytest.raises(DTypeError, match="requires_grad"):
        SGD([Variable(riftco.ones(2))], lr=0.1)


@pytest.mark.parametrize("device", cpu_native_opencl())
def test_clip_grad_norm_odd_gradients_float32(device):
    """The concatenated path: a 0-d gradient, an empty one, a transposed (non-contiguous)
    one and ordinary matrices, in float32, against the float64 norm of the same values."""
    dev = riftco.device(device)
    rng = np.random.default_rng(3)
    shapes = [(), (0, 3), (4, 5), (7,), (5, 4)]
    params, host = [], []
    for i, shape in enumerate(shapes):
        p = Variable(riftco.zeros(shape, dtype="float32", device=dev), requires_grad=True)
        g = rng.standard_normal(shape).astype(np.float32) * 3
        if i == 4:  # the gradient is a transposed view of a (4, 5) buffer
            p.grad = riftco.tensor(np.ascontiguousarray(g.T), device=dev).transpose(1, 0)
        else:
            p.grad = riftco.tensor(g, device=dev)
        params.append(p)
        host.append(g.astype(np.float64))
    norm = np.sqrt(sum((g**2).sum() for g in host))
    got = clip_grad_norm(params, 1.0)
    assert got.device == dev and got.dtype == np.float32
    assert abs(got.item() - norm) <= 1e-6 * norm
    scale = 1.0 / (norm + 1e-6)
    for p, g in zip(params, host, strict=True):
        assert p.grad.shape == g.shape and p.grad.dtype == np.float32
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-6, atol=1e-7)
    after = np.sqrt(sum((p.grad.numpy().astype(np.float64) ** 2).sum() for p in params))
    assert after <= 1.0 + 1e-6


def test_clip_grad_norm_only_empty_gradients():
    p = Variable(riftco.zeros((0,), dtype="float32"), requires_grad=True)
    p.grad = riftco.zeros((0,), dtype="float32")
    assert clip_grad_norm([p], 1.0).item() == 0.0
    assert p.grad.shape == (0,)


def test_clip_grad_norm_across_backends_sums_on_the_host():
    """Gradients on two backends: partial norms meet on the host, each scaled where it is."""
    a = Variable(riftco.zeros((3, 2), dtype="float64", device="cpu"), requires_grad=True)
    b = Variable(riftco.zeros((4,), dtype="float64", device="native"), requires_grad=True)
    a.grad = riftco.randn((3, 2), seed=1, dtype="float64", device="cpu")
    b.grad = riftco.randn((4,), seed=2, dtype="float64", device="native")
    ga, gb = a.grad.numpy(), b.grad.numpy()
    norm = np.sqrt((ga**2).sum() + (gb**2).sum())
    got = clip_grad_norm([a, b], 0.5)
    assert abs(got.item() - norm) < 1e-12
    assert a.grad.device == riftco.device("cpu") and b.grad.device == riftco.device("native")
    np.testing.assert_allclose(a.grad.numpy(), ga * 0.5 / (norm + 1e-6), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), gb * 0.5 / (norm + 1e-6), rtol=1e-12)
