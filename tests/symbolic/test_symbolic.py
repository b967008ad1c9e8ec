"""riftco.symbolic: the seed's two examples, sharing, simplification, printing, errors.

Expected values come from closed forms in float64 numpy, never from the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import assert_close
from riftco.errors import GradientError, RiftcoError, ShapeError
from riftco.symbolic import (
    Builder,
    NodeType,
    Program,
    count_nodes,
    count_zeros,
    differentiate,
    differentiate_raw,
    format_tree,
    post_order,
    simplify,
)


def _t(a: np.ndarray, device: str = "cpu") -> riftco.Tensor:
    return riftco.tensor(np.asarray(a), device=device)


# -- the seed's first example: mean squared error --------------------------------------------
def _mse(n: int = 100):
    g = Builder("loss")
    y = g.variable(n, "y")
    y_hat = g.variable(n, "y_hat")
    diff = g.sub(y, y_hat)
    return g, y, y_hat, diff, g.squared_l2_norm(diff)


def test_mse_gradient_is_two_times_difference(rng: np.random.Generator) -> None:
    _, y, y_hat, _, loss = _mse()
    grad = differentiate(loss, y)
    a, b = rng.standard_normal((2, 4, 100))
    out_loss, out_grad = Program(loss, grad).evaluate({y: _t(a), y_hat: _t(b)})
    assert_close(out_loss, ((a - b) ** 2).sum(axis=1), rtol=1e-12)
    assert_close(out_grad, 2.0 * (a - b), rtol=1e-12, atol=1e-12)


def test_mse_difference_is_evaluated_once_per_evaluation(rng: np.random.Generator) -> None:
    _, y, y_hat, diff, loss = _mse()
    grad = differentiate(loss, y)
    reachable = post_order(grad)
    assert diff in reachable, "the gradient must reuse the loss graph's Sub node"
    assert sum(1 for n in reachable if n.kind is NodeType.SUB) == 1
    bind = {y: _t(rng.standard_normal(100)), y_hat: _t(rng.standard_normal(100))}
    for program in (Program(grad), Program(loss, grad)):
        for k in (1, 2, 3):
            program.evaluate(bind)
            assert program.evaluations(diff) == k
        assert program.counts_by_type()["Sub"] == 3
        if len(program.roots) == 2:  # the norm is shared by the loss and its derivative
            norm = next(n for n in reachable if n.kind is NodeType.LP_NORM)
            assert program.evaluations(norm) == 3


def test_mse_gradient_at_zero_difference_is_zero_not_nan() -> None:
    _, y, y_hat, _, loss = _mse(5)
    same = np.arange(5.0)
    (out,) = Program(differentiate(loss, y)).evaluate({y: _t(same), y_hat: _t(same)})
    assert_close(out, np.zeros(5))


# -- the seed's second example: ridge-regularised objective -------------------------------------
LAMBDA = 0.01


def _ridge():
    g = Builder("loss")
    u = g.variable(30, "u")
    expr = g.add(g.squared_l2_norm(g.sub(u, 1.0)), g.mul(LAMBDA, g.squared_l2_norm(u)))
    return g, u, expr


def test_ridge_three_zeros_are_folded_away() -> None:
    _, u, expr = _ridge()
    gg = Builder("gradient")
    raw = differentiate_raw(expr, u, gg)
    assert count_zeros(raw) == 3
    before = count_nodes(raw)
    simplified, rewrites = simplify(raw, gg)
    assert count_zeros(simplified) == 0
    assert rewrites > 0
    assert count_nodes(simplified) < before
    assert not any(n.is_const(0.0) for n in post_order(simplified))
    # a second run finds nothing left to do (fixed point)
    assert simplify(simplified, gg)[1] == 0


def test_ridge_gradient_values(rng: np.random.Generator) -> None:
    _, u, expr = _ridge()
    x = rng.standard_normal((3, 30))
    (out,) = Program(differentiate(expr, u)).evaluate({u: _t(x)})
    assert_close(out, 2 * (x - 1) + 2 * LAMBDA * x, rtol=1e-12, atol=1e-12)


def test_ridge_printed_structure_has_one_branch_per_term() -> None:
    g, u, expr = _ridge()
    grad = differentiate(expr, u)
    text = format_tree(grad)
    lines = text.splitlines()
    assert lines[0] == "Add[30]"
    top = [ln for ln in lines[1:] if ln.startswith(("|-- ", "^-- "))]
    assert len(top) == 2, text
    assert all(ln[4:].startswith("Scale[30]") for ln in top), text
    assert "(shared with loss)" in text
    assert "LpNormDer[30] p=2" in text and "Const[] v=0.01" in text
    # Var u appears several times in the picture but is one node, the loss graph's
    assert [n for n in post_order(grad) if n.kind is NodeType.VAR] == [u]
    assert u.owner is g and grad.owner is not g


# -- nodes, bindings, outputs --------------------------------------------------------------------
def test_constant_vector_is_one_scalar_plus_a_shape() -> None:
    g = Builder()
    c = g.constant(1.0, 784)
    assert c.shape == (784,) and c.payload == 1.0 and c.children == ()


def test_bindings_are_references_and_results_go_to_caller_output(rng: np.random.Generator) -> None:
    g = Builder()
    u = g.variable(4, "u")
    t = _t(rng.standard_normal((2, 4)))
    assert Program(u).evaluate({"u": t})[0] is t
    out = riftco.zeros((2, 4), dtype=riftco.float64)
    grad = differentiate(g.sum(g.mul(u, u)), u)
    res = Program(grad).evaluate({u: t}, out=out)[0]
    assert res is out
    assert_close(out, 2 * t.numpy())


def test_constant_gradient_fills_output() -> None:
    g = Builder()
    u = g.variable(3, "u")
    grad = differentiate(g.sum(g.mul(u, 2.5)), u)
    assert grad.is_const(2.5)
    out = riftco.zeros((2, 3), dtype=riftco.float64)
    Program(grad).evaluate({u: riftco.zeros((2, 3), dtype=riftco.float64)}, out=out)
    assert_close(out, np.full((2, 3), 2.5))


def test_shared_subexpressions_are_differentiated_once() -> None:
    g = Builder()
    u = g.variable(3, "u")
    a = u
    for _ in range(40):  # 2**40 paths as a tree, 40 nodes as a DAG
        a = g.add(a, a)
    grad = differentiate(g.sum(a), u)
    assert count_nodes(grad) < 200
    (out,) = Program(grad).evaluate({u: riftco.zeros((3,), dtype=riftco.float64)})
    assert_close(out, np.full(3, 2.0**40), rtol=0, atol=0)


def test_deep_chain_needs_no_recursion() -> None:
    g = Builder()
    u = g.variable(2, "u")
    a = u
    for _ in range(3000):
        a = g.mul(a, 1.0)
    grad = differentiate(g.sum(a), u)
    (out,) = Program(grad).evaluate({u: riftco.ones((2,), dtype=riftco.float64)})
    assert_close(out, np.ones(2))


# -- errors at build time ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "build",
    [
        lambda g, a, b: g.add(a, b),
        lambda g, a, b: g.sub(a, b),
        lambda g, a, b: g.mul(a, b),
        lambda g, a, b: g.softmax_cross_entropy(a, b),
    ],
    ids=["add", "sub", "mul", "softmax_cross_entropy"],
)
def test_shape_mismatch_raises_while_building(build) -> None:
    g = Builder()
    a, b = g.variable(30, "a"), g.variable(5, "b")
    n_before = len(g)
    with pytest.raises(ShapeError, match=r"\(30,\).*\(5,\)"):
        build(g, a, b)
    assert len(g) == n_before


def test_other_build_errors() -> None:
    g = Builder()
    v, w = g.variable(3, "v"), g.variable(3, "w")
    with pytest.raises(ShapeError, match=r"\[scale\].*\(3,\)"):
        g.scale(v, w)
    with pytest.raises(ShapeError, match=r"\[softmax\]"):
        g.softmax(g.sum(v))
    with pytest.raises(ShapeError, match=r"\[lp_norm\]"):
        g.lp_norm(v, 0.5)
    with pytest.raises(ShapeError, match=r"\[differentiate\].*scalar"):
        differentiate(v, v)


def test_non_diagonal_jacobians_are_refused_with_the_node_named() -> None:
    g = Builder()
    u = g.variable(4, "u")
    with pytest.raises(GradientError, match=r"Softmax\[4\]"):
        differentiate(g.sum(g.softmax(u)), u)
    with pytest.raises(GradientError, match=r"Scale\[4\]"):
        differentiate(g.sum(g.mul(g.sum(u), u)), u)


def test_evaluation_binding_errors(rng: np.random.Generator) -> None:
    g = Builder()
    u, w = g.variable(4, "u"), g.variable(4, "w")
    prog = Program(g.sum(g.mul(u, w)))
    with pytest.raises(ShapeError, match=r"\(4,\).*\(5,\)"):
        prog.evaluate({u: _t(np.zeros(5)), w: _t(np.zeros(4))})
    with pytest.raises(ShapeError, match="batch sizes differ"):
        prog.evaluate({u: _t(np.zeros((2, 4))), w: _t(np.zeros((3, 4)))})
    with pytest.raises(RiftcoError, match="no tensor bound"):
        prog.evaluate({u: _t(np.zeros(4))})


def test_unbatched_operand_meets_batched_one(rng: np.random.Generator) -> None:
    g = Builder()
    u, w = g.variable(4, "u"), g.variable(4, "w")
    loss = g.sum(g.mul(g.sub(u, w), g.sub(u, w)))
    a, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    out_loss, out_grad = Program(loss, differentiate(loss, u)).evaluate({u: _t(a), w: _t(b)})
    assert_close(out_loss, ((a - b) ** 2).sum(1), rtol=1e-12)
    assert_close(out_grad, 2 * (a - b), rtol=1e-12)


# -- softmax cross-entropy -------------------------------------------------------------------------
def _ce_reference(z: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = z.astype(np.float64)
    m = z.max(-1, keepdims=True)
    log_p = z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))
    return -(t * log_p).sum(-1), np.exp(log_p) - t


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_cross_entropy_finite_for_huge_logits(rng: np.random.Generator, dtype) -> None:
    g = Builder()
    z, t = g.variable(7, "z"), g.variable(7, "t")
    loss = g.softmax_cross_entropy(z, t)
    zv = (rng.standard_normal((5, 7)) * 1000).astype(dtype)
    tv = rng.random((5, 7))
    tv = (tv / tv.sum(1, keepdims=True)).astype(dtype)
    out_loss, out_grad = Program(loss, differentiate(loss, z)).evaluate({z: _t(zv), t: _t(tv)})
    assert np.isfinite(out_loss.numpy()).all() and np.isfinite(out_grad.numpy()).all()
    ref_loss, ref_grad = _ce_reference(zv, tv.astype(np.float64))
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert_close(out_loss, ref_loss, rtol=tol, atol=tol * 1000)
    assert_close(out_grad, ref_grad, rtol=tol, atol=tol)


def test_softmax_cross_entropy_gradient_is_softmax_minus_target_graph() -> None:
    g = Builder()
    z, t = g.variable(5, "z"), g.variable(5, "t")
    grad = differentiate(g.softmax_cross_entropy(z, t), z)
    assert grad.kind is NodeType.SUB
    assert grad.children[0].kind is NodeType.SOFTMAX and grad.children[1] is t


def test_matrix_shaped_variable_reduces_all_per_sample_axes(rng: np.random.Generator) -> None:
    g = Builder()
    u = g.variable((2, 3), "u")
    loss = g.add(g.lp_norm(g.sub(u, 0.5), 2), g.mean(g.exp(u)))
    x = rng.standard_normal((4, 2, 3))
    out_loss, out_grad = Program(loss, differentiate(loss, u)).evaluate({u: _t(x)})
    norm = np.sqrt(((x - 0.5) ** 2).sum(axis=(1, 2)))
    assert_close(out_loss, norm + np.exp(x).mean(axis=(1, 2)), rtol=1e-12)
    assert_close(out_grad, (x - 0.5) / norm[:, None, None] + np.exp(x) / 6, rtol=1e-12)
