"""Every differentiable op against centred finite differences (float64, CPU).

Finite differences never call a backward rule, so a wrong VJP fails here. Shapes are
non-square and batched; each small input has every element perturbed.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import riftco
from riftco import autograd as ag
from riftco import ops
from riftco.autograd import Variable, gradcheck
from riftco.errors import GradientError


def r(shape, seed, positive=False):
    t = riftco.randn(shape, seed=seed, dtype="float64")
    if positive:  # bounded away from 0 so log/sqrt/div are smooth within eps
        return riftco.tensor(np.abs(t.numpy()) + 0.5, dtype="float64")
    return t


def check(fn, *inputs, **kw):
    report = gradcheck(fn, list(inputs), **kw)
    assert report["checked"] > 0
    assert report["max_abs_error"] < 1e-5
    return report


# -- arithmetic ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, fn, positive_b",
    [
        ("add", lambda a, b: a + b, False),
        ("sub", lambda a, b: a - b, False),
        ("mul", lambda a, b: a * b, False),
        ("div", lambda a, b: a / b, True),
        ("same-operand", lambda a, b: a * a + a / b, True),
    ],
)
def test_binary(name, fn, positive_b):
    check(fn, r((3, 4), 1), r((3, 4), 2, positive=positive_b))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x + 2.5,
        lambda x: 2.5 + x,
        lambda x: x - 1.5,
        lambda x: 1.5 - x,
        lambda x: x * -3.0,
        lambda x: 3.0 * x,
        lambda x: x / 4.0,
        lambda x: 2.0 / x,
        lambda x: -x,
        lambda x: x**3,
        lambda x: x**0.5,
        lambda x: x**-1.5,
    ],
    ids=[
        "add_s",
        "radd_s",
        "sub_s",
        "rsub_s",
        "mul_s",
        "rmul_s",
        "div_s",
        "rdiv_s",
        "neg",
        "pow3",
        "pow_half",
        "pow_neg",
    ],  # fmt: skip
)
def test_scalar_ops(fn):
    check(fn, r((2, 5), 3, positive=True))


def test_matmul_non_square_and_batched():
    check(lambda a, b: a @ b, r((3, 5), 4), r((5, 2), 5))
    check(lambda a, b: ag.matmul(a, b), r((2, 3, 4, 5), 6), r((2, 3, 5, 2), 7), max_elements=60)


def test_matmul_with_constant_operand_skips_its_gradient():
    w = r((4, 2), 8)
    check(lambda a: a @ w, r((3, 4), 9))  # raw Tensor operand: a constant leaf


# -- unary ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fn, positive",
    [
        (lambda x: x.exp(), False),
        (lambda x: x.log(), True),
        (lambda x: x.sqrt(), True),
        (lambda x: x.tanh(), False),
        (lambda x: x.gelu(), False),
        (lambda x: x.gelu(approximate="none"), False),
        (lambda x: x.softmax(), False),
    ],
    ids=["exp", "log", "sqrt", "tanh", "gelu_tanh", "gelu_erf", "softmax"],
)
def test_unary(fn, positive):
    check(fn, r((2, 3, 4), 10, positive=positive))


# -- reductions ----------------------------------------------------------------------------------
@pytest.mark.parametrize("axes", [None, 0, -1, (0, 2), (1,)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_mean_max(axes, keepdims):
    x = r((2, 3, 4), 11)
    check(lambda a: a.sum(axes, keepdims), x)
    check(lambda a: a.mean(axes, keepdims), x)
    check(lambda a: a.max(axes, keepdims), x)


def test_max_splits_ties_equally():
    x = Variable(riftco.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], dtype="float64"), True)
    x.max(-1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [1, 0, 0]])


# -- layout --------------------------------------------------------------------------------------
def test_reshape_transpose():
    x = r((2, 3, 4), 12)
    check(lambda a: a.reshape(4, 6), x)
    check(lambda a: a.reshape(-1), x)
    check(lambda a: a.transpose(), x)
    check(lambda a: a.transpose(0, 2), x)
    check(lambda a: a.T.reshape(2, 12), x)  # reshape of a non-contiguous view copies


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))), ids=str)
def test_permute_every_order_4d(order):
    check(lambda a: a.permute(*order), r((2, 3, 4, 5), 13))


def test_broadcast_and_sum_to_shape():
    check(lambda a: a.broadcast_to((2, 3, 4)), r((3, 1), 14))
    check(lambda a: a.broadcast_to((5, 4)), r((4,), 15))
    check(lambda a: a.sum_to_shape((3, 1)), r((2, 3, 4), 16))
    check(lambda a, b: a * b.broadcast_to((2, 3)), r((2, 3), 17), r((3,), 18))


@pytest.mark.parametrize(
    "index",
    [
        (slice(None), slice(1, 3)),
        (1,),
        (Ellipsis, 1),
        (slice(None, None, 2), slice(1, None, 3)),
        (None, slice(1, 2), Ellipsis, None),
        (slice(0, 0),),
        (-1, slice(None, 4, 2), 0),
    ],
    ids=str,
)
def test_getitem(index):
    check(lambda a: a[index], r((3, 5, 2), 19))


def test_concatenate_and_split_last_axis():
    check(
        lambda a, b, c: ag.concatenate_last_axis([a, b, c]),
        r((2, 3, 1), 20), r((2, 3, 4), 21), r((2, 3, 2), 22),
    )  # fmt: skip
    check(lambda a: ag.split_last_axis(a, [1, 3, 2])[1], r((2, 6), 23))
    # every piece used: the three padded contributions must add back up
    check(lambda a: ag.concatenate_last_axis(ag.split_last_axis(a, [2, 4])[::-1]), r((3, 6), 24))


# -- fused ---------------------------------------------------------------------------------------
def test_layer_norm():
    check(lambda x, g, b: ag.layer_norm(x, g, b), r((2, 3, 5), 25), r((5,), 26), r((5,), 27))


def test_embedding_repeated_ids():
    ids = riftco.tensor([[1, 3, 1], [0, 1, 4]], dtype="int32")
    check(lambda t: ag.embedding(t, ids), r((5, 3), 28))


def test_embedding_backward_counts_repeats():
    table = Variable(r((4, 2), 29), requires_grad=True)
    ids = riftco.tensor([2, 2, 2, 0], dtype="int64")
    ag.embedding(table, ids).sum().backward()
    np.testing.assert_array_equal(table.grad.numpy(), [[1, 1], [0, 0], [3, 3], [0, 0]])


def test_cross_entropy_with_ignored_targets():
    targets = riftco.tensor([1, -1, 3, 0, -1], dtype="int32")
    check(lambda logits: ag.cross_entropy(logits, targets), r((5, 4), 30))


def test_cross_entropy_value_is_mean_over_kept_rows():
    logits = r((3, 4), 31)
    lv = logits.numpy()
    targets = riftco.tensor([2, -1, 0], dtype="int32")
    loss = ag.cross_entropy(Variable(logits), targets).item()
    lse = np.log(np.exp(lv).sum(-1))
    expected = ((lse[0] - lv[0, 2]) + (lse[2] - lv[2, 0])) / 2
    assert abs(loss - expected) < 1e-12


@pytest.mark.parametrize("mode", ["materialized", "flash"])
@pytest.mark.parametrize("causal", [True, False])
def test_attention(mode, causal):
    q, k, v = r((1, 2, 4, 3), 32), r((1, 2, 4, 3), 33), r((1, 2, 4, 3), 34)
    check(lambda a, b, c: ag.attention(a, b, c, causal=causal, mode=mode), q, k, v)


def test_attention_explicit_scale_and_batch():
    q, k, v = (r((2, 1, 3, 2), s) for s in (35, 36, 37))
    check(lambda a, b, c: ag.attention(a, b, c, causal=True, scale=0.3, mode="flash"), q, k, v)


def test_custom_gradient_and_recompute_pass_gradcheck():
    def product(a, b):
        av, bv = a.value, b.value
        return ag.custom_gradient(
            ops.mul(av, bv), [a, b], lambda g: [ops.mul(g, bv), ops.mul(g, av)]
        )

    check(lambda a, b: product(a, b).tanh(), r((2, 3), 38), r((2, 3), 39))
    w = Variable(r((3, 3), 40), requires_grad=True)

    def block(h):
        return (h @ w).tanh()

    check(lambda x: ag.recompute(block, [x], [w]), r((2, 3), 41))


# -- the checker itself must be able to fail -------------------------------------------------------
def test_gradcheck_catches_a_wrong_rule():
    def wrong_square(a):
        av = a.value
        return ag.custom_gradient(ops.mul(av, av), [a], lambda g: [ops.mul(g, av)])  # misses 2x

    with pytest.raises(GradientError, match="analytic"):
        gradcheck(wrong_square, [r((2, 2), 42)])
    report = gradcheck(wrong_square, [r((2, 2), 42)], raise_on_failure=False)
    assert report["max_abs_error"] > 0.1
