"""Random objectives: the compiled gradient against finite differences and against autograd.

Objectives are drawn from the class the differentiator supports (elementwise chains over
the variable, reductions to per-sample scalars, scalar arithmetic, the fused softmax
cross-entropy). Finite differences are centred, in float64, written with plain numpy
perturbations of the bound tensor.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import riftco
from helpers import assert_close
from riftco.symbolic import Builder, Node, NodeType, Program, differentiate, post_order

V, N = 5, 3


def _vector(g: Builder, u: Node, w: Node, rng: np.random.Generator, depth: int) -> Node:
    if depth == 0:
        pick = rng.integers(4)
        return u if pick < 2 else (w if pick == 2 else g.constant(float(rng.uniform(0.5, 1.5)), V))
    a = _vector(g, u, w, rng, depth - 1)
    op = rng.integers(8)
    if op == 0:
        return g.add(a, _vector(g, u, w, rng, depth - 1))
    if op == 1:
        return g.sub(a, _vector(g, u, w, rng, depth - 1))
    if op == 2:
        return g.mul(a, _vector(g, u, w, rng, depth - 1))
    if op == 3:
        return g.pow(a, int(rng.integers(2, 4)))
    if op == 4:
        return g.exp(g.mul(0.5, a))
    if op == 5:
        return g.log(g.add(g.exp(a), 1.0))  # softplus: always positive inside the log
    if op == 6:
        return g.mul(float(rng.uniform(-2, 2)), a)
    return g.sub(1.0, a)


def _scalar(g: Builder, u: Node, w: Node, rng: np.random.Generator) -> Node:
    x = _vector(g, u, w, rng, int(rng.integers(1, 4)))
    head = rng.integers(6)
    if head == 0:
        return g.sum(x)
    if head == 1:
        return g.mean(x)
    if head == 2:
        return g.lp_norm(x, 2)
    if head == 3:
        return g.squared_l2_norm(x)
    if head == 4:
        return g.lp_norm(x, 3)
    return g.softmax_cross_entropy(x, g.softmax(w))  # a target that sums to 1


def random_objective(seed: int) -> tuple[Node, Node, Node]:
    rng = np.random.default_rng(seed)
    g = Builder("loss")
    u, w = g.variable(V, "u"), g.variable(V, "w")
    loss = _scalar(g, u, w, rng)
    for _ in range(int(rng.integers(0, 3))):
        other = _scalar(g, u, w, rng)
        loss = [g.add, g.sub, g.mul][int(rng.integers(3))](loss, other)
    if rng.integers(2):
        loss = g.log(g.add(g.mul(loss, loss), 1.0))
    return loss, u, w


def _inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + seed)
    return rng.uniform(-1, 1, (N, V)), rng.uniform(-1, 1, (N, V))


SEEDS = list(range(16))


@pytest.mark.parametrize("seed", SEEDS)
def test_random_objective_matches_finite_differences(seed: int) -> None:
    loss, u, w = random_objective(seed)
    a, b = _inputs(seed)
    wt = riftco.tensor(b)
    program = Program(loss, differentiate(loss, u))
    _, grad = program.evaluate({u: riftco.tensor(a), w: wt})
    value = Program(loss)
    h = 1e-6
    fd = np.zeros_like(a)
    for i in range(V):  # samples are independent: perturb coordinate i of every sample
        step = np.zeros_like(a)
        step[:, i] = h
        hi = value.evaluate({u: riftco.tensor(a + step), w: wt})[0].numpy()
        lo = value.evaluate({u: riftco.tensor(a - step), w: wt})[0].numpy()
        fd[:, i] = (hi - lo) / (2 * h)
    assert_close(grad, fd, rtol=1e-5, atol=1e-6, msg=f"seed {seed}")


def _autograd_value(loss: Node, bindings: dict, ag) -> object:
    """The same objective through riftco.autograd, node by node (an independent path)."""
    vals: dict[Node, object] = {}
    for n in post_order(loss):
        k, c = n.kind, [vals[x] for x in n.children]
        if k is NodeType.VAR:
            vals[n] = bindings[n]
        elif k is NodeType.CONST:  # vectors as tensors, scalars as Python numbers
            shape = (N, *n.shape)
            full = riftco.full(shape, n.payload, dtype=riftco.float64)
            vals[n] = ag.Variable(full) if n.shape else n.payload
        elif k is NodeType.ADD:
            vals[n] = c[0] + c[1] if not isinstance(c[0], float) else c[1] + c[0]
        elif k is NodeType.SUB:
            vals[n] = c[0] - c[1] if not isinstance(c[0], float) else -c[1] + c[0]
        elif k in (NodeType.MUL, NodeType.SCALE):
            a, b = c
            if isinstance(a, float) or isinstance(b, float):
                vals[n] = b * a if isinstance(a, float) else a * b
            elif a.shape != b.shape:
                vals[n] = a.reshape(N, 1).broadcast_to((N, V)) * b
            else:
                vals[n] = a * b
        elif k is NodeType.POW:
            vals[n] = c[0] ** n.payload
        elif k is NodeType.EXP:
            vals[n] = c[0].exp()
        elif k is NodeType.LOG:
            vals[n] = c[0].log()
        elif k is NodeType.SUM:
            vals[n] = c[0].sum(axes=-1)
        elif k is NodeType.MEAN:
            vals[n] = c[0].mean(axes=-1)
        elif k is NodeType.LP_NORM:
            p = n.payload
            x = c[0] * c[0] if p == 2 else (c[0] * c[0]) ** (p / 2)
            vals[n] = x.sum(axes=-1) ** (1.0 / p)
        elif k is NodeType.SOFTMAX:
            vals[n] = c[0].softmax()
        elif k is NodeType.SOFTMAX_CE:
            z, t = c
            lse = z.exp().sum(axes=-1).log()  # inputs are small: no shift needed here
            vals[n] = lse - (t * z).sum(axes=-1)
        else:  # pragma: no cover - the generator makes no other node
            raise AssertionError(k)
    return vals[loss]


@pytest.mark.parametrize("seed", SEEDS[:8])
def test_random_objective_matches_autograd(seed: int) -> None:
    try:
        ag = importlib.import_module("riftco.autograd")
        variable = ag.Variable
    except (ImportError, AttributeError):
        pytest.skip("riftco.autograd is not available yet")
    loss, u, w = random_objective(seed)
    a, b = _inputs(seed)
    uv = variable(riftco.tensor(a), requires_grad=True)
    wv = variable(riftco.tensor(b))
    total = _autograd_value(loss, {u: uv, w: wv}, ag).sum()
    if total.requires_grad:
        total.backward()
        expected = uv.grad
    else:  # this draw does not depend on u at all
        expected = np.zeros_like(a)
    (grad,) = Program(differentiate(loss, u)).evaluate({u: riftco.tensor(a), w: riftco.tensor(b)})
    assert_close(grad, expected, rtol=1e-9, atol=1e-10, msg=f"seed {seed}")
