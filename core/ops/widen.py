"""Low-precision operands computed in float32 on their own backend: cast in, op, cast out.

An op on float16/bfloat16 operands computes in float32 and rounds once to its output
dtype (docs/DECISIONS.md, "Half precision"). A backend that declares a low-precision dtype
runs the memory methods and ``cast`` on it itself; every other op it has not listed in
``low_precision_ops`` runs here: the low-precision tensor operands are cast to float32 by
the backend's own ``cast``, the op runs in float32 on the same backend (its native method,
or the composite: a fused op's composite is then rounded once too, not at every
primitive), and each output is cast back to the dtype the op promises. Nothing leaves the
device and no dtype changes that the op's contract does not name.

So a backend gets every op in half precision with six methods, and moves the ops that
matter to native half-storage kernels one at a time; conformance checks both the same way.
The price of the widened path is the extra passes over memory the two casts make.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..dtypes import LOW_PRECISION, float32
from ..errors import BackendContractError
from ..tensor import Tensor

#: ``cast(x, dtype)`` and ``Out(shape, dtype)``, handed in by dispatch (which this module
#: must not import: dispatch imports it).
Cast = Callable[[Tensor, Any], Tensor]


def needed(unit: Any, backend: Any, args: tuple[Any, ...], method: Any) -> bool:
    """True when ``unit`` on ``args`` runs widened on ``backend``: half operands, and not a
    method the backend runs in half itself (``method`` is None where the composite runs:
    core's composite is always widened, so it rounds once). A half-declaring backend runs
    the memory methods and ``cast`` itself: they move or convert the bits.

    On every call of a backend that declares a half dtype, so the operands are looked at
    first: a float32 call returns after that scan, without the name lookups."""
    for a in args:
        if type(a) is Tensor:
            if a.dtype in LOW_PRECISION:
                break
        elif type(a) is list and a and type(a[0]) is Tensor and a[0].dtype in LOW_PRECISION:
            break
    else:
        return False
    if unit.kind == "memory" or unit.name == "cast":
        return False
    return method is None or unit.name not in getattr(backend, "low_precision_ops", ())


def run(
    unit: Any, backend: Any, args: tuple[Any, ...], expect: Any, again: Any, cast: Cast, out: Any
) -> Any:
    """``again(unit, backend, args, expect)`` is dispatch itself, called on the widened
    operands with the float32 form of ``expect``; its results are cast to ``expect``."""
    if expect is None:  # in-place ops on half operands are refused before dispatch
        raise BackendContractError(
            f"[{unit.name}] works in place and has no float32 path for low-precision "
            f"operands on {backend.name}:{backend.device_index}"
        )
    wide = tuple(_widen(a, cast) for a in args)
    if isinstance(expect, Tensor):
        expect = out(expect.shape, expect.dtype)
    if isinstance(expect, out):
        return _narrow(again(unit, backend, wide, _wide(expect, out)), expect, cast)
    outs = again(unit, backend, wide, type(expect)(_wide(e, out) for e in expect))
    return type(expect)(_narrow(o, e, cast) for o, e in zip(outs, expect, strict=True))


def _widen(a: Any, cast: Cast) -> Any:
    if type(a) is Tensor:
        return cast(a, float32) if a.dtype in LOW_PRECISION else a
    if type(a) is list and a and type(a[0]) is Tensor:
        return [_widen(x, cast) for x in a]
    return a


def _wide(e: Any, out: Any) -> Any:
    return out(e.shape, float32) if e.dtype in LOW_PRECISION else e


def _narrow(t: Tensor, e: Any, cast: Cast) -> Tensor:
    return t if t.dtype == e.dtype else cast(t, e.dtype)
