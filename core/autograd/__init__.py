"""riftco.autograd: reverse-mode differentiation over raw tensor ops.

``Variable`` wraps a Tensor in a graph node; its operators and methods (installed below
from the op modules, so each op's forward and VJP stay side by side) record the graph.
``backward()`` replaces the gradients of every reachable leaf: no accumulation across
calls, no ``zero_grad`` needed. See graph.py for the engine and docs/ARCHITECTURE.md.
"""

# ruff: noqa: F401  (the imports are the export list: __all__ is computed from them below)
from __future__ import annotations

from typing import Any

from . import operations as _o
from .custom_gradient import custom_gradient
from .domain import flush as check_domain
from .domain import set_domain_checks
from .fused import (
    add_layer_norm,
    attention,
    attention_qkv,
    cross_entropy,
    embedding,
    gelu,
    layer_norm,
    linear,
    linear_gelu,
    rms_norm,
    softmax,
)
from .gradcheck import gradcheck
from .graph import Variable, enable_grad, graph_stats, no_grad
from .indexing import getitem
from .operations import (
    add,
    as_variable,
    broadcast_to,
    cast,
    concatenate_last_axis,
    div,
    exp,
    log,
    matmul,
    max,
    mean,
    mul,
    neg,
    permute,
    reshape,
    split_last_axis,
    sqrt,
    sub,
    sum,
    sum_to_shape,
    tanh,
    transpose,
)
from .operations import pow as power
from .recompute import recompute


def _install() -> None:
    """Operators and methods of Variable; a Python number works on either side."""
    v: Any = Variable
    v.__add__ = _o.add
    v.__radd__ = _o.add
    v.__sub__ = _o.sub
    v.__rsub__ = _o.rsub
    v.__mul__ = _o.mul
    v.__rmul__ = _o.mul
    v.__truediv__ = _o.div
    v.__rtruediv__ = _o.rdiv
    v.__neg__ = _o.neg
    v.__pow__ = _o.pow
    v.__matmul__ = _o.matmul
    v.__rmatmul__ = lambda self, other: _o.matmul(other, self)
    v.__getitem__ = getitem
    for name in (
        "sum", "mean", "max", "reshape", "transpose", "permute", "broadcast_to",
        "sum_to_shape", "exp", "log", "sqrt", "tanh",
    ):  # fmt: skip
        setattr(v, name, getattr(_o, name))
    v.astype = _o.cast
    v.gelu = gelu
    v.softmax = softmax
    v.T = property(lambda self: _o.transpose(self))


_install()

#: Every public name imported above from this package's modules: the imports are the one
#: list of them (type checkers and editors read those; this repeats them for ``import *``).
__all__ = [
    name
    for name, value in list(globals().items())
    if not name.startswith("_") and getattr(value, "__module__", "").startswith("riftco.autograd.")
]
