"""Local rewrites, applied bottom-up and repeated until a pass changes nothing.

Derivative rules generate zeros and ones: every constant and every node independent of
the variable contributes a zero, and the variable's own derivative is a vector of ones.
Left in place they would be multiplied and added at every evaluation for the rest of
training, so they are folded here, once:

- zero folding: ``0 * x -> 0``, ``x + 0 -> x``, ``x - 0 -> x``, ``x - x -> 0``;
- one folding: ``1 * x -> x``, ``x ** 1 -> x``, ``x ** 0 -> 1``;
- constant folding: a node whose children are all constants becomes one constant (its
  value computed by the evaluator's own kernels, fed scalars).

Only nodes owned by the graph being simplified are rewritten. Nodes borrowed from the
loss graph are left as they are, so the gradient keeps pointing at the very nodes the
loss evaluates, and sharing survives simplification.
"""

from __future__ import annotations

from .compile import fold
from .nodes import Graph, Node, NodeType, post_order

MAX_PASSES = 64


def _zero(g: Graph, shape: tuple[int, ...]) -> Node:
    return g._new(NodeType.CONST, (), shape, 0.0)


def _rewrite(g: Graph, n: Node) -> Node | None:
    """The replacement for ``n``, or None when no rule applies."""
    kids = n.children
    if n.kind in (NodeType.VAR, NodeType.CONST):
        return None
    if all(c.kind is NodeType.CONST for c in kids):
        return g._new(NodeType.CONST, (), n.shape, fold(n, [c.number for c in kids]))
    if n.kind is NodeType.ADD:
        a, b = kids
        if a.is_const(0.0):
            return b
        if b.is_const(0.0):
            return a
    elif n.kind is NodeType.SUB:
        a, b = kids
        if b.is_const(0.0):
            return a
        if a is b:
            return _zero(g, n.shape)
    elif n.kind in (NodeType.MUL, NodeType.SCALE):
        a, b = kids
        if a.is_const(0.0) or b.is_const(0.0):
            return _zero(g, n.shape)
        if a.is_const(1.0) and b.shape == n.shape:
            return b
        if b.is_const(1.0) and a.shape == n.shape:
            return a
    elif n.kind is NodeType.POW:
        if n.payload == 1:
            return kids[0]
        if n.payload == 0:
            return g._new(NodeType.CONST, (), n.shape, 1.0)
    return None


def simplify_pass(root: Node, g: Graph) -> tuple[Node, int]:
    """One bottom-up pass; returns the new root and how many rewrites fired."""
    new: dict[Node, Node] = {}
    fired = 0
    for orig in post_order(root):
        if orig.owner is not g:
            new[orig] = orig
            continue
        n = orig
        kids = tuple(new[c] for c in n.children)
        if any(k is not c for k, c in zip(kids, n.children, strict=True)):
            n = g._new(n.kind, kids, n.shape, n.payload, n.name)
        replacement = _rewrite(g, n)
        if replacement is not None:
            fired += 1
            n = replacement
        new[orig] = n
    return new[root], fired


def simplify(root: Node, g: Graph, max_passes: int = MAX_PASSES) -> tuple[Node, int]:
    """Rewrite to a fixed point; returns the new root and the total number of rewrites."""
    total = 0
    for _ in range(max_passes):
        root, fired = simplify_pass(root, g)
        total += fired
        if not fired:
            return root, total
    return root, total
