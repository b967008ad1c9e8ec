"""Typed expression nodes and the graph that owns them.

A node carries a type tag, its children, its per-sample shape and one scalar payload (a
constant's value, a power, the p of a norm, a variable's id). A constant vector is one
scalar plus a shape, so a vector of 784 ones costs one float. Nodes are created only
through a :class:`Graph` (in practice its subclass ``Builder``), which keeps them alive
together. A node also names its owner, so a gradient graph can tell which of its nodes it
borrowed from the loss graph, and so a gradient root returned on its own keeps its whole
graph alive. (Graph and nodes refer to each other; the cycle is collected as a unit, which
is the lifetime we want: one objective's nodes die together.)

Shapes describe one sample. A tensor bound at evaluation time may carry one extra leading
batch axis; reductions (sum, mean, norms, cross-entropy) reduce the per-sample axes only.
"""

from __future__ import annotations

import enum
import itertools

Shape = tuple[int, ...]


class NodeType(enum.Enum):
    VAR = "Var"
    CONST = "Const"
    ADD = "Add"
    SUB = "Sub"
    MUL = "Mul"  # elementwise, equal shapes (scalar x scalar included)
    SCALE = "Scale"  # scalar x vector; children (scalar, vector)
    POW = "Pow"  # payload: exponent
    LP_NORM = "LpNorm"  # payload: p; reduces the per-sample axes
    LP_NORM_DER = "LpNormDer"  # d||x||_p/dx; children (x, its LpNorm node); payload p
    SUM = "Sum"
    MEAN = "Mean"
    EXP = "Exp"
    LOG = "Log"
    SOFTMAX = "Softmax"  # last axis
    SOFTMAX_CE = "SoftmaxCE"  # children (logits, target); logsumexp(z) - <target, z>


_graph_ids = itertools.count(1)


class Node:
    """One vertex of an expression DAG. Immutable after creation; hashed by identity."""

    __slots__ = ("kind", "children", "shape", "payload", "name", "owner", "serial", "__weakref__")

    def __init__(
        self,
        kind: NodeType,
        children: tuple[Node, ...],
        shape: Shape,
        payload: float | None,
        owner: Graph,
        serial: int,
        name: str | None = None,
    ) -> None:
        self.kind = kind
        self.children = children
        self.shape = shape
        self.payload = payload
        self.name = name
        self.owner = owner
        self.serial = serial

    @property
    def number(self) -> float:
        """The payload of a node type that has one (a constant, a power, a norm's p)."""
        value = self.payload
        if value is None:
            raise TypeError(f"{self.label()} carries no number")
        return value

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def is_const(self, value: float | None = None) -> bool:
        if self.kind is not NodeType.CONST:
            return False
        return value is None or self.payload == value

    def label(self) -> str:
        """``Type[shape] payload``, the one-line form the printer and errors use."""
        shape = ",".join(map(str, self.shape))
        text = f"{self.kind.value}[{shape}]"
        if self.kind is NodeType.VAR:
            text = f"Var {self.name}[{shape}]"
        elif self.kind is NodeType.CONST:
            text += f" v={self.payload:g}"
        elif self.kind is NodeType.POW:
            text += f" p={self.payload:g}"
        elif self.kind in (NodeType.LP_NORM, NodeType.LP_NORM_DER):
            text += f" p={self.payload:g}"
        return text

    def __repr__(self) -> str:
        return f"<{self.label()} #{self.serial}>"


class Graph:
    """Arena that owns nodes: every node of one objective lives exactly as long as it.

    A gradient graph also keeps the graphs it borrows nodes from alive (``borrowed``), so a
    derivative never outlives the forward nodes it points at.
    """

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.id = next(_graph_ids)
        self.nodes: list[Node] = []
        self.borrowed: list[Graph] = []
        self._var_ids = itertools.count()

    def _new(
        self,
        kind: NodeType,
        children: tuple[Node, ...],
        shape: Shape,
        payload: float | None = None,
        name: str | None = None,
    ) -> Node:
        for child in children:
            owner = child.owner
            if owner is not self and owner not in self.borrowed:
                self.borrowed.append(owner)
        node = Node(kind, children, shape, payload, self, len(self.nodes), name)
        self.nodes.append(node)
        return node

    def owns(self, node: Node) -> bool:
        return node.owner is self

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes)"


def post_order(*roots: Node) -> list[Node]:
    """Every node reachable from ``roots``, children before parents, each exactly once.

    Explicit stack plus a visited set: a DAG with shared nodes is walked once per node, and
    a deep expression never touches Python's recursion limit.
    """
    order: list[Node] = []
    visited: set[int] = set()
    stack: list[tuple[Node, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for child in reversed(node.children):
            if id(child) not in visited:
                stack.append((child, False))
    return order


def count_nodes(*roots: Node) -> int:
    return len(post_order(*roots))


def _zero_flags(order: list[Node]) -> dict[int, bool]:
    flags: dict[int, bool] = {}
    for n in order:
        if n.kind is NodeType.CONST:
            flags[id(n)] = n.payload == 0
        elif n.kind in (NodeType.MUL, NodeType.SCALE):
            flags[id(n)] = any(flags[id(c)] for c in n.children)
        elif n.kind in (NodeType.ADD, NodeType.SUB):
            flags[id(n)] = all(flags[id(c)] for c in n.children)
        else:
            flags[id(n)] = False
    return flags


def is_structural_zero(node: Node) -> bool:
    """Zero by construction: a zero constant, a product with such a factor, or a sum of them.

    This is what the simplifier folds away; ``count_zeros`` reports it before and after.
    """
    return _zero_flags(post_order(node))[id(node)]


def count_zeros(*roots: Node) -> int:
    """Number of reachable nodes that are structurally zero (see ``is_structural_zero``)."""
    order = post_order(*roots)
    flags = _zero_flags(order)
    return sum(1 for n in order if flags[id(n)])
