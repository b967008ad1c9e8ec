"""riftco.symbolic: objectives built as expression graphs, differentiated once, compiled.

Build a loss with a :class:`Builder`, differentiate it with :func:`differentiate` (a second
graph that reuses the loss graph's nodes, simplified to a fixed point), compile with
:func:`compile_graph`, then per batch only bind tensors and evaluate. Evaluation goes
through the raw tensor ops, so it runs on any backend. :class:`CompiledObjective` packages
this as a trainer's loss head (``riftco train --label-smoothing``); docs/ARCHITECTURE.md
places it among the layers.
"""

from __future__ import annotations

from .builder import Builder
from .compile import Program, compile_graph
from .differentiate import differentiate, differentiate_raw
from .losses import (
    CompiledObjective,
    label_smoothing_objective,
    one_hot,
    smoothed_targets,
    softmax_cross_entropy_objective,
)
from .nodes import Graph, Node, NodeType, count_nodes, count_zeros, is_structural_zero, post_order
from .printing import format_tree, print_tree
from .simplify import simplify

__all__ = [
    "Builder", "Graph", "Node", "NodeType", "Program", "compile_graph", "differentiate",
    "differentiate_raw", "simplify", "format_tree", "print_tree", "count_nodes", "count_zeros",
    "is_structural_zero", "post_order", "CompiledObjective", "label_smoothing_objective",
    "softmax_cross_entropy_objective", "one_hot", "smoothed_targets",
]  # fmt: skip
