"""CompiledObjective as a loss head, label smoothing, and evaluation on other backends."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import riftco
from helpers import assert_close, device_or_skip
from riftco.errors import ShapeError
from riftco.symbolic import (
    Builder,
    Program,
    differentiate,
    label_smoothing_objective,
    one_hot,
    smoothed_targets,
    softmax_cross_entropy_objective,
)


def _reference(z: np.ndarray, ids: np.ndarray, eps: float) -> tuple[float, np.ndarray]:
    """Mean smoothed cross-entropy over rows with id >= 0, and its gradient (float64)."""
    z = z.astype(np.float64).reshape(-1, z.shape[-1])
    ids = ids.reshape(-1)
    n, v = z.shape
    keep = ids >= 0
    t = np.full((n, v), eps / v)
    t[np.arange(n)[keep], ids[keep]] += 1.0 - eps
    m = z.max(1, keepdims=True)
    log_p = z - m - np.log(np.exp(z - m).sum(1, keepdims=True))
    rows = -(t * log_p).sum(1)
    count = max(keep.sum(), 1)
    grad = (np.exp(log_p) - t) * keep[:, None] / count
    return float((rows * keep).sum() / count), grad


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_label_smoothing_loss_and_grad(rng: np.random.Generator, eps: float) -> None:
    obj = label_smoothing_objective(65, eps)
    z = rng.standard_normal((2, 6, 65)) * 3
    ids = rng.integers(0, 65, (2, 6)).astype(np.int32)
    ids[1, 2] = -1  # ignored
    loss, grad = obj.loss_and_grad(riftco.tensor(z), riftco.tensor(ids))
    ref_loss, ref_grad = _reference(z, ids, eps)
    assert loss.shape == () and grad.shape == (2, 6, 65)
    assert_close(loss, ref_loss, rtol=1e-12)
    assert_close(grad, ref_grad.reshape(2, 6, 65), rtol=1e-10, atol=1e-14)
    assert_close(grad.numpy()[1, 2], np.zeros(65))


def test_dense_targets_and_sum_reduction(rng: np.random.Generator) -> None:
    obj = label_smoothing_objective(5, 0.0, reduction="sum")
    z = rng.standard_normal((4, 5))
    t = rng.random((4, 5))
    t /= t.sum(1, keepdims=True)
    loss, grad = obj.loss_and_grad(riftco.tensor(z), riftco.tensor(t))
    log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
    assert_close(loss, -(t * log_p).sum(), rtol=1e-12)
    assert_close(grad, np.exp(log_p) - t, rtol=1e-10, atol=1e-14)


def test_matches_autograd_cross_entropy_and_seeds_backward(rng: np.random.Generator) -> None:
    try:
        ag = importlib.import_module("riftco.autograd")
        variable, cross_entropy = ag.Variable, ag.cross_entropy
    except (ImportError, AttributeError):
        pytest.skip("riftco.autograd is not available yet")
    z = rng.standard_normal((8, 65))
    ids = riftco.tensor(rng.integers(0, 65, 8).astype(np.int32))
    logits = variable(riftco.tensor(z), requires_grad=True)
    ref = cross_entropy(logits, ids)
    ref.backward()
    loss, grad = softmax_cross_entropy_objective(65).loss_and_grad(logits.value, ids)
    assert_close(loss, ref.value, rtol=1e-12)
    assert_close(grad, logits.grad, rtol=1e-10, atol=1e-14)
    # the trainer's path: seed the network's backward with the compiled gradient
    w = variable(riftco.tensor(rng.standard_normal((65, 65))), requires_grad=True)
    x = variable(riftco.tensor(z))
    out = x @ w
    _, seed = softmax_cross_entropy_objective(65).loss_and_grad(out.value, ids)
    out.backward(seed=seed)
    seeded = w.grad.numpy()
    cross_entropy(x @ w, ids).backward()
    assert_close(seeded, w.grad, rtol=1e-10, atol=1e-14)


def test_targets_helpers_stay_on_device(rng: np.random.Generator) -> None:
    like = riftco.zeros((1,), dtype=riftco.float64)
    ids = riftco.tensor(np.array([0, 3, -1], dtype=np.int32))
    hot = one_hot(ids, 4, like)
    expected = np.array([[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=np.float64)
    assert_close(hot, expected, rtol=0, atol=0, check_dtype=np.float64)
    assert_close(smoothed_targets(ids, 4, 0.2, like), expected * 0.8 + 0.05, rtol=1e-15)


def test_loss_and_grad_shape_errors() -> None:
    obj = label_smoothing_objective(5, 0.1)
    z = riftco.zeros((3, 5), dtype=riftco.float64)
    with pytest.raises(ShapeError, match=r"\(3, 4\).*\(5,\)"):
        obj.loss_and_grad(riftco.zeros((3, 4), dtype=riftco.float64), riftco.zeros((3, 5)))
    with pytest.raises(ShapeError, match=r"\(2,\).*\(3,\)"):
        obj.loss_and_grad(z, riftco.tensor(np.zeros(2, dtype=np.int32)))


# -- other backends -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["opencl", "metal"])
def test_evaluation_on_gpu_backend(rng: np.random.Generator, name: str) -> None:
    dev = device_or_skip(name)
    g = Builder()
    y, y_hat = g.variable(100, "y"), g.variable(100, "y_hat")
    diff = g.sub(y, y_hat)
    loss = g.squared_l2_norm(diff)
    a, b = rng.standard_normal((2, 4, 100)).astype(np.float32)
    program = Program(loss, differentiate(loss, y))
    out = riftco.zeros((4, 100), device=dev)
    bind = {y: riftco.tensor(a, device=dev), y_hat: riftco.tensor(b, device=dev)}
    out_loss, out_grad = program.evaluate(bind, out=[None, out])
    assert out_grad is out and out.device == dev
    assert program.evaluations(diff) == 1
    assert_close(out_loss, ((a - b) ** 2).sum(1), rtol=1e-4)
    assert_close(out, 2 * (a - b), rtol=1e-4, atol=1e-5)
    obj = label_smoothing_objective(65, 0.1)
    z = (rng.standard_normal((6, 65)) * 1000).astype(np.float32)
    ids = rng.integers(0, 65, 6).astype(np.int32)
    l_dev, g_dev = obj.loss_and_grad(riftco.tensor(z, device=dev), riftco.tensor(ids, device=dev))
    ref_loss, ref_grad = _reference(z, ids, 0.1)
    assert np.isfinite(g_dev.numpy()).all()
    assert_close(l_dev, ref_loss, rtol=1e-4)
    assert_close(g_dev, ref_grad, rtol=1e-3, atol=1e-6)
