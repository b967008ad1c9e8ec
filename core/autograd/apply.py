"""One generic way to put an op unit into the graph: forward through its public function,
backward through the VJP the unit declares.

So an op's derivative is written once, next to the op (``riftco.ops.<family>``), and every
differentiable op records its node the same way. ``args`` are the op's arguments in
protocol order; the positions the unit lists in ``differentiable`` may be Variables (or
Tensors, which become constants); the node's value is the first output.
"""

from __future__ import annotations

from typing import Any

from ..errors import DTypeError
from ..ops import OpUnit
from ..tensor import Tensor
from .graph import Variable, make


def as_variable(x: Any, op: str) -> Variable:
    """Variables pass through; a raw Tensor becomes a constant (no gradient) leaf."""
    if isinstance(x, Variable):
        return x
    if isinstance(x, Tensor):
        return Variable(x)
    raise DTypeError(f"[{op}] expects a Variable or Tensor; got {type(x).__name__}")


def apply(unit: OpUnit, *args: Any) -> Variable:
    """``unit``'s forward on the values of ``args``, recorded with ``unit.vjp``.

    On the path of every differentiable op, so it is written for speed: one pass over the
    differentiable positions, no helper calls for arguments that are already Variables."""
    vals = list(args)
    parents: list[Variable] = []
    for i in unit.differentiable:
        a = args[i]
        if type(a) is not Variable:
            a = as_variable(a, unit.name)
        parents.append(a)
        vals[i] = a._value
    saved = tuple(vals)
    out = unit.function(*saved)  # type: ignore[misc]  # differentiable units have both
    value = out[0] if type(out) is tuple else out
    ps = tuple(parents)
    flags = tuple([p.requires_grad for p in ps])
    vjp = unit.vjp
    return make(value, unit.name, ps, lambda g: vjp(g, saved, out, flags), True in flags)  # type: ignore[misc]
