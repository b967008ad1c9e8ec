"""Stale graphs the version checks used to miss: recompute captures and a written root.

Each case first shows the unmodified graph gives the closed-form gradient (so the test
can tell "detected" from "broken"), then mutates, then checks that backward raises
StaleGraphError and that every previously committed ``.grad`` is the very same object.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import riftco
from riftco import autograd as ag
from riftco import ops
from riftco.autograd import Variable
from riftco.errors import StaleGraphError


def f64(values):
    return riftco.tensor(np.asarray(values, dtype=np.float64), dtype="float64")


def var(values, requires_grad=True, name=None):
    return Variable(f64(values), requires_grad=requires_grad, name=name)


X0, W0, C0 = [0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [3.0, -2.0, 0.5]


def _region_with(capture):
    """loss = sum(tanh(x * w) * c) through a recompute region that captures ``c``."""
    x, w = var(X0, name="x"), var(W0, name="w")

    def block(h):
        return ((h * w).tanh() * capture()).sum()

    return x, w, ag.recompute(block, [x], [w])


def _closed_form(c):
    x, w, c = np.array(X0), np.array(W0), np.asarray(c, dtype=np.float64)
    d = c * (1 - np.tanh(x * w) ** 2)
    return d * w, d * x  # d/dx, d/dw


def _raw_inplace(c):
    ops.assign_(c, f64([9.0, 9.0, 9.0]))


MUTATIONS = {
    # a raw Tensor operand: autograd wraps it in a fresh constant leaf on every call
    "raw tensor, assign_": (lambda: f64(C0), lambda c: c, _raw_inplace),
    "raw tensor, fill_": (lambda: f64(C0), lambda c: c, lambda c: ops.fill_(c, 9.0)),
    # a frozen Variable the region reads: replaced, or its buffer written
    "constant Variable, assign()": (
        lambda: var(C0, requires_grad=False, name="c"),
        lambda c: c,
        lambda c: c.assign(f64([9.0, 9.0, 9.0])),
    ),
    "constant Variable, assign_ on .value": (
        lambda: var(C0, requires_grad=False, name="c"),
        lambda c: c,
        lambda c: _raw_inplace(c.value),
    ),
    # read only through a no-grad op inside the region (its output is region-internal)
    "constant Variable behind a no-grad op": (
        lambda: var(C0, requires_grad=False, name="c"),
        lambda c: c * 1.0,
        lambda c: c.assign(f64([9.0, 9.0, 9.0])),
    ),
}


@pytest.mark.parametrize("case", list(MUTATIONS))
def test_recompute_captured_constant_mutated_is_stale(case):
    make_c, use, mutate = MUTATIONS[case]
    c = make_c()
    x, w, loss = _region_with(lambda: use(c))
    loss.backward()  # unmodified: the replay sees the same c, gradients are exact
    gx, gw = _closed_form(C0)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-14)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-14)
    before = (x.grad, w.grad)
    mutate(c)
    with pytest.raises(StaleGraphError, match=r"\[backward\] stale graph: .*recompute"):
        loss.backward()
    assert (x.grad, w.grad) == before  # the very same objects: nothing was written
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-14)


def test_recompute_stale_message_names_the_constant():
    c = var(C0, requires_grad=False, name="mask")
    x, w, loss = _region_with(lambda: c)
    c.assign(f64([0.0, 0.0, 0.0]))
    with pytest.raises(StaleGraphError, match=r"'mask' \(shape \(3,\), constant\).*version 0"):
        loss.backward()


def test_captured_constant_in_nested_recompute_is_stale():
    c = f64(C0)
    x, w = var(X0), var(W0)

    def inner(h):
        return (h * c).tanh()

    def outer(h):
        return (ag.recompute(inner, [h * w], []) * 2.0).sum()

    loss = ag.recompute(outer, [x], [w])
    loss.backward()
    d = 2.0 * np.array(C0) * (1 - np.tanh(np.array(X0) * W0 * C0) ** 2)
    np.testing.assert_allclose(x.grad.numpy(), d * W0, rtol=1e-14)
    before = (x.grad, w.grad)
    _raw_inplace(c)
    with pytest.raises(StaleGraphError, match="recompute"):
        loss.backward()
    assert (x.grad, w.grad) == before


def test_region_temporaries_are_not_kept_alive_by_the_read_log():
    """The log is weak: a tensor made inside the region dies with the region's graph."""
    x = var(X0)
    refs = []

    def block(h):
        t = f64([1.0, 2.0, 3.0])  # a region-internal constant
        refs.append(weakref.ref(t))
        return (h * t).sum()

    loss = ag.recompute(block, [x], [])
    gc.collect()
    assert refs[0]() is None
    loss.backward()  # the replay makes a fresh one; nothing stale
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0, 3.0])


def test_unrelated_writes_do_not_make_a_recompute_stale():
    c, other = f64(C0), f64(C0)
    x, w, loss = _region_with(lambda: c)
    _raw_inplace(other)  # not read by the region
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), _closed_form(C0)[0], rtol=1e-14)


# -- the root itself ----------------------------------------------------------------------------
ROOT_WRITES = {
    "assign_": lambda y: ops.assign_(y.value, f64([0.0, 0.0, 0.0])),
    "fill_": lambda y: ops.fill_(y.value, 0.0),
    "assign()": lambda y: y.assign(f64([0.0, 0.0, 0.0])),
}


@pytest.mark.parametrize("write", list(ROOT_WRITES))
def test_mutated_root_output_is_stale(write):
    """exp's rule reads its saved output, which is y's value: writing y corrupts dx."""
    x = var(X0, name="x")
    y = x.exp()
    seed = f64([1.0, 2.0, 3.0])
    y.backward(seed)
    np.testing.assert_allclose(x.grad.numpy(), np.exp(X0) * [1.0, 2.0, 3.0], rtol=1e-14)
    before = x.grad
    ROOT_WRITES[write](y)
    with pytest.raises(StaleGraphError, match=r"output .*output of exp.* written in place"):
        y.backward(seed)
    assert x.grad is before
    np.testing.assert_allclose(x.grad.numpy(), np.exp(X0) * [1.0, 2.0, 3.0], rtol=1e-14)


def test_mutated_scalar_root_and_recompute_root_are_stale():
    x = var(X0)
    loss = (x * x).sum()
    loss.backward()
    before = x.grad
    ops.fill_(loss.value, 5.0)
    with pytest.raises(StaleGraphError, match="output of sum"):
        loss.backward()
    assert x.grad is before
    w = var(W0)
    out = ag.recompute(lambda h: (h * w).tanh(), [x], [w])
    ops.fill_(out.value, 0.0)
    with pytest.raises(StaleGraphError, match="output of recompute"):
        out.backward(f64([1.0, 1.0, 1.0]))
    assert x.grad is before and w.grad is None


def test_leaf_root_and_untouched_root_still_work():
    w = var(X0)
    w.backward(f64([1.0, 2.0, 3.0]))  # a leaf root: d w / d w = seed
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 2.0, 3.0])
    y = w.exp()
    y.backward(f64([1.0, 1.0, 1.0]))
    y.backward(f64([1.0, 1.0, 1.0]))  # repeatable while nothing changes
    np.testing.assert_allclose(w.grad.numpy(), np.exp(X0), rtol=1e-14)
