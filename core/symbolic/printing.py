"""A tree view of an expression DAG, in the seed's style.

Each line shows a node's type, per-sample shape and payload. A node owned by another
graph (a gradient reusing a loss node) is marked ``(shared with <graph>)`` and shown as
one line with arrows to its children instead of being expanded again: that is the
sharing the seed's figure draws. A node that appears a second time inside the printed
graph is marked ``(again)`` and not expanded twice.
"""

from __future__ import annotations

import sys
from typing import TextIO

from .nodes import Graph, Node


def _tag(node: Node, graph: Graph | None) -> str:
    owner = node.owner
    if graph is None or owner is graph:
        return ""
    return f"  (shared with {owner.name if owner is not None else 'another graph'})"


def format_tree(root: Node, graph: Graph | None = None) -> str:
    """The tree rooted at ``root`` as text; ``graph`` defaults to the root's owner."""
    graph = root.owner if graph is None else graph
    lines: list[str] = []
    seen: set[Node] = set()
    # explicit stack of (node, prefix for this line, prefix for its children)
    stack: list[tuple[Node, str, str]] = [(root, "", "")]
    while stack:
        node, head, tail = stack.pop()
        text = head + node.label()
        foreign = graph is not None and node.owner is not graph
        if foreign:
            text += _tag(node, graph)
            if node.children:
                text += " ---> " + ", ".join(c.label() for c in node.children)
            lines.append(text)
            continue
        if node in seen and node.children:
            lines.append(text + "  (again)")
            continue
        seen.add(node)
        lines.append(text)
        kids = node.children
        for i in range(len(kids) - 1, -1, -1):
            last = i == len(kids) - 1
            stack.append(
                (kids[i], tail + ("^-- " if last else "|-- "), tail + ("    " if last else "|   "))
            )
    return "\n".join(lines)


def print_tree(root: Node, graph: Graph | None = None, file: TextIO | None = None) -> None:
    print(format_tree(root, graph), file=file or sys.stdout)
