"""Compiled objectives on hostile input: out-of-range targets, -inf logits, the p-norm origin.

References are independent float64 numpy (explicit gathers, closed forms, central
differences), never the compiled program itself.
"""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import assert_close, device_or_skip
from riftco import autograd as ag
from riftco.autograd import Variable
from riftco.errors import DomainError
from riftco.symbolic import (
    Builder,
    Program,
    differentiate,
    label_smoothing_objective,
    one_hot,
    softmax_cross_entropy_objective,
)

V = 7


def _ids(values) -> riftco.Tensor:
    return riftco.tensor(np.asarray(values, dtype=np.int32))


def _ce_gather(z: np.ndarray, ids: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean over rows with id != -1 of lse(z) - z[id], by an explicit gather; its gradient."""
    z = np.asarray(z, dtype=np.float64)
    n, v = z.shape
    keep = ids != -1
    m = z.max(1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = (m + np.log(np.exp(z - m).sum(1, keepdims=True)))[:, 0]
    picked = z[np.arange(n), np.where(keep, ids, 0)]
    count = max(int(keep.sum()), 1)
    loss = float(np.where(keep, lse - picked, 0.0).sum() / count)
    grad = np.exp(z - lse[:, None])
    grad[np.arange(n)[keep], ids[keep]] -= 1.0
    return loss, grad * keep[:, None] / count


# -- targets: only -1 is ignored ------------------------------------------------------------------
@pytest.mark.parametrize("bad", [V, 99, -2, 2**31 - 1, -(2**31)])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_out_of_range_targets_are_a_domain_error_like_autograd(bad, eps):
    z = riftco.tensor(np.random.default_rng(1).standard_normal((4, V)))
    ids = _ids([0, bad, -1, 3])
    lo, hi = min(bad, -1), max(bad, 3)
    want = rf"\[cross_entropy\] targets must lie in \[-1, {V}\); got values in \[{lo}, {hi}\]"
    with pytest.raises(DomainError, match=want):
        label_smoothing_objective(V, eps).loss_and_grad(z, ids)
    with pytest.raises(DomainError, match=r"\[cross_entropy\] targets"):  # autograd agrees
        ag.cross_entropy(Variable(z, requires_grad=True), ids)
    with pytest.raises(DomainError, match=r"\[one_hot\] targets must lie in \[-1, 7\)"):
        one_hot(ids, V, z)


def test_minus_one_is_the_only_ignored_target():
    rng = np.random.default_rng(2)
    z = rng.standard_normal((5, V))
    ids = np.array([-1, 0, V - 1, -1, 4])
    loss, grad = softmax_cross_entropy_objective(V).loss_and_grad(riftco.tensor(z), _ids(ids))
    want_loss, want_grad = _ce_gather(z, ids)
    assert_close(loss, want_loss, rtol=1e-13)
    assert_close(grad, want_grad, rtol=1e-12, atol=1e-15)


def test_deferred_target_check_fires_before_gradients_change():
    """Device semantics on the cpu backend: the check is queued, backward() raises it."""
    rng = np.random.default_rng(3)
    x = Variable(riftco.tensor(rng.standard_normal((3, 4))))
    w = Variable(riftco.tensor(rng.standard_normal((4, V))), requires_grad=True)
    head = label_smoothing_objective(V, 0.1)
    logits = x @ w
    _, seed = head.loss_and_grad(logits.value, _ids([0, 1, 2]))
    logits.backward(seed=seed)
    before = w.grad
    prev = ag.set_domain_checks("deferred")
    try:
        logits = x @ w
        _, seed = head.loss_and_grad(logits.value, _ids([0, V, 2]))  # no error yet
        with pytest.raises(DomainError, match=r"\[cross_entropy\] targets .*\[0, 7\]"):
            logits.backward(seed=seed)
        assert w.grad is before
        _, seed = head.loss_and_grad(logits.value, _ids([0, -1, 2]))
        logits.backward(seed=seed)  # the failed flag was consumed; a good batch passes
        assert w.grad is not before
    finally:
        ag.set_domain_checks(prev)


def test_checks_off_still_checks_targets():
    prev = ag.set_domain_checks("off")
    try:
        with pytest.raises(DomainError, match=r"\[cross_entropy\]"):
            softmax_cross_entropy_objective(V).loss_and_grad(
                riftco.zeros((2, V), dtype=riftco.float64), _ids([0, -3])
            )
    finally:
        ag.set_domain_checks(prev)


@pytest.mark.parametrize("name", ["opencl", "metal"])
def test_device_targets_are_checked_without_a_download(monkeypatch, name):
    """On a device buffer loss_and_grad downloads nothing; the flag is read at the flush."""
    dev = device_or_skip(name)
    backend = dev.backend
    downloads = []
    real = backend.to_numpy
    monkeypatch.setattr(backend, "to_numpy", lambda x: downloads.append(x.shape) or real(x))
    z = np.random.default_rng(4).standard_normal((4, V)).astype(np.float32)
    zt = riftco.tensor(z, device=dev)
    head = label_smoothing_objective(V, 0.0)
    ag.check_domain()  # nothing pending from earlier tests
    for bad in (V, -2, 2**31 - 1):
        head.loss_and_grad(zt, riftco.tensor(np.array([0, bad, -1, 1], np.int32), device=dev))
        assert downloads == []
        with pytest.raises(DomainError, match=r"\[cross_entropy\] targets must lie in \[-1, 7\)"):
            ag.check_domain()
        downloads.clear()
    ids = np.array([0, 6, -1, 1])
    loss, grad = head.loss_and_grad(zt, riftco.tensor(ids.astype(np.int32), device=dev))
    ag.check_domain()  # a good batch leaves nothing to raise
    want_loss, want_grad = _ce_gather(z, ids)
    assert_close(loss, want_loss, rtol=1e-5)
    assert_close(grad, want_grad, rtol=1e-4, atol=1e-6)


# -- -inf logits ---------------------------------------------------------------------------------
def test_minus_inf_logit_off_target_gives_the_finite_loss():
    z = np.random.default_rng(5).standard_normal((3, V))
    z[0, 2] = -np.inf
    z[1, [0, 5]] = -np.inf
    ids = np.array([0, 3, 2])
    loss, grad = softmax_cross_entropy_objective(V).loss_and_grad(riftco.tensor(z), _ids(ids))
    want_loss, want_grad = _ce_gather(z, ids)
    assert np.isfinite(want_loss)
    assert_close(loss, want_loss, rtol=1e-13)
    assert_close(grad, want_grad, rtol=1e-12, atol=1e-15)
    fused = ag.cross_entropy(Variable(riftco.tensor(z)), _ids(ids))  # the fused kernels agree
    assert_close(loss, fused.value, rtol=1e-13)


def test_minus_inf_logit_at_the_target_or_under_smoothing_is_plus_inf():
    z = np.zeros((2, V))
    z[0, 1] = -np.inf
    ids = _ids([1, 0])
    loss, _ = softmax_cross_entropy_objective(V, "sum").loss_and_grad(riftco.tensor(z), ids)
    assert loss.item() == np.inf  # -log(0): the true cross-entropy
    z[0, 1], z[0, 4] = 0.0, -np.inf  # off the target, but q = eps / V > 0 there
    loss, _ = label_smoothing_objective(V, 0.1).loss_and_grad(riftco.tensor(z), ids)
    assert loss.item() == np.inf


def test_ignored_row_contributes_exactly_zero_even_if_not_finite():
    z = np.random.default_rng(6).standard_normal((3, V))
    z[1, 3] = np.nan  # its loss and gradient row are NaN; 0 * NaN would be NaN too
    ids = np.array([2, -1, 5])
    loss, grad = softmax_cross_entropy_objective(V).loss_and_grad(riftco.tensor(z), _ids(ids))
    keep = [0, 2]
    want_loss, want_grad = _ce_gather(z[keep], ids[keep])
    assert_close(loss, want_loss, rtol=1e-13)
    assert_close(grad.numpy()[keep], want_grad, rtol=1e-12, atol=1e-15)
    assert_close(grad.numpy()[1], np.zeros(V), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["opencl", "metal"])
def test_minus_inf_logit_on_a_device_backend(name):
    dev = device_or_skip(name)
    z = np.random.default_rng(7).standard_normal((2, V)).astype(np.float32)
    z[0, 3] = -np.inf
    ids = np.array([1, 3])
    head = softmax_cross_entropy_objective(V)
    loss, grad = head.loss_and_grad(
        riftco.tensor(z, device=dev), riftco.tensor(ids.astype(np.int32), device=dev)
    )
    ag.check_domain()
    want_loss, want_grad = _ce_gather(z, ids)
    assert_close(loss, want_loss, rtol=1e-5)
    assert_close(grad, want_grad, rtol=1e-4, atol=1e-6)


# -- p-norm derivative -----------------------------------------------------------------------------
def _norm_grad_program(p: float, n: int) -> tuple[Program, object]:
    g = Builder()
    x = g.variable(n, "x")
    return Program(differentiate(g.lp_norm(x, p), x)), x


def _closed_form(x: np.ndarray, p: float) -> np.ndarray:
    """d||x||_p/dx = sign(x) |x|^(p-1) / ||x||^(p-1); 0 at the origin (the docstring's choice)."""
    norm = (np.abs(x) ** p).sum(-1, keepdims=True) ** (1 / p)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.sign(x) * np.abs(x) ** (p - 1) / norm ** (p - 1)
    return np.where(norm == 0, 0.0, out)


def _central_difference(x: np.ndarray, p: float, h: float = 1e-6) -> np.ndarray:
    def norm(v: np.ndarray) -> float:
        return float((np.abs(v) ** p).sum() ** (1 / p))

    out = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        out[i] = (norm(x + e) - norm(x - e)) / (2 * h)
    return out


@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 2.5, 3.0, 4.5, 8.0])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lp_norm_derivative_is_zero_at_the_origin(p, dtype):
    program, x = _norm_grad_program(p, 4)
    for shape in ((4,), (3, 4)):  # unbatched and batched
        (grad,) = program.evaluate({x: riftco.tensor(np.zeros(shape, dtype))})
        assert_close(grad, np.zeros(shape), rtol=0, atol=0, check_dtype=dtype)


@pytest.mark.parametrize("p", [1.5, 2.0, 3.0, 4.5])
def test_lp_norm_derivative_matches_closed_form_and_finite_differences(p):
    rng = np.random.default_rng(8)
    xs = rng.standard_normal((5, 4))
    xs[1] = 0.0  # the origin, in the same batch as ordinary rows
    xs[2, :2] = 0.0  # zero components away from the origin
    xs[3] *= 1e-30  # tiny but normal: ||x||^(1-p) overflows here for p > 2
    program, x = _norm_grad_program(p, 4)
    (grad,) = program.evaluate({x: riftco.tensor(xs)})
    assert np.isfinite(grad.numpy()).all()
    assert_close(grad, _closed_form(xs, p), rtol=1e-12, atol=1e-300)
    for row in (0, 2, 4):  # smooth points (p > 1: also at a zero component)
        assert_close(grad.numpy()[row], _central_difference(xs[row], p), rtol=1e-6, atol=1e-8)
    # scale invariance: the gradient of a norm is homogeneous of degree 0
    assert_close(grad.numpy()[3], _closed_form(xs[3:4] * 1e30, p)[0], rtol=1e-12)


def test_lp_norm_derivative_of_a_constant_vector():
    """Folded on floats by the simplifier: the origin gives 0, others the closed form."""
    for value, p in ((0.0, 3.0), (2.0, 3.0), (-0.5, 4.5)):
        g = Builder()
        x = g.variable(3, "x")
        c = g.constant(value, 3)
        loss = g.add(g.lp_norm(c, p), g.sum(x))  # depends on x so there is a program
        program = Program(g.lp_norm_der(c, loss.children[0]))
        (der,) = program.evaluate({}, like=riftco.zeros((3,), dtype=riftco.float64))
        assert_close(der, _closed_form(np.full(3, value), p), rtol=1e-13, atol=0)
