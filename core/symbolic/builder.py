"""The builder: the only way to make nodes, and the place where shapes are checked.

Because an objective is built once and evaluated many times, a shape mismatch is raised
here, while the graph is being built, rather than in the middle of a training loop. The
differentiator and the simplifier build through the same methods, so their output is
checked by the same rules.

Python numbers are accepted wherever a node is: next to a vector in ``add``/``sub`` a
number becomes a constant of that vector's shape (``sub(u, 1.0)`` is ``u - ones``); in
``mul`` it is a scalar constant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeGuard

from ..errors import DTypeError, ShapeError
from .nodes import Graph, Node, NodeType, Shape

Operand = Node | float | int


def _shape(shape: int | Sequence[int]) -> Shape:
    out = (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)
    if any(d <= 0 for d in out):
        raise ShapeError(f"[variable] dimensions must be positive; got {out}")
    return out


def _is_number(x: object) -> TypeGuard[float | int]:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _need_node(op: str, x: object) -> Node:
    if not isinstance(x, Node):
        raise DTypeError(
            f"[{op}] operands must be symbolic nodes or Python numbers; got {type(x).__name__}"
        )
    return x


class Builder(Graph):
    """A graph plus the checked factory methods that add nodes to it."""

    # -- leaves ----------------------------------------------------------------------------
    def variable(self, shape: int | Sequence[int], name: str | None = None) -> Node:
        var_id = next(self._var_ids)
        return self._new(NodeType.VAR, (), _shape(shape), float(var_id), name or f"x{var_id}")

    def constant(self, value: float, shape: int | Sequence[int] = ()) -> Node:
        if not _is_number(value) or not math.isfinite(value):
            raise DTypeError(f"[constant] value must be a finite Python number; got {value!r}")
        return self._new(NodeType.CONST, (), _shape(shape), float(value))

    def zero(self, shape: Shape) -> Node:
        return self.constant(0.0, shape)

    def _operand(self, op: str, x: Operand, like: Shape) -> Node:
        return self.constant(float(x), like) if _is_number(x) else _need_node(op, x)

    def _pair(self, op: str, a: Operand, b: Operand) -> tuple[Node, Node]:
        if _is_number(a) and _is_number(b):
            return self.constant(float(a)), self.constant(float(b))
        if _is_number(a):
            b = _need_node(op, b)
            return self.constant(float(a), b.shape), b
        a = _need_node(op, a)
        return a, self._operand(op, b, a.shape)

    def _equal_shapes(self, op: str, a: Node, b: Node) -> None:
        if a.shape != b.shape:
            raise ShapeError(
                f"[{op}] operand shapes differ: {a.label()} has shape {a.shape}, "
                f"{b.label()} has shape {b.shape}; symbolic ops do not broadcast "
                "(use mul/scale for scalar x vector)"
            )

    # -- elementwise ---------------------------------------------------------------------------
    def add(self, a: Operand, b: Operand) -> Node:
        a, b = self._pair("add", a, b)
        self._equal_shapes("add", a, b)
        return self._new(NodeType.ADD, (a, b), a.shape)

    def sub(self, a: Operand, b: Operand) -> Node:
        a, b = self._pair("sub", a, b)
        self._equal_shapes("sub", a, b)
        return self._new(NodeType.SUB, (a, b), a.shape)

    def mul(self, a: Operand, b: Operand) -> Node:
        """Elementwise product of equal shapes, or scalar x vector (a ``Scale`` node)."""
        a = self.constant(float(a)) if _is_number(a) else _need_node("mul", a)
        b = self.constant(float(b)) if _is_number(b) else _need_node("mul", b)
        if a.shape == b.shape:
            return self._new(NodeType.MUL, (a, b), a.shape)
        if a.is_scalar:
            return self.scale(a, b)
        if b.is_scalar:
            return self.scale(b, a)
        raise ShapeError(
            f"[mul] operand shapes differ: {a.label()} has shape {a.shape}, {b.label()} has "
            f"shape {b.shape}; expected equal shapes or one scalar"
        )

    def scale(self, s: Operand, v: Node) -> Node:
        """Scalar times vector; the scalar is always the first child."""
        s = self.constant(float(s)) if _is_number(s) else _need_node("scale", s)
        v = _need_node("scale", v)
        if not s.is_scalar:
            raise ShapeError(
                f"[scale] the factor must be a scalar; got {s.label()} with shape {s.shape} "
                f"for a vector of shape {v.shape}"
            )
        if v.is_scalar:
            return self._new(NodeType.MUL, (s, v), ())
        return self._new(NodeType.SCALE, (s, v), v.shape)

    def pow(self, x: Operand, p: float) -> Node:
        """``x ** p`` for a Python number ``p``; ``pow(x, 1)`` is ``x`` itself (no node)."""
        x = self._operand("pow", x, ())
        if not _is_number(p):
            raise DTypeError(f"[pow] the exponent must be a Python number; got {type(p).__name__}")
        if p == 1:
            return x
        return self._new(NodeType.POW, (x,), x.shape, float(p))

    def exp(self, x: Operand) -> Node:
        x = self._operand("exp", x, ())
        return self._new(NodeType.EXP, (x,), x.shape)

    def log(self, x: Operand) -> Node:
        x = self._operand("log", x, ())
        return self._new(NodeType.LOG, (x,), x.shape)

    # -- reductions -------------------------------------------------------------------------------
    def sum(self, x: Node) -> Node:
        return self._new(NodeType.SUM, (_need_node("sum", x),), ())

    def mean(self, x: Node) -> Node:
        return self._new(NodeType.MEAN, (_need_node("mean", x),), ())

    def lp_norm(self, x: Node, p: float = 2) -> Node:
        x = _need_node("lp_norm", x)
        if not _is_number(p) or not p >= 1:
            raise ShapeError(f"[lp_norm] p must be a number >= 1 (a norm); got {p!r}")
        return self._new(NodeType.LP_NORM, (x,), (), float(p))

    def lp_norm_der(self, x: Node, norm: Node) -> Node:
        """d||x||_p / dx, sharing the forward norm node so it is evaluated once."""
        if norm.kind is not NodeType.LP_NORM or norm.children[0] is not x:
            raise ShapeError(f"[lp_norm_der] expected the LpNorm node of {x.label()}; got {norm!r}")
        return self._new(NodeType.LP_NORM_DER, (x, norm), x.shape, norm.payload)

    def squared_l2_norm(self, x: Node) -> Node:
        """Not a node type: ``pow(lp_norm(x, 2), 2)``, as in the seed."""
        return self.pow(self.lp_norm(x, 2), 2)

    # -- softmax family -------------------------------------------------------------------------
    def softmax(self, x: Node) -> Node:
        x = _need_node("softmax", x)
        if x.is_scalar:
            raise ShapeError(
                f"[softmax] needs a vector (softmax over the last axis); got {x.label()}"
            )
        return self._new(NodeType.SOFTMAX, (x,), x.shape)

    def softmax_cross_entropy(self, logits: Node, target: Operand) -> Node:
        """``logsumexp(z) - <t, z>``: the cross-entropy of softmax(z) when ``t`` sums to 1.

        Written this way the gradient is exactly ``softmax(z) - t`` for any ``t`` (the seed's
        one-line rule), and the forward subtracts the max before exponentiating.
        """
        logits = _need_node("softmax_cross_entropy", logits)
        if len(logits.shape) != 1:
            raise ShapeError(
                f"[softmax_cross_entropy] logits must be a vector [V] per sample; "
                f"got {logits.label()}"
            )
        target = self._operand("softmax_cross_entropy", target, logits.shape)
        self._equal_shapes("softmax_cross_entropy", logits, target)
        return self._new(NodeType.SOFTMAX_CE, (logits, target), ())
