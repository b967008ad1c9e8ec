"""Attach an externally computed Tensor to the graph with a user-supplied VJP.

The callback sees only tensors: it gets the upstream gradient and returns one Tensor per
input, in order, including inputs that need no gradient. Core validates the complete
result (count, type, shape, dtype, backend) before the engine accumulates any of it, and
the engine's private gradient context means a raising or malformed callback leaves every
public ``.grad`` untouched. Higher-order gradients through the callback are not recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import DeviceMismatchError, DTypeError, GradientError
from ..tensor import Tensor
from .graph import Variable, make

VJP = Callable[[Tensor], Sequence[Tensor]]


def custom_gradient(output: Tensor, inputs: Sequence[Variable], vjp: VJP) -> Variable:
    """A Variable whose value is ``output`` and whose backward calls ``vjp(upstream)``."""
    if not isinstance(output, Tensor):
        raise DTypeError(f"[custom_gradient] output must be a Tensor; got {type(output).__name__}")
    inputs = tuple(inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, Variable):
            raise DTypeError(
                f"[custom_gradient] inputs[{i}] must be a Variable; got {type(x).__name__}"
            )
        if x._value.backend is not output.backend:
            raise DeviceMismatchError(
                f"[custom_gradient] inputs[{i}] lives on {x.device} but the output on "
                f"{output.device}; every input and the output must share one backend"
            )
    if not callable(vjp):
        raise DTypeError(f"[custom_gradient] vjp must be callable; got {type(vjp).__name__}")
    specs = [(x._value.shape, x._value.dtype, x._value.backend, x.device) for x in inputs]

    def rule(g: Tensor) -> tuple[Tensor, ...]:
        result = vjp(g)
        if isinstance(result, Tensor) or not isinstance(result, (list, tuple)):
            raise GradientError(
                f"[custom_gradient] vjp must return a list or tuple of {len(specs)} Tensors; "
                f"got {type(result).__name__}"
            )
        if len(result) != len(specs):
            raise GradientError(
                f"[custom_gradient] vjp returned {len(result)} gradients for {len(specs)} "
                "inputs; return one per input, including inputs that need no gradient"
            )
        for i, (t, (shape, dtype, backend, device)) in enumerate(zip(result, specs, strict=False)):
            if not isinstance(t, Tensor):
                raise GradientError(
                    f"[custom_gradient] gradient {i} must be a Tensor; got {type(t).__name__}"
                )
            if t.shape != shape or t.dtype != dtype:
                raise GradientError(
                    f"[custom_gradient] gradient {i} has shape {t.shape} {t.dtype}; "
                    f"input {i} has {shape} {dtype}"
                )
            if t.backend is not backend:
                raise GradientError(
                    f"[custom_gradient] gradient {i} lives on {t.device}; input {i} on {device}"
                )
        return tuple(result)

    return make(output, "custom_gradient", inputs, rule)
