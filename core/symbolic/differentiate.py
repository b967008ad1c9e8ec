"""Differentiate an objective once, into a second graph that reuses the first one's nodes.

The traversal follows the seed: an explicit stack of frames, each visited twice (first to
push its children, then to build its own derivative from theirs), and a cache keyed by
node, so every node is differentiated once even when several parents share it. Rules emit
nodes, never numbers, and put forward nodes straight in as children: the chain rule needs
``y - y_hat``, so the derivative points at the ``y - y_hat`` that already exists.

What a derivative node means (for a variable ``u`` of per-sample shape S):

- for a per-sample scalar node, its gradient with respect to ``u`` (shape S);
- for a node of shape S, the diagonal of its Jacobian (shape S). Elementwise operations
  have diagonal Jacobians, so this covers add/sub/mul/pow/exp/log chains, and a reduction
  turns a diagonal into a gradient.

Nodes whose Jacobian is not diagonal (a softmax of ``u`` on its own, a vector scaled by a
scalar that depends on ``u``) cannot be written this way and raise ``GradientError`` at
differentiation time, naming the node; the fused softmax cross-entropy covers the common
case. A node that does not depend on ``u`` has derivative zero, which is where the zeros
the simplifier removes come from (the seed's three zeros in the ridge objective).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import GradientError, ShapeError
from .builder import Builder
from .nodes import Node, NodeType, post_order
from .simplify import simplify

Rule = Callable[[Builder, Node, list[Node]], Node]


# -- rules: one per node type; ``d`` holds the children's derivatives --------------------------
def _add(g: Builder, node: Node, d: list[Node]) -> Node:
    return g.add(d[0], d[1])


def _sub(g: Builder, node: Node, d: list[Node]) -> Node:
    return g.sub(d[0], d[1])


def _mul(g: Builder, node: Node, d: list[Node]) -> Node:
    left, right = node.children
    # the product rule; ``right`` and ``left`` are forward nodes reused as children
    return g.add(g.mul(d[0], right), g.mul(left, d[1]))


def _pow(g: Builder, node: Node, d: list[Node]) -> Node:
    (x,), p = node.children, node.number
    return g.mul(g.mul(g.pow(x, p - 1), p), d[0])


def _exp(g: Builder, node: Node, d: list[Node]) -> Node:
    return g.mul(node, d[0])  # d exp(x) = exp(x) dx: reuse the forward exp node


def _log(g: Builder, node: Node, d: list[Node]) -> Node:
    return g.mul(g.pow(node.children[0], -1), d[0])


def _sum(g: Builder, node: Node, d: list[Node]) -> Node:
    return d[0]  # summing a diagonal Jacobian's rows gives the diagonal back


def _mean(g: Builder, node: Node, d: list[Node]) -> Node:
    return g.mul(1.0 / node.children[0].size, d[0])


def _lp_norm(g: Builder, node: Node, d: list[Node]) -> Node:
    return g.mul(g.lp_norm_der(node.children[0], node), d[0])


def _softmax_ce(g: Builder, node: Node, d: list[Node]) -> Node:
    logits, target = node.children
    # d/dz [logsumexp(z) - <t, z>] = softmax(z) - t ; d/dt = -z
    return g.sub(g.mul(g.sub(g.softmax(logits), target), d[0]), g.mul(logits, d[1]))


def _not_diagonal(why: str) -> Rule:
    def rule(g: Builder, node: Node, d: list[Node]) -> Node:
        raise GradientError(
            f"[differentiate] {node.label()} depends on the variable but {why}; the derivative "
            "graph stores diagonal Jacobians only (use softmax_cross_entropy for a softmax "
            "head, or rewrite the expression elementwise)"
        )

    return rule


def _scale(g: Builder, node: Node, d: list[Node]) -> Node:
    s, _ = node.children
    if not d[0].is_const(0.0):
        return _not_diagonal("its scalar factor depends on the variable (an outer product)")(
            g, node, d
        )
    return g.mul(s, d[1])


RULES: dict[NodeType, Rule] = {
    NodeType.ADD: _add,
    NodeType.SUB: _sub,
    NodeType.MUL: _mul,
    NodeType.SCALE: _scale,
    NodeType.POW: _pow,
    NodeType.EXP: _exp,
    NodeType.LOG: _log,
    NodeType.SUM: _sum,
    NodeType.MEAN: _mean,
    NodeType.LP_NORM: _lp_norm,
    NodeType.SOFTMAX_CE: _softmax_ce,
    NodeType.SOFTMAX: _not_diagonal("softmax mixes the components of its input"),
    NodeType.LP_NORM_DER: _not_diagonal("second derivatives of norms are not implemented"),
}


def differentiate_raw(root: Node, var: Node, g: Builder) -> Node:
    """The derivative of ``root`` with respect to ``var``, built in ``g``, not simplified."""
    if var.kind is not NodeType.VAR:
        raise ShapeError(
            f"[differentiate] can only differentiate with respect to a Var; got {var!r}"
        )
    if root.shape != ():
        raise ShapeError(
            f"[differentiate] the objective must be a scalar per sample; got {root.label()}"
        )
    cache: dict[Node, Node] = {}
    depends: dict[Node, bool] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, ready = stack[-1]
        if not ready:
            stack[-1] = (node, True)
            for child in node.children:
                if child not in cache:
                    stack.append((child, False))
            continue
        stack.pop()
        if node in cache:  # reached through two parents before either finished
            continue
        depends[node] = node is var or any(depends[c] for c in node.children)
        tangent = var.shape if node.is_scalar else node.shape
        if not depends[node]:
            cache[node] = g.zero(tangent)
        elif node is var:
            cache[node] = g.constant(1.0, var.shape)  # the identity, stored as its diagonal
        elif tangent != var.shape:
            raise GradientError(
                f"[differentiate] {node.label()} depends on variable {var.label()} but has "
                f"shape {node.shape}; only per-sample scalars and nodes shaped like the "
                f"variable {var.shape} have diagonal Jacobians"
            )
        else:
            cache[node] = RULES[node.kind](g, node, [cache[c] for c in node.children])
    return cache[root]


def differentiate(root: Node, var: Node, *, optimize: bool = True, name: str = "gradient") -> Node:
    """d(root)/d(var) as a new graph (owned by a fresh Builder) that shares root's nodes.

    With ``optimize`` the result goes through the rewrite passes until nothing changes;
    unreachable intermediate nodes are then dropped from the new graph.
    """
    g = Builder(name)
    result = differentiate_raw(root, var, g)
    if optimize:
        result, _ = simplify(result, g)
    g.nodes = [n for n in post_order(result) if n.owner is g]
    return result
