"""Autograd on float16 and bfloat16 values: what mixed-precision training reaches beyond
the op units (which conformance checks): a bfloat16 leaf may require grad (its numpy kind
is "V", not "f"), and ``cross_entropy`` on half logits averages its float32 loss rows over
the kept targets (ignored ones: -1), with its gradient in the logits' dtype."""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from riftco import dtypes
from riftco.autograd import Variable, cross_entropy

HALF = [
    "float16",
    pytest.param(
        "bfloat16",
        marks=pytest.mark.skipif(
            dtypes.bfloat16 is None, reason="bfloat16 comes from ml_dtypes (riftco[bfloat16])"
        ),
    ),
]


@pytest.mark.parametrize("name", HALF)
def test_a_half_leaf_can_require_grad(name):
    dt = np.dtype(getattr(dtypes, name))
    x = Variable(riftco.tensor(np.array([1.0, -2.0, 3.0]).astype(dt), device="cpu"), True)
    (x * x).sum().backward()
    assert x.grad.dtype == dt
    np.testing.assert_array_equal(x.grad.numpy().astype(np.float64), [2.0, -4.0, 6.0])


@pytest.mark.parametrize("name", HALF)
def test_cross_entropy_of_half_logits(name):
    dt = np.dtype(getattr(dtypes, name))
    rng = np.random.default_rng(0)
    logits64 = rng.standard_normal((6, 5)).astype(dt).astype(np.float64)  # the rounded inputs
    targets = np.array([0, 4, -1, 2, -1, 1], np.int64)
    x = Variable(riftco.tensor(logits64.astype(dt), device="cpu"), requires_grad=True)
    loss = cross_entropy(x, riftco.tensor(targets, device="cpu"))
    assert loss.dtype == np.float32  # the loss rows and their mean stay float32
    loss.backward()
    assert x.grad.dtype == dt
    # float64 reference: mean over the 4 kept rows of logsumexp - logit[target]
    kept = targets >= 0
    lse = np.log(np.exp(logits64).sum(axis=1))
    rows = lse - logits64[np.arange(6), np.where(kept, targets, 0)]
    want = rows[kept].mean()
    p = np.exp(logits64 - lse[:, None])
    p[np.arange(6), np.where(kept, targets, 0)] -= 1.0
    want_grad = np.where(kept[:, None], p, 0.0) / kept.sum()
    u = dtypes.UNIT_ROUNDOFF[dt]
    # loss: float32 arithmetic on exactly representable inputs
    assert abs(float(loss.item()) - want) <= 1e-6 * abs(want)
    # gradient: computed in float32, rounded once to the half dtype (|g| <= 1/4 here)
    err = np.abs(x.grad.numpy().astype(np.float64) - want_grad)
    assert err.max() <= u * np.abs(want_grad).max() + 1e-6, err.max()
