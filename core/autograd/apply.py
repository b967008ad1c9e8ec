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
    """``unit``'s forward on the values of ``args``, recorded with ``unit.vjp``."""
    vals = list(args)
    parents = []
    for i in unit.differentiable:
        v = as_variable(args[i], unit.name)
        parents.append(v)
        vals[i] = v._value
    fn = unit.function
    assert fn is not None and unit.vjp is not None, f"{unit.name} is not differentiable"
    saved = tuple(vals)
    out = fn(*saved)
    value = out[0] if isinstance(out, tuple) else out
    needs = tuple(p.requires_grad for p in parents)
    vjp = unit.vjp
    return make(value, unit.name, tuple(parents), lambda g: vjp(g, saved, out, needs))
