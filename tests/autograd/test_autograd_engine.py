"""The gradient engine: accumulation, isolation, versions, seeds, depth, ownership, domains."""

from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest
import riftco
from riftco import autograd as ag
from riftco import ops
from riftco.autograd import Variable
from riftco.autograd.graph import make
from riftco.errors import DomainError, GradientError, ShapeError, StaleGraphError
from riftco.optim import SGD, AdamW


def var(values, requires_grad=True, name=None, dtype="float64"):
    return Variable(riftco.tensor(values, dtype=dtype), requires_grad=requires_grad, name=name)


def other_cpu_backend():
    """A second CPU backend instance: tensors on it count as another device."""
    return type(riftco.device("cpu").backend)(0)


def test_seed_tiny_graph():
    x, y = var(2.0), var(3.0)
    z = x * y + x
    z.backward()
    assert x.grad.item() == 4.0
    assert y.grad.item() == 2.0


def test_multiple_paths_accumulate():
    x = var([0.3, -1.2])
    a = x * x  # x reaches the output through a, through exp(x) and directly
    f = (a + x.exp() * x + a * x).sum()
    f.backward()
    xv = np.array([0.3, -1.2])
    expected = 2 * xv + np.exp(xv) * (1 + xv) + 3 * xv**2
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_repeated_backward_replaces_not_doubles():
    x, y = var([1.0, 2.0]), var([3.0, 4.0])
    loss = (x * y).sum()
    loss.backward()
    first = x.grad.numpy()
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), first)
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])


def test_leaf_without_contribution_gets_zeros_and_retain_grad():
    x = var([1.0, 2.0])
    h = (x * 3.0).retain_grad()
    (h * h).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), [6.0, 12.0])
    np.testing.assert_array_equal(x.grad.numpy(), [18.0, 36.0])


def _raising(x):
    def vjp(g):
        raise RuntimeError("rule failed midway")

    return ag.custom_gradient(ops.mul_scalar(x.value, 2.0), [x], vjp)


def test_failure_leaves_gradients_unchanged():
    w, b = var([1.0, 2.0], name="w"), var([0.5, 0.5], name="b")
    (w * b).sum().backward()
    before_w, before_b = w.grad, b.grad
    # b's rule runs first (it is later in the graph); then the custom rule raises
    loss = (_raising(w) * b).sum() + (b * b).sum()
    with pytest.raises(RuntimeError, match="midway"):
        loss.backward()
    assert w.grad is before_w and b.grad is before_b
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 2.0])


def test_fresh_leaves_stay_none_after_failure():
    w = var([1.0, 2.0])
    b = var([3.0, 4.0])
    with pytest.raises(RuntimeError):
        (_raising(w) + b).sum().backward()
    assert w.grad is None and b.grad is None


def test_stale_after_adamw_step_names_parameter():
    w = var([[1.0, 2.0, 3.0]], name="w")
    x = riftco.tensor([[1.0], [2.0]], dtype="float64")
    loss = (Variable(x) @ w).sum()
    loss.backward()
    grad_before = w.grad
    AdamW([w], lr=0.1).step()
    with pytest.raises(StaleGraphError, match=r"'w' \(shape \(1, 3\)"):
        loss.backward()
    assert w.grad is grad_before  # validation happens before any gradient changes


@pytest.mark.parametrize(
    "change",
    [
        lambda w: SGD([w], lr=0.1).step(),
        lambda w: w.assign(riftco.tensor([5.0, 6.0], dtype="float64")),
        lambda w: ops.assign_(w.value, riftco.tensor([5.0, 6.0], dtype="float64")),
        lambda w: setattr(w, "value", riftco.tensor([5.0, 6.0], dtype="float64")),
    ],
    ids=["sgd", "assign", "assign_", "value="],
)
def test_every_replacement_makes_the_graph_stale(change):
    w = var([1.0, 2.0], name="w")
    loss = (w * w).sum()
    loss.backward()
    v0 = w.version
    change(w)
    assert w.version > v0
    with pytest.raises(StaleGraphError):
        loss.backward()
    (w * w).sum().backward()  # a fresh forward is fine
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.value.numpy())


def test_version_never_repeats_across_assign():
    w = var([1.0])
    ops.assign_(w.value, riftco.tensor([2.0], dtype="float64"))  # storage version 1
    seen = {w.version}
    w.assign(riftco.tensor([3.0], dtype="float64"))  # a new storage at version 0
    assert w.version not in seen


def test_stale_intermediate_value_is_detected():
    x = var([1.0, 2.0])
    h = x.exp()
    loss = (h * h).sum()
    ops.assign_(h.value, riftco.tensor([0.0, 0.0], dtype="float64"))
    with pytest.raises(StaleGraphError, match="exp"):
        loss.backward()


def test_seed_validation():
    x = var([1.0, 2.0, 3.0])
    y = x * 2.0
    with pytest.raises(GradientError, match="explicit"):
        y.backward()
    with pytest.raises(GradientError, match="shape"):
        y.backward(riftco.tensor([1.0, 1.0], dtype="float64"))
    with pytest.raises(GradientError, match="float32"):
        y.backward(riftco.tensor([1.0, 1.0, 1.0], dtype="float32"))
    foreign = other_cpu_backend().from_numpy(np.ones(3))
    with pytest.raises(GradientError, match="lives on"):
        y.backward(foreign)
    assert x.grad is None
    y.backward(riftco.tensor([1.0, 0.5, -1.0], dtype="float64"))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 1.0, -2.0])


def test_backward_needs_a_graph():
    with pytest.raises(GradientError, match="does not require grad"):
        var([1.0], requires_grad=False).sum().backward()


def test_ten_thousand_op_chain():
    x = var(1.0)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    y.backward()
    assert math.isclose(x.grad.item(), 1.0001**10_000, rel_tol=1e-9)
    assert ag.graph_stats(y)["nodes"] == 10_001
    del y  # freeing a deep chain must not overflow the stack either


def test_cross_backend_contribution_is_an_error():
    x = var([1.0, 2.0])
    foreign = other_cpu_backend().from_numpy(np.ones(2))
    bad = make(ops.mul_scalar(x.value, 2.0), "bad_rule", (x,), lambda g: (foreign,))
    with pytest.raises(GradientError, match="cross-backend"):
        bad.sum().backward()
    assert x.grad is None


def test_elementwise_needs_equal_shapes():
    with pytest.raises(ShapeError, match="broadcast_to"):
        var([1.0, 2.0]) + var([[1.0, 2.0]])


def test_matmul_batch_dims_must_match():
    a = Variable(riftco.randn((2, 3, 4), seed=0, dtype="float64"), True)
    b = Variable(riftco.randn((1, 4, 5), seed=1, dtype="float64"), True)
    with pytest.raises(ShapeError, match="batch"):
        a @ b


def test_detach_and_no_grad_stop_gradients():
    x = var([1.0, 2.0])
    y = (x.detach() * x).sum()
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0])
    with ag.no_grad():
        z = x * x
    assert not z.requires_grad and z.is_leaf


def test_graph_is_freed_without_gc():
    gc.collect()
    gc.disable()
    try:
        x = var(np.ones((3, 4)))
        w = var(np.ones((4, 2)))
        h = (x @ w).tanh()
        out = ag.attention(
            *(
                Variable(riftco.randn((1, 1, 3, 2), seed=s, dtype="float64"), True)
                for s in (1, 2, 3)
            ),
            mode="flash",
        )
        loss = (h * h).sum() + ag.cross_entropy(h, riftco.tensor([0, 1, -1])) + out.sum()
        loss.backward()
        refs = [weakref.ref(h), weakref.ref(out), weakref.ref(loss), weakref.ref(h.value)]
        del h, out, loss
        assert all(r() is None for r in refs), "a reference cycle keeps the graph alive"
        assert x.grad is not None  # leaves keep their committed gradients
    finally:
        gc.enable()


def test_flash_and_materialized_attention_give_the_same_gradients():
    shape = (2, 2, 5, 3)
    grads = {}
    for mode in ("materialized", "flash"):
        q, k, v = (Variable(riftco.randn(shape, seed=s, dtype="float64"), True) for s in (4, 5, 6))
        out = ag.attention(q, k, v, causal=True, mode=mode)
        (out * out).sum().backward()
        grads[mode] = [t.grad.numpy() for t in (q, k, v)] + [out.numpy()]
    for a, b in zip(grads["materialized"], grads["flash"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_graph_stats_count_saved_tensors():
    x = var(np.ones((1, 1, 4, 2)))
    mat = ag.attention(x, x, x, mode="materialized")
    flash = ag.attention(x, x, x, mode="flash")
    # materialised keeps the [1, 1, 4, 4] probabilities, flash only the [1, 1, 4] lse
    assert ag.graph_stats(mat)["retained_elements"] == 8 + 8 + 16
    assert ag.graph_stats(flash)["retained_elements"] == 8 + 8 + 4


# -- log / sqrt domain ---------------------------------------------------------------------------
def test_log_of_non_positive_raises_eagerly_on_host_buffers():
    with pytest.raises(DomainError, match=r"\[log\].*-1"):
        var([1.0, -1.0, 2.0]).log()
    with pytest.raises(DomainError, match=r"\[sqrt\]"):
        var([0.0, 1.0]).sqrt()


def test_deferred_domain_check_fires_before_gradients_change():
    prev = ag.set_domain_checks("deferred")
    try:
        x = var([1.0, 0.0])
        loss = x.log().sum()  # no error yet: the flag stays on the device
        with pytest.raises(DomainError, match=r"\[log\].*shape \(2,\)"):
            loss.backward()
        assert x.grad is None
        ok = var([1.0, 2.0]).sqrt().sum()
        ok.backward()  # the failed flag was consumed; a good graph passes
    finally:
        ag.set_domain_checks(prev)


def test_domain_checks_off_gives_ieee_results():
    prev = ag.set_domain_checks("off")
    try:
        assert math.isnan(var([-1.0], requires_grad=False).log().item())
    finally:
        ag.set_domain_checks(prev)


def test_moving_a_parameter_bumps_its_version(registry):
    from helpers import add_backend
    from riftco.backends.cpu.backend import CPUBackend

    class TwinCPU(CPUBackend):
        name = "twincpu"

    twin = add_backend(registry, TwinCPU)
    w = Variable(riftco.tensor([1.0, 2.0], dtype="float64"), requires_grad=True, name="w")
    loss = (w * w).sum()
    loss.backward()
    w.to("twincpu")
    assert w.backend is twin and w.grad is None
    with pytest.raises(StaleGraphError, match="'w'"):
        loss.backward()
    (w * w).sum().backward()  # a fresh graph runs on the new backend
    assert w.grad.backend is twin
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])
    stay = Variable(riftco.tensor([1.0], dtype="float64"), requires_grad=True)
    with pytest.raises(riftco.DeviceMismatchError):
        w[:1] + stay
